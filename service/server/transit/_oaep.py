"""Transit's ``encrypt/:name`` and ``decrypt/:name`` on RSA keys: RSA-OAEP with SHA-256, as
OpenBao's RSA keys encrypt (``_signer.oaep_encrypt``); the ciphertext is ``vault:v<N>:`` and
base64 of the OAEP block.

The route sends an RSA key's request here instead of to ``_encrypt``/``_data`` (whose AEAD
paths refuse it). Items are checked with the AEAD paths' checks and words (``_checks``), plus
OpenBao's refusal of ``associated_data`` for a non-AEAD key; every encryption is leased like
every sealing (``_leases.lease_items``: ``UsageMeter.lease``, the one usage rule). What the RSA
operation itself refuses (a plaintext too long for the key, a ciphertext that does not
decrypt) is OpenBao's internal error: a 500 in its framework's words, and for a batch a 500
with every item's result. The work (leases may wait, RSA takes milliseconds) runs on a thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sealflow.service.keystore import KeyInfo, KeyNotFound, KeyStore

from .._budget import Hold
from .._logging import AccessRecord
from .._state import Services
from . import _batch, _ciphertext, _items, _signer, _wire
from ._batch import Answer, Results
from ._checks import decode_all, key_of, wanted_versions
from ._ciphertext import CiphertextError
from ._items import Item
from ._leases import lease_items

_ENCRYPT_FAILED = (
    "failed to RSA encrypt the plaintext: crypto/rsa: message too long for RSA key size"
)
_DECRYPT_FAILED = "failed to RSA decrypt the ciphertext: crypto/rsa: decryption error"


def is_rsa(store: KeyStore, name: str) -> bool:
    """Whether the key is an RSA key (False for a key not found: the AEAD paths refuse it)."""
    try:
        key = store.get_key(name)
    except KeyNotFound:
        return False
    return _signer.is_rsa(key.key_type.name)


async def encrypt(svc: Services, name: str, raw: bytes, hold: Hold, log: AccessRecord) -> Answer:
    body = _body(svc, raw, hold)
    return await asyncio.to_thread(_encrypted, svc, name, body, log)


async def decrypt(svc: Services, name: str, raw: bytes, hold: Hold, log: AccessRecord) -> Answer:
    body = _body(svc, raw, hold)
    return await asyncio.to_thread(_decrypted, svc.store, name, body, log)


def _body(svc: Services, raw: bytes, hold: Hold) -> _wire.Body:
    body = _wire.parse(raw, hold)
    batch = body.get("batch_input")
    limit = svc.settings.max_batch_items
    if isinstance(batch, list) and len(batch) > limit:
        raise _items.too_many_items(limit)
    return body


def _non_aead(key: KeyInfo, work: list[Item], results: Results) -> None:
    for i in results.pending():
        if work[i].aad:
            results.fail(
                i,
                f"'[{i}].associated_data' provided for non-AEAD cipher suite {key.key_type.name}",
            )


def _encrypted(svc: Services, name: str, body: _wire.Body, log: AccessRecord) -> Answer:
    work, batch = _items.items(body, "plaintext", "missing plaintext to encrypt")
    if batch:
        log.records = len(work)
    results = Results(len(work))
    plaintexts = decode_all(work, results)
    key = key_of(svc.store, name)
    _non_aead(key, work, results)
    wanted = wanted_versions(key, work, results)
    versions, materials = lease_items(svc, key, wanted, plaintexts, results)
    log.used_all(versions.values())
    internal = False
    for i, version in versions.items():
        try:
            sealed = _signer.oaep_encrypt(materials[version], plaintexts[i])
        except ValueError:
            results.fail(i, _ENCRYPT_FAILED)
            internal = True
            continue
        results.values[i] = (version, _ciphertext.encode(version, sealed))
    return _answer(body, work, batch, results, internal, _batch.encrypted)


def _decrypted(store: KeyStore, name: str, body: _wire.Body, log: AccessRecord) -> Answer:
    work, batch = _items.items(body, "ciphertext", "missing ciphertext to decrypt")
    if batch:
        log.records = len(work)
    results = Results(len(work))
    key = key_of(store, name, "decrypt")
    _non_aead(key, work, results)
    payloads: dict[int, tuple[int, bytes]] = {}
    for i in results.pending():
        try:
            version, text = _ciphertext.split(work[i].text)
            if version > key.latest:
                raise CiphertextError(_ciphertext.TOO_NEW)
            if version < key.min_decryption_version:
                raise CiphertextError(_ciphertext.TOO_OLD)
            data = _ciphertext.b64decode(text)
        except CiphertextError as exc:
            message = str(exc)
            if message.startswith("illegal base64"):
                message = _ciphertext.BAD_BASE64
            results.fail(i, message)
            continue
        payloads[i] = (version, data)
    log.used_all({version for version, _ in payloads.values()})
    materials = {v: store.material(key.slot(v)) for v in {v for v, _ in payloads.values()}}
    internal = False
    for i, (version, data) in payloads.items():
        plaintext = _signer.oaep_decrypt(materials[version], data)
        if plaintext is None:
            results.fail(i, _DECRYPT_FAILED)
            internal = True
            continue
        results.values[i] = _batch.b64(plaintext)
    return _answer(body, work, batch, results, internal, _batch.decrypted)


def _answer(
    body: _wire.Body,
    work: list[Item],
    batch: bool,
    results: Results,
    internal: bool,
    shape: Any,
) -> Answer:
    if not batch:
        error = results.errors[0]
        if error is not None and internal:
            raise _wire.user_error(_wire.framework_error(error), 500)
        return 200, _batch.single(results, shape)
    status, pieces = _batch.answer(body, [_batch.part(work, results, shape)], len(work), True)
    return (500 if internal else status), pieces
