"""Transit's ``encrypt``: one plan, ``encryption``, for every way a request comes in.

The route hands it the body's bytes (``encrypt``), and so does the protocol's fast answer
(``encrypt_now``). It reads and checks the whole request (``_items.read``, or the unparsed
column: ``_column.unparsed``), then gives its groups one at a time (``_run``): each checked in
Transit's order and its sealings leased (``_leases``: the one usage rule) on the event loop,
then sealed and encoded by one call without side effects, which the route runs on the crypto
pool (inline when small) and the fast answer on the spot.

A group in the common shape (``_column``), or a single request of a plaintext, goes as a
column: checked once for the whole group, leased at once, sealed by one engine call that writes
the answer's bytes (a single request: one ``engine.seal`` and Vault's single answer). A single
request (``_items.single``: no ``batch_input`` can be in its bytes) skips the plan: its one step,
the same ``_step``, is made and run by ``_run.run_single`` (the budget taken alike, the lease in
a thread when it may wait), with no reading generator and no groups. A column
that any item would fail (bad base64, an unknown key or version, bad or reserved
associated_data, a version used up) goes item by item instead, decided before anything is
counted, so that every item gets its own error; so does a column whose lease does not cover it
under one version (the latest used up on the way, or a version asked for running out), with the
lease it took. The answer is the same either way (tests/service/transit/test_column.py compares
them).

The request's ``AccessRecord`` learns the versions sealed under as each group is leased (a
column's one lease, an item group's distinct versions), how many items a ``batch_input`` has,
and, with an audit trail on, the AADs and contexts it carried (``_audited``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator

from sealflow import engine
from sealflow.service.keystore import KeyNotFound, Lease, VersionUsedUp, WouldWait

from .._budget import Hold
from .._logging import AccessRecord
from .._state import Services
from . import _audited, _batch, _ciphertext, _column, _crypto, _items, _run, _wire
from ._batch import Answer, Part, Results, encrypted
from ._checks import (
    aads,
    asks_version,
    cipher,
    contexts,
    decode_all,
    derivation,
    key_of,
    known,
    reserved_aad,
    version_error,
    wanted_versions,
)
from ._items import Reading, Request, items
from ._leases import lease_items
from ._wire import Body

Sealing = Callable[[], Part]
_MISSING = "missing plaintext to encrypt"


async def encrypt(svc: Services, name: str, raw: bytes, hold: Hold, log: AccessRecord) -> Answer:
    """``POST encrypt/:name`` with the body's bytes, sealed on the crypto pool."""
    fields = _items.single(raw, hold)
    if fields is None:
        return await _run.run(svc, encryption(svc, name, raw, hold, log), hold, len(raw))
    waits = _waits(svc, name, 1, asks_version(raw))
    step = _single_step(svc, name, fields, log)
    return await _run.run_single(svc, hold, len(raw), waits, step)


def encrypt_now(svc: Services, name: str, raw: bytes, log: AccessRecord) -> Answer:
    """The same, sealed on the spot (the protocol's fast answer, for a small body)."""
    if svc.usage.on_loop() and not known(svc.store, name):
        # Its refusal reads the keystore (``_public.refuse``): the ASGI path, in a thread.
        raise WouldWait(f"key {name!r} is not held")
    with svc.budget.hold() as hold:
        fields = _items.single(raw, hold)
        if fields is None:
            return _run.run_now(encryption(svc, name, raw, hold, log), hold, len(raw))
        return _run.run_single_now(hold, len(raw), _single_step(svc, name, fields, log))


def _single_step(
    svc: Services, name: str, fields: Body, log: AccessRecord
) -> Callable[[], tuple[int, Sealing]]:
    """A single request's one step, to make (its checks and lease) when its turn comes: the
    plan's step for it (``_Encryption.steps``), without the plan."""
    return functools.partial(_step, svc, name, fields, 0, True, log)


def encryption(
    svc: Services, name: str, raw: bytes, hold: Hold, log: AccessRecord, columns: bool = True
) -> Reading[_Encryption]:
    """An encrypt request read and checked (pausing between groups): the plan of its
    sealings. ``columns=False`` takes every group item by item (the tests compare both)."""
    limit = svc.settings.max_batch_items
    # The usual batch of plaintexts is read without parsing the body at all.
    unparsed = (yield from _column.unparsed(raw)) if columns else None
    versions = asks_version(raw)
    if unparsed is None:
        request = yield from _items.read(raw, "plaintext", hold, limit)
        return _Encryption(svc, name, request, None, columns, versions, log)
    count = sum(group.count or 0 for group in unparsed)
    if count > limit:
        raise _items.too_many_items(limit)
    request = Request({}, count, None)
    return _Encryption(svc, name, request, unparsed, columns, versions, log)


class _Encryption:
    """The plan (``_run.Plan``): the request's groups, each checked and leased when its turn
    comes, and the sealing that answers for it."""

    partial = True

    def __init__(
        self,
        svc: Services,
        name: str,
        request: Request,
        unparsed: list[_column.Column] | None,
        columns: bool,
        versions: bool,
        log: AccessRecord,
    ) -> None:
        self.svc = svc
        self.name = name
        self.request = request
        self.fields, self.count = request.fields, request.count
        self.batch = request.groups is not None or unparsed is not None
        self._unparsed = unparsed
        self._columns = columns
        self._versions = versions
        self._log = log
        if self.batch:
            log.records = self.count

    def waits(self) -> bool:
        return _waits(self.svc, self.name, self.count, self._versions)

    def steps(self) -> Iterator[tuple[int, Sealing]]:
        if self._unparsed is not None:
            offset = 0
            for group in self._unparsed:
                yield self._step(group, offset)
                offset += group.count or 0
            return
        if self.request.groups is None:
            yield self._step(self.request.fields, 0)
            return
        for offset, entries in self.request.groups():
            yield self._step({"batch_input": entries}, offset)

    def _step(self, group: Body | _column.Column, offset: int) -> tuple[int, Sealing]:
        return _step(self.svc, self.name, group, offset, self._columns, self._log)


def _waits(svc: Services, name: str, count: int, versions: bool) -> bool:
    """Whether making the sealings of ``count`` items may need the keystore (``_run.Plan``):
    one asked for by version always may, and so may the latest when this process does not
    hold enough of it."""
    return versions or not svc.usage.ready(name, max(count, 1))


def _step(
    svc: Services,
    name: str,
    group: Body | _column.Column,
    offset: int,
    columns: bool,
    log: AccessRecord,
) -> tuple[int, Sealing]:
    """A group's checks and lease (the column's, else item by item), and its sealing; the
    versions it seals under noted in ``log`` (and its AADs and contexts, when audited)."""
    taken: dict[int, Lease] = {}
    column = group if isinstance(group, _column.Column) else None
    if column is None and columns:
        assert isinstance(group, dict)
        column = _column.column(group)
    if column is not None:
        found = _by_column(svc, name, column, taken)
        if found is not None:
            n, sealed, version = found
            log.used(version)
            if log.aads is not None and isinstance(group, dict):  # unparsed: plaintexts only
                _audited.note(log, group)
            return n, sealed
        if isinstance(group, _column.Column):
            group = {"batch_input": _column.entries(group)}
    assert isinstance(group, dict)
    sealing = _Items(svc, name, group, taken, offset)
    log.used_all(sealing.versions.values())
    if log.aads is not None:
        _audited.note(log, group)
    return sum(map(len, sealing.plaintexts.values())), sealing


def _by_column(
    svc: Services, name: str, column: _column.Column, taken: dict[int, Lease]
) -> tuple[int, Sealing, int] | None:
    """The column's checks, made once for all its items, its lease, and the sealing that
    answers it (with the bytes it seals, and the version it seals under); None if an item
    would fail, before anything is counted, or, with the lease it took put in ``taken``, if
    that lease does not cover the whole column under one version."""
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
    if key.key_type.derived:  # each item's key is its context's: item by item (``_Items``)
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
        return len(records), functools.partial(_sealed_one, lease, aad, records), lease.version
    svc.usage.add_bytes(lease, len(records.data))
    sealing = functools.partial(_sealed_column, lease, aad, records, column)
    return len(records.data), sealing, lease.version


def _sealed_one(lease: Lease, aad: bytes, plaintext: bytes) -> Part:
    """A single request's answer: ``_Items`` would write the same."""
    nonce = os.urandom(_ciphertext.NONCE_LEN)
    sealed = nonce + engine.seal(lease.key.algorithm, lease.material, nonce, aad, plaintext)
    ciphertext = _ciphertext.encode(lease.version, sealed)
    return _wire.envelope({"ciphertext": ciphertext, "key_version": lease.version}), 0


def _sealed_column(
    lease: Lease, aad: bytes, records: engine.Records, column: _column.Column
) -> Part:
    alg, material = lease.key.algorithm, lease.material
    return _column.seal(alg, material, aad, records, lease.version, column), 0


class _Items:
    """A group of an encrypt request item by item (or a single request): each checked in
    Transit's order and its sealing leased; called, it seals and answers for the group.
    ``offset``: the request's index of the group's first item."""

    def __init__(
        self, svc: Services, name: str, body: Body, taken: dict[int, Lease], offset: int = 0
    ) -> None:
        self.work, self.batch = items(body, "plaintext", _MISSING, offset)
        self.results = results = Results(len(self.work))
        self.plaintexts = decode_all(self.work, results)
        decoded = contexts(self.work, results)
        key = key_of(svc.store, name)
        wanted = wanted_versions(key, self.work, results)
        self.derivation = derivation(key, decoded, results)
        self.aads = aads(self.work, results, offset)
        self.versions, self.materials = lease_items(
            svc, key, wanted, self.plaintexts, results, taken
        )
        self.algorithm = cipher(key)

    def __call__(self) -> Part:
        versions, results = self.versions, self.results
        sealed = _crypto.seal(
            self.algorithm, self.materials, versions, self.aads, self.plaintexts, self.derivation
        )
        for i, blob in sealed.items():
            results.values[i] = (versions[i], _ciphertext.encode(versions[i], blob))
        if not self.batch:
            return _batch.single(results, encrypted), 0
        return _batch.part(self.work, results, encrypted)
