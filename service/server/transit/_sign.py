"""Transit's ``sign/:name[/:hash_algorithm]`` and the signature branch of
``verify/:name[/:hash_algorithm]`` (OpenBao's path_sign_verify.go), over ``_signer``.

Fields are read and checked in OpenBao's order and refused in its words: the hash (the URL's,
else ``hash_algorithm``, else the deprecated ``algorithm``), ``marshaling_algorithm``,
``salt_length``, then the key and its type, then ``hash_algorithm=none``'s conditions; then each
item (``input`` in base64, ``context``) and its signature. A single request answers an item's
error as OpenBao does: 400 for what the route checks, and for what the key refuses while
verifying; while signing, what the key refuses (a version, a salt length) is OpenBao's 500 in
its framework's words. A batch answers 200 with an error per failed item, as OpenBao does.

Signing leases nothing: ``UsageMeter`` counts sealings, and a signature seals nothing
(docs/TRANSIT.md, Signing). Only a single request on an ed25519 or P-256 key is answered
on the event loop (``light``); a batch, or a slower key, on a thread.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
from typing import Any

import orjson

from sealflow.service.keystore import (
    KDF_HKDF,
    MISSING_CONTEXT,
    SOFT_DELETED,
    KeyInfo,
    KeyNotFound,
    KeyStore,
    WouldWait,
)

from .._state import Services
from ..errors import ApiError
from . import _items, _public, _signer, _wire
from ._batch import Answer
from ._ciphertext import PREFIX, TOO_OLD, CiphertextError, b64decode, b64encode
from ._signer import Options, SignError, Unsupported
from ._utility import integer
from ._wire import Body

DEFAULT_HASH = "sha2-256"
_NONE_NEEDS = "hash_algorithm=none requires both prehashed=true and signature_algorithm=pkcs1v15"


class _ItemError(Exception):
    """An item refused: ``status`` is what a single request answers (500: the framework's)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def single(self) -> ApiError:
        """A single request's answer: a 500 in the framework's words (a go-multierror)."""
        if self.status == 500:
            return _wire.user_error(_wire.framework_error(self.message), 500)
        return _wire.user_error(self.message)


def options(fields: Body, url_algorithm: str) -> Options:
    """The signing options, checked in OpenBao's order; those of a request that names none,
    made once (``_DEFAULTS``)."""
    if not url_algorithm and _OPTION_FIELDS.isdisjoint(fields):
        return _DEFAULTS
    return _options(fields, url_algorithm)


def _options(fields: Body, url_algorithm: str) -> Options:
    hash_name = url_algorithm or _wire.as_str(fields, "hash_algorithm", DEFAULT_HASH)
    if not hash_name:
        hash_name = _wire.as_str(fields, "algorithm", DEFAULT_HASH) or DEFAULT_HASH
    if hash_name not in _signer.HASHES:
        raise _wire.user_error(f'invalid hash algorithm "{hash_name}"')
    marshaling = _wire.as_str(fields, "marshaling_algorithm", "asn1")
    if marshaling not in _signer.MARSHALINGS:
        raise _wire.user_error(f'invalid marshaling type "{marshaling}"')
    prehashed = _bool(fields, "prehashed")
    algorithm = _wire.as_str(fields, "signature_algorithm")
    try:
        salt = _signer.salt_length(_wire.as_str(fields, "salt_length", "auto"))
    except SignError as exc:
        raise _wire.user_error(exc.message) from None
    jws = marshaling == "jws"
    return Options(hash_name, "jws" if jws else "asn1", salt, algorithm, prehashed)


def _bool(fields: Body, name: str) -> bool:
    """A bool field in OpenBao's words (mapstructure's weak decoding, Go's ``ParseBool``)."""
    value = fields.get(name)
    if value is None or value == "":
        return False
    if type(value) is bool:
        return value
    if type(value) is int:
        return value != 0
    if isinstance(value, str) and value in _wire.TRUE | _wire.FALSE:
        return value in _wire.TRUE
    why = f"expected type 'bool', got unconvertible type '{_wire.go_type(value)}'"
    if isinstance(value, str):
        why = "cannot parse value as 'bool': strconv.ParseBool: invalid syntax"
    raise _wire.user_error(
        f"Field validation failed: error converting input for field \"{name}\": '' {why}"
    )


# The fields ``_options`` reads: a request with none of them (and no algorithm in its path) has
# the defaults.
_OPTION_FIELDS = frozenset(
    ("hash_algorithm", "algorithm", "marshaling_algorithm", "prehashed", "signature_algorithm",
     "salt_length")
)  # fmt: skip
_DEFAULTS = _options({}, "")


def _key(store: KeyStore, name: str, missing: str, verb: str, opts: Options) -> KeyInfo:
    try:
        key = store.get_key(name)
    except KeyNotFound:
        _public.refuse(store, name, verb)
        raise _wire.user_error(missing) from None
    if not key.key_type.signs:
        raise _wire.user_error(f"key type {key.key_type.name} does not support {verb}")
    if key.key_type.derived and key.key_type.kdf != KDF_HKDF:  # Go would panic on its key
        raise _wire.user_error(
            f"derived {key.key_type.name} keys of kdf {key.key_type.kdf} are not supported by"
            " sealflow"
        )
    none = opts.hash_name == "none" and _signer.hashes_input(key.key_type.name)  # not ed25519
    if none and not (opts.prehashed and opts.algorithm == "pkcs1v15"):
        raise _wire.user_error(_NONE_NEEDS)
    return key


def _batch(fields: Body, item_type: str = "batchRequestSignItem") -> list[dict[str, str]] | None:
    """``batch_input`` as OpenBao decodes it (a list of objects of strings), or None."""
    raw = fields.get("batch_input")
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise _wire.user_error(
            _wire.framework_error(
                "failed to parse batch input: '' source data must be an array or slice, got"
                f" {_wire.go_type(raw)}"
            ),
            500,
        )
    items = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise _wire.user_error(
                _wire.framework_error(
                    "failed to parse batch input: decoding failed due to the following"
                    f" error(s):\n\n'[{i}]' expected type 'transit.{item_type}', got"
                    f" unconvertible type '{_wire.go_type(entry)}'"
                ),
                500,
            )
        items.append({k: "" if v is None else _text(v) for k, v in entry.items()})
    if not items:
        raise _wire.user_error("missing batch input to process")
    return items


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value) if isinstance(value, int | float) else orjson.dumps(value).decode()


def _input(item: dict[str, str], kind: str, opts: Options) -> bytes:
    raw = item.get("input")
    if raw is None:
        raise _ItemError("missing input")
    try:
        data = b64decode(raw)
    except CiphertextError as exc:
        raise _ItemError(f"unable to decode input as base64: {exc}") from None
    if _signer.hashes_input(kind) and not opts.prehashed:
        data = _signer.digest(opts.hash_name, data)
    return data


def _context(item: dict[str, str]) -> bytes:
    """Decoded as OpenBao decodes it (and refused alike): a derived key's per-request input,
    ignored by any other key."""
    raw = item.get("context", "")
    if not raw:
        return b""
    try:
        return b64decode(raw)
    except CiphertextError:
        raise _ItemError("failed to base64-decode context") from None


def _derived(key: KeyInfo, material: bytes, context: bytes) -> bytes:
    """The private key a derived ed25519 key signs with for ``context`` (OpenBao's ``GetKey``),
    refused in its words (an internal error: a 500 when single) without one."""
    if not context:
        raise _ItemError(f"error deriving key: {MISSING_CONTEXT}", 500)
    return _signer.derived_ed25519(material, context)


# -- sign


async def sign(svc: Services, name: str, url_algorithm: str, fields: Body) -> Answer:
    """``POST sign/:name[/:hash_algorithm]``: a batch of at most ``max_batch_items``, as
    every Transit batch."""
    batch = fields.get("batch_input")
    limit = svc.settings.max_batch_items
    if isinstance(batch, list) and len(batch) > limit:
        raise _items.too_many_items(limit)
    opts = options(fields, url_algorithm)
    version = integer(fields, "key_version", 0)
    work = functools.partial(_signed, svc.store, name, opts, version, fields)
    if light(svc.store, name, fields):
        return work()
    return await asyncio.to_thread(work)


def sign_now(svc: Services, name: str, url_algorithm: str, raw: bytes) -> Answer:
    """The same on the spot (the protocol's fast answer), for a single request on a light
    key (``light``); WouldWait for anything else (the ASGI path serves it)."""
    if b"batch_input" in raw or b"\\" in raw or not light(svc.store, name, {}):
        raise WouldWait("not a small signature")
    with svc.budget.hold() as hold:
        fields = _wire.parse(raw, hold)
        opts = options(fields, url_algorithm)
        version = integer(fields, "key_version", 0)
        return _signed(svc.store, name, opts, version, fields)


def _signed(store: KeyStore, name: str, opts: Options, version: int, fields: Body) -> Answer:
    key = _key(store, name, "signing key not found", "signing", opts)
    batch = _batch(fields)
    items = batch if batch is not None else [_single(fields, ("input", "context"))]
    results = [_sign_one(store, key, opts, version, item) for item in items]
    if batch is None:
        found = results[0]
        if isinstance(found, _ItemError):
            raise found.single()
        answer: dict[str, Any] = {"signature": found[0], "key_version": found[1]}
        if found[2]:  # a derived key's public key for the context, as OpenBao adds it
            answer["public_key"] = b64encode(found[2])
        return 200, _wire.envelope(answer)
    rows: list[dict[str, Any]] = []
    for item, found in zip(items, results, strict=True):
        if isinstance(found, _ItemError):
            row: dict[str, Any] = {"key_version": 0, "error": found.message}
        else:
            row = {"signature": found[0], "key_version": found[1]}
            if found[2]:
                row["publickey"] = b64encode(found[2])
        row["reference"] = item.get("reference", "")
        rows.append(row)
    return 200, _wire.envelope({"batch_results": rows})


def _sign_one(
    store: KeyStore, key: KeyInfo, opts: Options, version: int, item: dict[str, str]
) -> tuple[str, int, bytes] | _ItemError:
    kind = key.key_type.name
    public = b""
    try:
        data = _input(item, kind, opts)
        context = _context(item)
        number = _signing_version(key, version)
        material = _material(store, key, number)
        if key.key_type.derived:
            material = _derived(key, material, context)
            public = _signer.ed25519_public(material)
        try:
            signature = _signer.sign(kind, material, data, opts)
        except SignError as refused:  # OpenBao's 500s; what sealflow cannot do, a 400
            status = 400 if isinstance(refused, Unsupported) else 500
            raise _ItemError(refused.message, status) from None
    except _ItemError as exc:
        return exc
    return f"{PREFIX}{number}:{_encode(signature, opts)}", number, public


def _signing_version(key: KeyInfo, version: int) -> int:
    if key.soft_deleted:
        raise _ItemError(SOFT_DELETED, 500)
    if version == 0:
        return key.latest
    if version < 0:
        raise _ItemError("requested version for signing is negative", 500)
    if version > key.latest:
        raise _ItemError("requested version for signing is higher than the latest key version", 500)
    if key.min_encryption_version > 0 and version < key.min_encryption_version:
        raise _ItemError(
            "requested version for signing is less than the minimum encryption key version", 500
        )
    return version


def _material(store: KeyStore, key: KeyInfo, version: int) -> bytes:
    try:
        return store.material(key.slot(version))
    except KeyNotFound:
        raise _ItemError("no such key version", 500) from None


def _encode(signature: bytes, opts: Options) -> str:
    if opts.marshaling == "jws":
        return base64.urlsafe_b64encode(signature).rstrip(b"=").decode("ascii")
    return b64encode(signature)


# -- verify (the signature branch)


def verified(store: KeyStore, name: str, url_algorithm: str, fields: Body) -> bytes:
    """The signature half of ``verify/:name[/:hash_algorithm]`` (``_verify`` chose it)."""
    opts = options(fields, url_algorithm)
    return _verified(store, name, opts, fields)


def _verified(store: KeyStore, name: str, opts: Options, fields: Body) -> bytes:
    key = _key(store, name, "signature verification key not found", "verification", opts)
    batch = _batch(fields, "batchRequestVerifyItem")
    single = _single(fields, ("input", "signature", "context"))
    items = batch if batch is not None else [single]
    results = [_verify_one(store, key, opts, item) for item in items]
    if batch is None:
        found = results[0]
        if isinstance(found, _ItemError):
            raise found.single()
        return _wire.envelope({"valid": found})
    rows: list[dict[str, Any]] = []
    for item, found in zip(items, results, strict=True):
        row: dict[str, Any] = {"valid": found is True}
        if isinstance(found, _ItemError):
            row["error"] = found.message
        row["reference"] = item.get("reference", "")
        rows.append(row)
    return _wire.envelope({"batch_results": rows})


def _verify_one(
    store: KeyStore, key: KeyInfo, opts: Options, item: dict[str, str]
) -> bool | _ItemError:
    kind = key.key_type.name
    try:
        data = _input(item, kind, opts)
        signature = item.get("signature")
        if signature is None:
            raise _ItemError("missing signature")
        context = _context(item)
        if key.soft_deleted:
            raise _ItemError(SOFT_DELETED)
        version, raw = _parse(key, signature, opts)
        material = _material(store, key, version)
        if key.key_type.derived:
            material = _derived(key, material, context)
        try:
            return _signer.verify(kind, material, data, raw, opts)
        except SignError as refused:
            raise _ItemError(refused.message, 400 if refused.user else 500) from None
    except _ItemError as exc:
        return exc


def _parse(key: KeyInfo, signature: str, opts: Options) -> tuple[int, bytes]:
    """The version a signature names and its bytes, refused in OpenBao's words."""
    if not signature.startswith(PREFIX):
        raise _ItemError("invalid signature: no prefix")
    number, sep, text = signature[len(PREFIX) :].partition(":")
    if not sep:
        raise _ItemError("invalid signature: wrong number of fields")
    version = _wire.atoi(number)
    if version is None:
        raise _ItemError("invalid signature: version number could not be decoded")
    if version > key.latest:
        raise _ItemError("invalid signature: version is too new")
    if version < key.min_decryption_version:
        raise _ItemError(TOO_OLD)
    try:
        if opts.marshaling == "jws":
            return version, _raw_url_decode(text)
        return version, b64decode(text)
    except (CiphertextError, binascii.Error, ValueError):
        raise _ItemError("invalid base64 signature value") from None


_URL_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _raw_url_decode(text: str) -> bytes:
    """Go's ``base64.RawURLEncoding``: no padding, CR and LF skipped."""
    text = text.replace("\r", "").replace("\n", "")
    if len(text) % 4 == 1 or not set(text) <= _URL_ALPHABET:
        raise ValueError("not raw URL base64")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# -- shared


def _single(fields: Body, names: tuple[str, ...]) -> dict[str, str]:
    """A single request as the one item OpenBao makes of it: ``input`` and ``context``
    always (empty when absent), ``signature`` only when given."""
    item = {name: _text(fields[name]) for name in names if fields.get(name) is not None}
    item.setdefault("input", "")
    return item


# Microseconds a signature or a verification (docs/BENCHMARKS.md, Transit signatures): on the
# event loop; the rest (P-384 and P-521 near a millisecond, RSA more) and batches on a thread.
_LIGHT = frozenset(("ed25519", "ecdsa-p256"))


def light(store: KeyStore, name: str, fields: Body) -> bool:
    """Whether to answer on the event loop: a request on a key in the cache that does not
    sign (``verify``'s HMAC half, or a refusal), or a single request on an ed25519 or P-256
    key."""
    try:
        kind = store.get_key(name).key_type
    except KeyNotFound:
        return False
    if not kind.signs:
        return True
    return fields.get("batch_input") is None and kind.name in _LIGHT
