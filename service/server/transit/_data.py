"""encrypt, decrypt and rewrap, with Transit's batch semantics.

Every item is checked first (base64, version, prefix), with Transit's per-item messages; the
items that pass are then sealed or opened in groups of one key version and one AAD, one
engine call per group (``engine.seal_many``/``open_many``: a batch of 1,000 items is a few
calls, not 1,000). An encrypt batch in the common shape (``_column``) takes a shorter way
first: the same checks once for the whole batch, then one engine call from the column of
base64 to the answer's bytes; if any item would fail, the general path answers instead.

A batch answers in order, each result with its ``reference``; any item
with an error makes the answer 400 (``partial_failure_response_code`` instead when at least
one item succeeded), still the whole envelope, without ``errors``. Rewrap, as in Transit,
answers 200 whatever its items did.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from sealflow import engine
from sealflow.engine import Algorithm, DecryptionError, RecordStatus
from sealflow.service.keystore import KeyInfo, KeyNotFound, KeyStore

from .._state import Services
from . import _ciphertext, _column, _wire
from ._ciphertext import CiphertextError
from ._items import Item, items
from ._wire import Body

KEY_NOT_FOUND = "encryption key not found"
_VERSION_NEGATIVE = "requested version for encryption is negative"
_VERSION_TOO_HIGH = "requested version for encryption is higher than the latest key version"
_VERSION_TOO_LOW = (
    "requested version for encryption is less than the minimum encryption key version"
)
# What Go's AEADs say when a tag does not verify (Transit passes it on as it is).
_AUTH_FAILED = {
    Algorithm.AES_128_GCM: "cipher: message authentication failed",
    Algorithm.AES_256_GCM: "cipher: message authentication failed",
    Algorithm.CHACHA20_POLY1305: "chacha20poly1305: message authentication failed",
}

Answer = tuple[int, bytes]  # HTTP status, body


class _Results:
    """Per-item outcomes of one request, in input order."""

    def __init__(self, n: int) -> None:
        self.errors: list[str | None] = [None] * n
        self.values: list[Any] = [None] * n

    def fail(self, i: int, message: str) -> None:
        self.errors[i] = message

    def pending(self) -> list[int]:
        return [i for i, e in enumerate(self.errors) if e is None]


async def encrypt_body(svc: Services, name: str, raw: bytes) -> Answer | None:
    """``encrypt`` of a body in the usual serialization of a batch of plaintexts only, read
    without parsing it (``_column.from_body``); None, before any side effect, for any other
    body or any item that would fail: ``encrypt`` then answers."""
    column = _column.from_body(raw)
    sealed = None if column is None else _seal_column(svc, name, column)
    if sealed is None:
        return None
    return 200, await svc.crypto.run(len(raw), sealed)


async def encrypt(svc: Services, name: str, body: Body, size: int) -> Answer:
    column = _column.column(body)
    sealed = None if column is None else _seal_column(svc, name, column)
    if sealed is not None:
        return 200, await svc.crypto.run(size, sealed)
    sealing = _Sealing(svc, name, body)
    return sealing.answer(await svc.crypto.run(size, _seal, *sealing.inputs))


def encrypt_now(svc: Services, name: str, raw: bytes) -> Answer:
    """``encrypt`` of a small body, sealed on the spot: the same steps and answer as
    ``encrypt_body`` then ``encrypt``, without the crypto pool's hop. Both the ASGI path and
    the protocol's fast answer take it for a body of at most ``WHOLE_MAX`` bytes."""
    column = _column.from_body(raw)
    sealed = None if column is None else _seal_column(svc, name, column)
    if sealed is not None:
        return 200, sealed()
    sealing = _Sealing(svc, name, _wire.parse(raw))
    return sealing.answer(_seal(*sealing.inputs))


class _Sealing:
    """An encrypt request's items checked (in Transit's order) and counted, ready to seal."""

    def __init__(self, svc: Services, name: str, body: Body) -> None:
        self.body = body
        self.work, self.batch = items(body, "plaintext", "missing plaintext to encrypt")
        self.results = results = _Results(len(self.work))
        plaintexts = _decode_all(self.work, results)
        key = _key(svc.store, name)
        self.versions = versions = _versions(key, self.work, results)
        aads = _aads(self.work, results)
        materials = _materials(svc.store, key, versions, results)
        _count(svc, key, versions, plaintexts, results)
        self.inputs = (key.algorithm, materials, versions, aads, plaintexts)

    def answer(self, sealed: dict[int, bytes]) -> Answer:
        versions, results = self.versions, self.results
        for i, blob in sealed.items():
            results.values[i] = (versions[i], _ciphertext.encode(versions[i], blob))
        return _answer(self.body, self.work, results, self.batch, _encrypted, partial=True)


def _seal_column(svc: Services, name: str, column: _column.Column) -> Callable[[], bytes] | None:
    """``_Sealing``'s checks and count for a batch in the common shape, made once for all its
    items, and the sealing that answers it; None, before any side effect, if an item would
    fail (bad base64, an unknown key or version, bad associated_data): ``_Sealing`` then
    answers, with each item's error."""
    try:
        records = engine.Records.from_base64(column.texts, column.count, column.sep)
        key = svc.store.get_key(name)
        aad = _ciphertext.b64decode(column.aad) if column.aad else b""
    except (ValueError, KeyNotFound):  # CiphertextError is a ValueError
        return None
    results = _Results(1)
    version = _versions(key, [Item("", column.version, "", "")], results).get(0)
    if version is None:
        return None
    material = svc.store.key_material(key.name, version)
    _charge(svc, key, version, len(records), len(records.data))
    return functools.partial(_column.seal, key.algorithm, material, aad, records, version, column)


async def decrypt(svc: Services, name: str, body: Body, size: int) -> Answer:
    work, batch = items(body, "ciphertext", "missing ciphertext to decrypt")
    results = _Results(len(work))
    key = _key(svc.store, name)
    versions, payloads = _parse_all(key, work, results)
    aads = _aads(work, results)
    materials = _materials(svc.store, key, versions, results)
    opened = await svc.crypto.run(size, _open, key.algorithm, materials, versions, aads, payloads)
    for i, plain in opened.items():
        if plain is None:
            results.fail(i, _AUTH_FAILED[key.algorithm])
        else:
            results.values[i] = _b64(plain)
    return _answer(body, work, results, batch, _decrypted, partial=True)


async def rewrap(svc: Services, name: str, body: Body, size: int) -> Answer:
    work, batch = items(body, "ciphertext", "missing ciphertext to decrypt")
    results = _Results(len(work))
    key = _key(svc.store, name)
    old, payloads = _parse_all(key, work, results)
    aads = _aads(work, results)
    materials = _materials(svc.store, key, old, results)
    opened = await svc.crypto.run(size, _open, key.algorithm, materials, old, aads, payloads)
    plaintexts: dict[int, bytes] = {}
    for i, plain in opened.items():
        if plain is None:
            results.fail(i, _AUTH_FAILED[key.algorithm])
        else:
            plaintexts[i] = plain
    new = _versions(key, work, results)
    materials = _materials(svc.store, key, new, results)
    _count(svc, key, new, plaintexts, results)
    sealed = await svc.crypto.run(size, _seal, key.algorithm, materials, new, aads, plaintexts)
    for i, blob in sealed.items():
        results.values[i] = (new[i], _ciphertext.encode(new[i], blob))
    return _answer(body, work, results, batch, _encrypted, partial=False)


DATAKEY_KINDS = ("plaintext", "wrapped")
_DATAKEY_BYTES = {128: 16, 256: 32, 512: 64}


async def datakey(svc: Services, kind: str, name: str, body: Body) -> Answer:
    """A fresh random key sealed under the named key (``datakey/plaintext|wrapped/:name``).

    As in Transit, what is sealed is the data key itself (so ``decrypt`` answers it in
    base64, as it answers every plaintext); ``plaintext`` also returns it, ``wrapped`` only
    the ciphertext. Checks in Transit's order: the path, ``context`` as base64, the key,
    ``bits`` (128, 256 or 512; default 256), then ``key_version`` as in encrypt. ``context`` is
    otherwise ignored (no sealflow key is derived), and so is a ``nonce`` (OpenBao 2.7 has no
    such field here): the nonce is always a fresh random one, never the client's.
    """
    if kind not in DATAKEY_KINDS:
        raise _wire.user_error("Invalid path, must be 'plaintext' or 'wrapped'")
    context = _wire.as_str(body, "context")
    if context:
        try:
            _ciphertext.b64decode(context)
        except CiphertextError:
            raise _wire.user_error("failed to base64-decode context") from None
    key = _key(svc.store, name)
    size = _DATAKEY_BYTES.get(_wire.as_int(body, "bits", 256))
    if size is None:
        raise _wire.user_error("invalid bit length")
    work = [Item("", _wire.as_int(body, "key_version"), "", "")]
    results = _Results(1)
    versions = _versions(key, work, results)
    if results.errors[0] is not None:
        raise _wire.user_error(results.errors[0])
    version = versions[0]
    material = svc.store.key_material(key.name, version)
    data_key = os.urandom(size)
    _count(svc, key, versions, {0: data_key}, results)
    sealed = _seal(key.algorithm, {version: material}, versions, {0: b""}, {0: data_key})[0]
    answer: dict[str, Any] = {
        "ciphertext": _ciphertext.encode(version, sealed),
        "key_version": version,
    }
    if kind == "plaintext":
        answer["plaintext"] = _b64(data_key)
    return 200, _wire.envelope(answer)


# -- checks, in Transit's order


def _key(store: KeyStore, name: str) -> KeyInfo:
    try:
        return store.get_key(name)
    except KeyNotFound:
        raise _wire.user_error(KEY_NOT_FOUND) from None


def _decode_all(work: list[Item], results: _Results) -> dict[int, bytes]:
    decoded = {}
    for i, item in enumerate(work):
        try:
            decoded[i] = _ciphertext.b64decode(item.text)
        except CiphertextError as exc:
            results.fail(i, str(exc))
    return decoded


def _versions(key: KeyInfo, work: list[Item], results: _Results) -> dict[int, int]:
    latest = key.latest
    pending = results.pending()
    if not any(item.version for item in work):  # the usual batch: every item the latest
        return dict.fromkeys(pending, latest)
    chosen = {}
    for i in pending:
        version = work[i].version
        if version < 0:
            results.fail(i, _VERSION_NEGATIVE)
        elif version > latest:
            results.fail(i, _VERSION_TOO_HIGH)
        elif 0 < version < key.min_encryption_version:  # 0: the latest, never below it
            results.fail(i, _VERSION_TOO_LOW)
        else:
            chosen[i] = version or latest
    return chosen


def _parse_all(
    key: KeyInfo, work: list[Item], results: _Results
) -> tuple[dict[int, int], dict[int, bytes]]:
    versions, payloads = {}, {}
    for i, item in enumerate(work):
        if not item.text:
            results.fail(i, "missing ciphertext to decrypt")
            continue
        try:
            version, text = _ciphertext.split(item.text)
            if version > key.latest:
                raise CiphertextError(_ciphertext.TOO_NEW)
            if version < key.min_decryption_version:
                raise CiphertextError(_ciphertext.TOO_OLD)
            payloads[i] = _ciphertext.payload(text)
        except CiphertextError as exc:
            results.fail(i, str(exc))
            continue
        versions[i] = version
    return versions, payloads


def _aads(work: list[Item], results: _Results) -> dict[int, bytes]:
    pending = results.pending()
    if not any(item.aad for item in work):
        return dict.fromkeys(pending, b"")
    aads = {}
    for i in pending:
        try:
            aads[i] = _ciphertext.b64decode(work[i].aad) if work[i].aad else b""
        except CiphertextError as exc:
            results.fail(i, f"'[{i}].associated_data' {exc}")
    return aads


def _materials(
    store: KeyStore, key: KeyInfo, versions: dict[int, int], results: _Results
) -> dict[int, bytes]:
    """The material of each version the pending items name (fetched once per version)."""
    wanted = {versions[i] for i in results.pending() if i in versions}
    return {version: store.key_material(key.name, version) for version in wanted}


def _count(
    svc: Services,
    key: KeyInfo,
    versions: dict[int, int],
    plaintexts: dict[int, bytes],
    results: _Results,
) -> None:
    """Count the sealings about to be made against their versions (a batch is not stopped
    by a limit; reaching it rotates the key for the next request)."""
    per_version: dict[int, list[int]] = {}
    for i in results.pending():
        if i in versions and i in plaintexts:
            per_version.setdefault(versions[i], []).append(len(plaintexts[i]))
    for version, sizes in per_version.items():
        _charge(svc, key, version, len(sizes), sum(sizes))


def _charge(svc: Services, key: KeyInfo, version: int, sealings: int, size: int) -> None:
    svc.usage.count(key, version, sealings)
    svc.usage.add_bytes(key.name, version, size)


# -- the cryptography (run by the crypto pool: inline when small, on a worker when large)


def _groups(
    versions: dict[int, int], aads: dict[int, bytes], inputs: dict[int, bytes]
) -> dict[tuple[int, bytes], list[int]]:
    members = [i for i in inputs if i in versions and i in aads]
    if len(set(versions.values())) == 1 and len(set(aads.values())) == 1:
        return {(versions[members[0]], aads[members[0]]): members} if members else {}
    groups: dict[tuple[int, bytes], list[int]] = {}
    for i in members:
        groups.setdefault((versions[i], aads[i]), []).append(i)
    return groups


def _seal(
    alg: Algorithm,
    materials: dict[int, bytes],
    versions: dict[int, int],
    aads: dict[int, bytes],
    plaintexts: dict[int, bytes],
) -> dict[int, bytes]:
    sealed = {}
    for (version, aad), members in _groups(versions, aads, plaintexts).items():
        key = materials[version]
        if len(members) == 1:
            nonce = os.urandom(_ciphertext.NONCE_LEN)
            (i,) = members
            sealed[i] = nonce + engine.seal(alg, key, nonce, aad, plaintexts[i])
            continue
        batch = engine.seal_many(alg, key, aad, [plaintexts[i] for i in members])
        for i, blob in zip(members, batch, strict=True):
            sealed[i] = blob
    return sealed


def _open(
    alg: Algorithm,
    materials: dict[int, bytes],
    versions: dict[int, int],
    aads: dict[int, bytes],
    payloads: dict[int, bytes],
) -> dict[int, bytes | None]:
    """Plaintext per item, None where the tag does not verify."""
    opened: dict[int, bytes | None] = {}
    n = _ciphertext.NONCE_LEN
    for (version, aad), members in _groups(versions, aads, payloads).items():
        key = materials[version]
        if len(members) == 1:
            (i,) = members
            blob = payloads[i]
            try:
                opened[i] = engine.open(alg, key, blob[:n], aad, blob[n:])
            except (DecryptionError, ValueError):
                opened[i] = None
            continue
        batch = engine.open_many(alg, key, aad, [payloads[i] for i in members])
        for j, i in enumerate(members):
            opened[i] = batch[j] if batch.status[j] == RecordStatus.OK else None
    return opened


# -- answers


def _b64(data: bytes) -> str:
    return _ciphertext.b64encode(data)


def _encrypted(value: tuple[int, str] | None, error: str | None, reference: str) -> dict[str, Any]:
    if error is not None:
        return {"error": error, "reference": reference}
    assert value is not None
    return {"ciphertext": value[1], "key_version": value[0], "reference": reference}


def _decrypted(value: str | None, error: str | None, reference: str) -> dict[str, Any]:
    if error is not None:
        return {"plaintext": "", "error": error, "reference": reference}
    return {"plaintext": value, "reference": reference}


def _answer(
    body: Body,
    work: list[Item],
    results: _Results,
    batch: bool,
    shape: Callable[[Any, str | None, str], dict[str, Any]],
    partial: bool,
) -> Answer:
    if not batch:
        error = results.errors[0]
        if error is not None:
            raise _wire.user_error(error)
        one = shape(results.values[0], None, "")
        del one["reference"]
        return 200, _wire.envelope(one)
    rows = [
        shape(value, error, item.reference)
        for value, error, item in zip(results.values, results.errors, work, strict=True)
    ]
    status, warnings = 200, []
    failed = sum(error is not None for error in results.errors)
    if failed and partial:
        status = 400
        override = body.get("partial_failure_response_code")
        if override is not None and failed < len(work):
            code = _wire.as_int(body, "partial_failure_response_code")
            if 1 <= code <= 599:
                status = code
            else:
                warnings.append(
                    "invalid HTTP response code override from partial_failure_response_code,"
                    " reverting to 400"
                )
    return status, _wire.envelope({"batch_results": rows}, warnings)
