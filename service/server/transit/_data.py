"""decrypt, rewrap and datakey (encrypt is ``_encrypt``'s), with Transit's batch semantics.

Every item is checked first (``_checks``: base64, version, prefix), with Transit's per-item
messages; the items that pass are then opened or sealed in groups of one key version and one
AAD (``_crypto``), after their sealings are leased (``_leases``: the one usage rule). Each
answers as Transit does (``_batch``).
"""

from __future__ import annotations

import os
from typing import Any

from sealflow.engine import Algorithm

from .._state import Services
from . import _ciphertext, _wire
from ._batch import Answer, Results, answer, b64, decrypted, encrypted
from ._checks import aads, key_of, materials, parse_all, wanted_versions
from ._ciphertext import CiphertextError
from ._crypto import open_, seal
from ._items import Item, items
from ._leases import lease_items
from ._wire import Body

# What Go's AEADs say when a tag does not verify (Transit passes it on as it is).
_AUTH_FAILED = {
    Algorithm.AES_128_GCM: "cipher: message authentication failed",
    Algorithm.AES_256_GCM: "cipher: message authentication failed",
    Algorithm.CHACHA20_POLY1305: "chacha20poly1305: message authentication failed",
}


async def decrypt(svc: Services, name: str, raw: bytes) -> Answer:
    body = _wire.parse(raw)
    work, batch = items(body, "ciphertext", "missing ciphertext to decrypt")
    results = Results(len(work))
    key = key_of(svc.store, name)
    versions, payloads = parse_all(key, work, results)
    aad = aads(work, results)
    opening = materials(svc.store, key, versions, results)
    opened = await svc.crypto.run(len(raw), open_, key.algorithm, opening, versions, aad, payloads)
    for i, plain in opened.items():
        if plain is None:
            results.fail(i, _AUTH_FAILED[key.algorithm])
        else:
            results.values[i] = b64(plain)
    return answer(body, work, results, batch, decrypted, partial=True)


async def rewrap(svc: Services, name: str, raw: bytes) -> Answer:
    body = _wire.parse(raw)
    work, batch = items(body, "ciphertext", "missing ciphertext to decrypt")
    results = Results(len(work))
    key = key_of(svc.store, name)
    old, payloads = parse_all(key, work, results)
    aad = aads(work, results)
    opening = materials(svc.store, key, old, results)
    opened = await svc.crypto.run(len(raw), open_, key.algorithm, opening, old, aad, payloads)
    plaintexts: dict[int, bytes] = {}
    for i, plain in opened.items():
        if plain is None:
            results.fail(i, _AUTH_FAILED[key.algorithm])
        else:
            plaintexts[i] = plain
    wanted = wanted_versions(key, work, results)
    new, sealing = lease_items(svc, key, wanted, plaintexts, results)
    sealed = await svc.crypto.run(len(raw), seal, key.algorithm, sealing, new, aad, plaintexts)
    for i, blob in sealed.items():
        results.values[i] = (new[i], _ciphertext.encode(new[i], blob))
    return answer(body, work, results, batch, encrypted, partial=False)


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
    key = key_of(svc.store, name)
    size = _DATAKEY_BYTES.get(_wire.as_int(body, "bits", 256))
    if size is None:
        raise _wire.user_error("invalid bit length")
    work = [Item("", _wire.as_int(body, "key_version"), "", "")]
    results = Results(1)
    wanted = wanted_versions(key, work, results)
    data_key = os.urandom(size)
    versions, sealing = lease_items(svc, key, wanted, {0: data_key}, results)
    if results.errors[0] is not None:
        raise _wire.user_error(results.errors[0])
    version = versions[0]
    sealed = seal(key.algorithm, sealing, versions, {0: b""}, {0: data_key})[0]
    found: dict[str, Any] = {
        "ciphertext": _ciphertext.encode(version, sealed),
        "key_version": version,
    }
    if kind == "plaintext":
        found["plaintext"] = b64(data_key)
    return 200, _wire.envelope(found)
