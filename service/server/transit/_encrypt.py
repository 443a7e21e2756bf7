"""Transit's ``encrypt``: one function, ``encryption``, for every way a request comes in.

The route hands it the body's bytes (``encrypt``), and so does the protocol's fast answer
(``encrypt_now``). It reads the request, checks it in Transit's order and leases its sealings
(``_leases``: the one usage rule), and returns what is left, the sealing and the answer, as one
call without side effects: the route runs it on the crypto pool (inline when small), the fast
answer on the spot.

A batch in the common shape (``_column``), or a single request of a plaintext, goes as a
column: checked once for the whole batch, leased at once, sealed by one engine call that writes
the answer's bytes (a single request: one ``engine.seal`` and Vault's single answer). A column
that any item would fail (bad base64, an unknown key or version, bad or reserved
associated_data, a version used up) goes item by item instead, decided before anything is
counted, so that every item gets its own error; so does a column whose lease does not cover it
under one version (the latest used up on the way, or a version asked for running out), with the
lease it took. The answer is the same either way (tests/service/transit/test_column.py compares
them).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from sealflow import engine
from sealflow.service.keystore import KeyNotFound, Lease, VersionUsedUp

from .._state import Services
from . import _ciphertext, _column, _crypto, _wire
from ._batch import Answer, Results, answer, encrypted
from ._checks import aads, decode_all, key_of, reserved_aad, version_error, wanted_versions
from ._items import items
from ._leases import lease_items
from ._wire import Body

Sealing = Callable[[], Answer]


async def encrypt(svc: Services, name: str, raw: bytes) -> Answer:
    """``POST encrypt/:name`` with the body's bytes, sealed on the crypto pool."""
    return await svc.crypto.run(len(raw), encryption(svc, name, raw))


def encrypt_now(svc: Services, name: str, raw: bytes) -> Answer:
    """The same, sealed on the spot (the protocol's fast answer, for a small body)."""
    return encryption(svc, name, raw)()


def encryption(svc: Services, name: str, body: bytes | Body) -> Sealing:
    """An encrypt request read, checked and leased: the sealing and the answer left to run."""
    # The usual batch of plaintexts is read without parsing the body at all.
    column = _column.from_body(body) if isinstance(body, bytes) else None
    if column is None:
        body = _wire.parse(body) if isinstance(body, bytes) else body
        column = _column.column(body)
    taken: dict[int, Lease] = {}
    if column is not None:
        sealing = _by_column(svc, name, column, taken)
        if sealing is not None:
            return sealing
    return _Items(svc, name, _wire.parse(body) if isinstance(body, bytes) else body, taken)


def _by_column(
    svc: Services, name: str, column: _column.Column, taken: dict[int, Lease]
) -> Sealing | None:
    """The column's checks, made once for all its items, its lease, and the sealing that
    answers it; None if an item would fail, before anything is counted, or, with the lease it
    took put in ``taken``, if that lease does not cover the whole batch under one version."""
    records: engine.Records | bytes  # a single request's one plaintext as it is
    try:
        if column.single:  # the item path's decode: the same errors, should it fail
            records = _ciphertext.b64decode(bytes(column.texts))
        else:
            records = engine.Records.from_base64(column.texts, column.count, column.sep)
        key = svc.store.get_key(name)
        aad = _ciphertext.b64decode(column.aad) if column.aad else b""
    except (ValueError, KeyNotFound):  # CiphertextError is a ValueError
        return None
    if reserved_aad(aad):  # every item fails: the item path says so, item by item
        return None
    if version_error(key, column.version) is not None:
        return None
    count = 1 if isinstance(records, bytes) else len(records)
    try:
        lease = svc.usage.lease(name, column.version or None, count)
    except (VersionUsedUp, KeyNotFound):
        return None
    if lease.sealings < count or lease.key.born != key.born:
        taken[column.version] = lease
        return None
    if isinstance(records, bytes):
        svc.usage.add_bytes(lease, len(records))
        return functools.partial(_sealed_one, lease, aad, records)
    svc.usage.add_bytes(lease, len(records.data))
    return functools.partial(_sealed_column, lease, aad, records, column)


def _sealed_one(lease: Lease, aad: bytes, plaintext: bytes) -> Answer:
    """A single request's answer: ``_Items`` would write the same."""
    nonce = os.urandom(_ciphertext.NONCE_LEN)
    sealed = nonce + engine.seal(lease.key.algorithm, lease.material, nonce, aad, plaintext)
    ciphertext = _ciphertext.encode(lease.version, sealed)
    return 200, _wire.envelope({"ciphertext": ciphertext, "key_version": lease.version})


def _sealed_column(
    lease: Lease, aad: bytes, records: engine.Records, column: _column.Column
) -> Answer:
    alg, material = lease.key.algorithm, lease.material
    return 200, _column.seal(alg, material, aad, records, lease.version, column)


class _Items:
    """An encrypt request item by item: each checked in Transit's order and its sealing
    leased; called, it seals and answers."""

    def __init__(self, svc: Services, name: str, body: Body, taken: dict[int, Lease]) -> None:
        self.body = body
        self.work, self.batch = items(body, "plaintext", "missing plaintext to encrypt")
        self.results = results = Results(len(self.work))
        self.plaintexts = decode_all(self.work, results)
        key = key_of(svc.store, name)
        wanted = wanted_versions(key, self.work, results)
        self.aads = aads(self.work, results)
        self.versions, self.materials = lease_items(
            svc, key, wanted, self.plaintexts, results, taken
        )
        self.algorithm = key.algorithm

    def __call__(self) -> Answer:
        versions, results = self.versions, self.results
        sealed = _crypto.seal(self.algorithm, self.materials, versions, self.aads, self.plaintexts)
        for i, blob in sealed.items():
            results.values[i] = (versions[i], _ciphertext.encode(versions[i], blob))
        return answer(self.body, self.work, results, self.batch, encrypted, partial=True)
