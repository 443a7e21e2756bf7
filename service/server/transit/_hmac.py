"""Transit's HMACs, as OpenBao makes and checks them: ``hmac/:name[/:algorithm]`` and the
``hmac`` half of ``verify/:name[/:algorithm]`` (``verify`` picks the half, ``_verify``).

Every version of every key has an HMAC key (``version_hmac_key``: an hmac key's material, any
other key's HKDF of its version's material; docs/TRANSIT.md, Key types). An HMAC is written
``vault:v<version>:<base64>``. The checks come in OpenBao's order and words (its
``path_hmac.go``): the key, the version, the algorithm, then the items, each refused alone in a
batch. A verification compares in constant time (``hmac.compare_digest``) and never tries
another version than the one the HMAC names. An ``hmac`` batch in the common shape is made as
one column (``_hmac_column``), any other item by item: the same answer.
"""

from __future__ import annotations

import binascii
import hmac
from typing import Any

from pybase64 import b64decode as _fast_b64decode
from pybase64 import b64encode_as_string

from sealflow import engine
from sealflow.service.keystore import KeyInfo, KeyStore, version_hmac_key

from . import _hmac_column
from ._batch import cut_envelope
from ._checks import key_of
from ._ciphertext import CiphertextError, b64decode
from ._hmac_column import Column
from ._items import too_many_items
from ._utility import HASHES as UTILITY_HASHES
from ._wire import Body, Reply, as_int, as_str, atoi, envelope, user_error

# OpenBao's names (keysutil's HashTypeMap) as hashlib's; ``none`` names no hash for an HMAC.
HASHES = {"sha1": "sha1", **UTILITY_HASHES}
PREFIX = "vault:v"
# OpenBao prints the unknown algorithm's number (0) with %q: this is what it answers.
_UNSUPPORTED = "unsupported algorithm '\\x00'"


def algorithm(fields: Body, url: str | None, *names: str) -> str:
    """The algorithm the path names, else the first of ``names`` the body gives, else
    sha2-256 (an empty value counts as not given, as in OpenBao)."""
    if url:
        return url
    for name in names:
        value = as_str(fields, name)
        if value:
            return value
    return "sha2-256"


def _batch(fields: Body) -> list[Any] | None:
    raw = fields.get("batch_input")
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise user_error("failed to parse batch input: batch_input must be a list of objects")
    if not raw:
        raise user_error("missing batch input to process")
    for item in raw:
        for name in ("input", "hmac", "reference"):
            if item.get(name) is not None and not isinstance(item[name], str):
                raise user_error(f"failed to parse batch input: '{name}' must be a string")
    return raw


def _key_material(store: KeyStore, key: KeyInfo, version: int) -> bytes:
    return version_hmac_key(key, version, store.key_material(key.name, version))


def generate(
    store: KeyStore, name: str, fields: Body, url: str | None, column: Column | None = None
) -> Reply:
    """``hmac/:name[/:algorithm]``: ``hmac``, or ``batch_results`` of ``hmac``/``error`` and
    ``reference``; ``column``, a batch read from the unparsed body (``_hmac_column``; then
    ``fields`` is empty). The key must be known to the caller's cache or readable now: call it
    off the event loop unless ``_checks.known``."""
    version = as_int(fields, "key_version")
    chosen = algorithm(fields, url, "algorithm")
    key = key_of(store, name, "hmac")
    if version == 0:
        version = key.latest
    elif (
        version != key.latest
        and key.min_encryption_version > 0
        and version < (key.min_encryption_version)
    ):
        raise user_error("cannot generate HMAC: version is too old (disallowed by policy)")
    if version < 0:
        raise user_error("key version does not exist (cannot be negative)")
    if version > key.latest:
        raise user_error(f"key version does not exist; latest key version is {key.latest}")
    secret = _key_material(store, key, version)
    if chosen not in HASHES:
        raise user_error(_UNSUPPORTED)
    raw = fields.get("batch_input")
    prefix = f"{PREFIX}{version}:"
    if column is None and raw is None:
        if "input" not in fields or fields["input"] is None:
            raise user_error("missing input for HMAC")
        try:
            data = b64decode(as_str(fields, "input"))
        except CiphertextError as exc:
            raise user_error(_bad_input(exc)) from None
        return envelope({"hmac": prefix + b64encode_as_string(_tags(chosen, secret, [data])[0])})
    if column is None:
        if not isinstance(raw, list):
            raise user_error("failed to parse batch input: batch_input must be a list of objects")
        if not raw:
            raise user_error("missing batch input to process")
        column = _hmac_column.from_items(raw)
    if column is not None:  # the usual batch: no Python step per item
        head, tail = cut_envelope()
        return [head, _hmac_column.rows(chosen, secret, prefix, column), tail]
    assert isinstance(raw, list)
    results: list[dict[str, Any]] = []
    made: list[dict[str, Any]] = []  # the rows an HMAC goes into, in the order of ``values``
    values: list[bytes] = []
    for item in raw:
        text = item.get("input") if isinstance(item, dict) else 0
        reference = item.get("reference") if isinstance(item, dict) else 0
        if not (isinstance(text, str) or text is None) or not (
            isinstance(reference, str) or reference is None
        ):
            raise user_error("failed to parse batch input: items must be objects of strings")
        reference = reference or ""
        if text is None:
            results.append({"error": "missing input for HMAC", "reference": reference})
            continue
        try:
            values.append(_fast_b64decode(text, validate=True))
        except (binascii.Error, ValueError):  # not canonical: Go's rules, Go's words
            try:
                values.append(b64decode(text))
            except CiphertextError as exc:
                results.append({"error": _bad_input(exc), "reference": reference})
                continue
        row = {"hmac": "", "reference": reference}
        results.append(row)
        made.append(row)
    encoded = map(b64encode_as_string, _tags(chosen, secret, values))
    for row, tag in zip(made, encoded, strict=True):
        row["hmac"] = prefix + tag
    return envelope({"batch_results": results})


def bounded(fields: Body, limit: int) -> None:
    """400 for a ``batch_input`` of more than ``limit`` items (``max_batch_items``), as every
    Transit batch here, before any item is read."""
    batch = fields.get("batch_input")
    if isinstance(batch, list) and len(batch) > limit:
        raise too_many_items(limit)


def _bad_input(exc: CiphertextError) -> str:
    return f"unable to decode input as base64: {exc}"


def _strings(item: dict[str, Any]) -> bool:
    """Whether the item's fields an HMAC reads are strings or absent (OpenBao decodes the
    items into strings: anything else fails the whole request)."""
    for name in ("input", "reference", "hmac"):
        value = item.get(name)
        if value is not None and not isinstance(value, str):
            return False
    return True


def _tags(chosen: str, secret: bytes, values: list[bytes]) -> list[memoryview] | list[bytes]:
    """The HMAC of each value under ``secret``: several SHA-2 and SHA-3 ones in one native call
    (the key's pads hashed once: ``engine.hmac_many``), one in a native call of its own
    (``engine.hmac``: 1.5 us less than hashlib's one-shot for 1 KiB, which makes an OpenSSL
    MAC context each call), sha1 (not native) through hashlib."""
    if chosen == "sha1":
        return [hmac.digest(secret, value, "sha1") for value in values]
    if len(values) == 1:
        return [engine.hmac(chosen, secret, values[0])]
    size = engine.Digest(chosen).size
    out = memoryview(engine.hmac_many(chosen, secret, values))
    return [out[i : i + size] for i in range(0, len(out), size)]


def verify(store: KeyStore, name: str, fields: Body, url: str | None) -> bytes:
    """The ``hmac`` half of ``verify/:name[/:algorithm]``: ``valid``, or ``batch_results``
    of ``valid`` (left out when false, as OpenBao's JSON leaves it) or ``error``, and
    ``reference``."""
    chosen = algorithm(fields, url, "hash_algorithm", "algorithm")
    key = key_of(store, name, "verify")
    if chosen not in HASHES:
        raise user_error(f'invalid hash algorithm "{chosen}"')
    batch = _batch(fields)
    items = batch if batch is not None else [{"input": fields.get("input") or "", **_hmac(fields)}]
    secrets: dict[int, bytes] = {}
    results: list[dict[str, Any]] = []
    for item in items:
        reference = item.get("reference") or ""
        try:
            valid = _check(store, key, chosen, item, secrets)
        except _Refused as exc:
            if batch is None:
                raise user_error(str(exc)) from None
            results.append({"error": str(exc), "reference": reference})
            continue
        results.append(
            {"valid": True, "reference": reference} if valid else {"reference": reference}
        )
    if batch is None:
        return envelope({"valid": bool(results[0].get("valid"))})
    return envelope({"batch_results": results})


def _hmac(fields: Body) -> dict[str, str]:
    given = fields.get("hmac")
    return {} if given is None else {"hmac": as_str(fields, "hmac")}


class _Refused(Exception):
    """An item OpenBao refuses; its message is OpenBao's."""


def _check(
    store: KeyStore, key: KeyInfo, chosen: str, item: dict[str, Any], secrets: dict[int, bytes]
) -> bool:
    text = item.get("input")
    if text is None:
        raise _Refused("missing input")
    try:
        data = b64decode(text)
    except CiphertextError as exc:
        raise _Refused(_bad_input(exc)) from None
    given = item.get("hmac")
    if given is None:
        raise _Refused("missing hmac")
    if not given.startswith(PREFIX):
        raise _Refused("invalid HMAC to verify: no prefix")
    number, sep, encoded = given[len(PREFIX) :].partition(":")
    if not sep:
        raise _Refused("invalid HMAC: wrong number of fields")
    version = atoi(number)
    if version is None:
        raise _Refused("invalid HMAC: version number could not be decoded")
    try:
        tag = b64decode(encoded)
    except CiphertextError as exc:
        raise _Refused(f"unable to decode verification HMAC as base64: {exc}") from None
    if version > key.latest:
        raise _Refused("invalid HMAC: version is too new")
    if key.min_decryption_version > 0 and version < key.min_decryption_version:
        raise _Refused("cannot verify HMAC: version is too old (disallowed by policy)")
    secret = secrets.get(version)
    if secret is None:
        secret = secrets[version] = _key_material(store, key, version)
    return hmac.compare_digest(_tags(chosen, secret, [data])[0], tag)
