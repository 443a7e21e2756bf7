"""Transit's cryptography, run by the crypto pool (inline when small, on a worker when large):
the items sealed or opened in groups of one key version and one AAD, one engine call per group
(``engine.seal_many``/``open_many``: a batch of 1,000 items is a few calls, not 1,000)."""

from __future__ import annotations

import os

from sealflow import engine
from sealflow.engine import Algorithm, DecryptionError, RecordStatus

from . import _ciphertext


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


def seal(
    alg: Algorithm,
    materials: dict[int, bytes],
    versions: dict[int, int],
    aads: dict[int, bytes],
    plaintexts: dict[int, bytes],
) -> dict[int, bytes]:
    """``nonce || ciphertext || tag`` per item that has a version, an AAD and a plaintext."""
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


def open_(
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
