"""Transit's cryptography, run by the crypto pool (inline when small, on a worker when large):
the items sealed or opened in groups of one key version and one AAD (and, for a derived key,
one context), one engine call per group (``engine.seal_many``/``open_many``: a batch of 1,000
items is a few calls, not 1,000).

A derived key's groups use the key ``_derive`` makes for their version and context, never the
version's material; a convergent key seals item by item, each under its own nonce
(``_derive.ContextKey.nonce_for``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sealflow import engine
from sealflow.engine import Algorithm, DecryptionError, RecordStatus

from . import _ciphertext
from ._derive import ContextKey

_Group = tuple[int, bytes, bytes]  # version, AAD, context (b"": the key is not derived)


@dataclass(frozen=True, slots=True)
class Derivation:
    """The contexts of a derived key's items, whether the key is convergent, and its KDF."""

    contexts: dict[int, bytes]
    convergent: bool
    kdf: str


def _groups(
    versions: dict[int, int],
    aads: dict[int, bytes],
    inputs: dict[int, bytes],
    contexts: dict[int, bytes] | None,
) -> dict[_Group, list[int]]:
    if contexts is None:
        members = [i for i in inputs if i in versions and i in aads]
        if len(set(versions.values())) == 1 and len(set(aads.values())) == 1:
            return {(versions[members[0]], aads[members[0]], b""): members} if members else {}
        contexts = {}
    else:
        members = [i for i in inputs if i in versions and i in aads and i in contexts]
    groups: dict[_Group, list[int]] = {}
    for i in members:
        groups.setdefault((versions[i], aads[i], contexts.get(i, b"")), []).append(i)
    return groups


def _key(
    alg: Algorithm, material: bytes, context: bytes, derivation: Derivation | None, seals: bool
) -> ContextKey | None:
    """A derived key's key for the context (``ContextKey`` refuses an empty one: the material
    is never used as it is); None for a key that is not derived. Only a sealing needs a
    convergent key's nonce key."""
    if derivation is None:
        return None
    convergent = seals and derivation.convergent
    return ContextKey(material, context, alg.spec.key_len, convergent, derivation.kdf)


def seal(
    alg: Algorithm,
    materials: dict[int, bytes],
    versions: dict[int, int],
    aads: dict[int, bytes],
    plaintexts: dict[int, bytes],
    derivation: Derivation | None = None,
) -> dict[int, bytes]:
    """``nonce || ciphertext || tag`` per item that has a version, an AAD and a plaintext (and
    a context, for a derived key)."""
    sealed = {}
    contexts = None if derivation is None else derivation.contexts
    convergent = derivation is not None and derivation.convergent
    for (version, aad, context), members in _groups(versions, aads, plaintexts, contexts).items():
        derived = _key(alg, materials[version], context, derivation, seals=True)
        key = materials[version] if derived is None else derived.aead
        if convergent:
            assert derived is not None
            for i in members:
                nonce = derived.nonce_for(plaintexts[i])
                sealed[i] = nonce + engine.seal(alg, key, nonce, aad, plaintexts[i])
            continue
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
    derivation: Derivation | None = None,
) -> dict[int, bytes | None]:
    """Plaintext per item, None where the tag does not verify."""
    opened: dict[int, bytes | None] = {}
    n = _ciphertext.NONCE_LEN
    contexts = None if derivation is None else derivation.contexts
    for (version, aad, context), members in _groups(versions, aads, payloads, contexts).items():
        derived = _key(alg, materials[version], context, derivation, seals=False)
        key = materials[version] if derived is None else derived.aead
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
