"""decrypt, rewrap and datakey (encrypt is ``_encrypt``'s), with Transit's batch semantics.

A batch is read and checked whole (``_items.read``), then run group by group (``_run``). In a
group every item is checked first (``_checks``: base64, version, prefix), with Transit's
per-item messages; the items that pass are then opened or sealed in sets of one key version and
one AAD (``_crypto``), after their sealings are leased (``_leases``: the one usage rule). Each
answers as Transit does (``_batch``). The request's ``AccessRecord`` learns the versions used
(a decrypt's opened, a rewrap's opened and sealed under, a datakey's), a batch's number of
items and, when audited, the AADs and contexts (``_audited``).
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

from sealflow.engine import Algorithm
from sealflow.service.keystore import KeyInfo, WouldWait

from .._budget import Hold
from .._logging import AccessRecord
from .._state import Services
from . import _audited, _ciphertext, _items, _run, _wire
from ._batch import Answer, Part, Results, b64, decrypted, encrypted, part, single
from ._checks import (
    aads,
    asks_version,
    cipher,
    contexts,
    derivation,
    key_of,
    known,
    materials,
    parse_all,
    wanted_versions,
)
from ._ciphertext import CiphertextError
from ._crypto import Derivation, open_, seal
from ._items import Item, Reading, Request, items
from ._leases import lease_items
from ._wire import Body

_MISSING = "missing ciphertext to decrypt"

# What Go's AEADs say when a tag does not verify (Transit passes it on as it is).
_AUTH_FAILED = {
    Algorithm.AES_128_GCM: "cipher: message authentication failed",
    Algorithm.AES_256_GCM: "cipher: message authentication failed",
    Algorithm.CHACHA20_POLY1305: "chacha20poly1305: message authentication failed",
}


async def decrypt(svc: Services, name: str, raw: bytes, hold: Hold, log: AccessRecord) -> Answer:
    opening = _opening(svc, name, raw, hold, log, rewrap=False)
    return await _run.run(svc, opening, hold, len(raw))


async def rewrap(svc: Services, name: str, raw: bytes, hold: Hold, log: AccessRecord) -> Answer:
    opening = _opening(svc, name, raw, hold, log, rewrap=True)
    return await _run.run(svc, opening, hold, len(raw))


def _opening(
    svc: Services, name: str, raw: bytes, hold: Hold, log: AccessRecord, rewrap: bool
) -> Reading[_Opening]:
    request = yield from _items.read(raw, "ciphertext", hold, svc.settings.max_batch_items)
    return _Opening(svc, name, request, rewrap, rewrap and asks_version(raw), log)


class _Opening:
    """The plan (``_run.Plan``) of a decrypt, or a rewrap (which seals again what it opened),
    group by group: each group's ciphertexts checked, then opened on the crypto pool; a
    rewrap's then leased on the event loop and sealed on the pool."""

    def __init__(
        self,
        svc: Services,
        name: str,
        request: Request,
        rewrap: bool,
        versions: bool,
        log: AccessRecord,
    ) -> None:
        self.svc = svc
        self._versions = versions
        self.request = request
        self.fields, self.count = request.fields, request.count
        self.batch = request.groups is not None
        self.partial = not rewrap  # rewrap answers 200 whatever its items did, as Transit
        self.rewrap = rewrap
        self.name = name
        self._single = None if self.batch else items(request.fields, "ciphertext", _MISSING)[0]
        self._key: KeyInfo | None = None
        self._log = log
        if self.batch:
            log.records = self.count

    def waits(self) -> bool:
        if not self.rewrap:  # a decrypt leases nothing; an unknown key's refusal reads the store
            return not known(self.svc.store, self.name)
        return self._versions or not self.svc.usage.ready(self.name, max(self.count, 1))

    def steps(self) -> Iterator[tuple[int, Callable[[], Part | None]]]:
        groups, log = self.request.groups, self._log
        if groups is None:
            assert self._single is not None
            if log.aads is not None:
                _audited.note(log, self.fields)
            yield from self._group(self._single, 0)
            return
        for offset, entries in groups():
            group = {"batch_input": entries}
            work = items(group, "ciphertext", _MISSING, offset)[0]
            if log.aads is not None:
                _audited.note(log, group)
            del entries, group
            yield from self._group(work, offset)

    def _group(
        self, work: list[Item], offset: int
    ) -> Iterator[tuple[int, Callable[[], Part | None]]]:
        svc, results = self.svc, Results(len(work))
        # Looked up once the first group's items are read: a batch of one group says what is
        # wrong with its items before whether its key exists, as Transit does.
        decoded = contexts(work, results, texts=True)  # before the key, as Transit
        key = self._key = self._key or key_of(svc.store, self.name, "decrypt")
        versions, payloads = parse_all(key, work, results)
        derived = derivation(key, decoded, results)
        aad = aads(work, results, offset)
        opening = materials(svc.store, key, versions, results)
        log = self._log
        log.used_all(opening)  # the versions opened (a ciphertext whose tag fails too)
        opened: dict[int, bytes | None] = {}
        size = sum(map(len, payloads.values()))
        alg = cipher(key)
        yield size, functools.partial(_open, opened, alg, opening, versions, aad, payloads, derived)
        plaintexts: dict[int, bytes] = {}
        for i, plain in opened.items():
            if plain is None:
                results.fail(i, _AUTH_FAILED[alg])
            elif self.rewrap:
                plaintexts[i] = plain
            else:
                results.values[i] = b64(plain)
        if not self.rewrap:
            yield 0, functools.partial(self._answer, work, results, decrypted)
            return
        wanted = wanted_versions(key, work, results)
        new, sealing = lease_items(svc, key, wanted, plaintexts, results)
        log.used_all(sealing)  # and the versions sealed under
        yield size, functools.partial(_reseal, alg, sealing, new, aad, plaintexts, results, derived)
        yield 0, functools.partial(self._answer, work, results, encrypted)

    def _answer(
        self, work: list[Item], results: Results, shape: Callable[..., dict[str, Any]]
    ) -> Part:
        if not self.batch:
            return single(results, shape), 0
        return part(work, results, shape)


def _open(
    into: dict[int, bytes | None],
    alg: Algorithm,
    opening: dict[int, bytes],
    versions: dict[int, int],
    aad: dict[int, bytes],
    payloads: dict[int, bytes],
    derived: Derivation | None,
) -> None:
    into.update(open_(alg, opening, versions, aad, payloads, derived))


def _reseal(
    alg: Algorithm,
    sealing: dict[int, bytes],
    versions: dict[int, int],
    aad: dict[int, bytes],
    plaintexts: dict[int, bytes],
    results: Results,
    derived: Derivation | None,
) -> None:
    for i, blob in seal(alg, sealing, versions, aad, plaintexts, derived).items():
        results.values[i] = (versions[i], _ciphertext.encode(versions[i], blob))


DATAKEY_KINDS = ("plaintext", "wrapped")
_DATAKEY_BYTES = {128: 16, 256: 32, 512: 64}


async def datakey(svc: Services, kind: str, name: str, body: Body, log: AccessRecord) -> Answer:
    """A fresh random key sealed under the named key (``datakey/plaintext|wrapped/:name``).

    As in Transit, what is sealed is the data key itself (so ``decrypt`` answers it in
    base64, as it answers every plaintext); ``plaintext`` also returns it, ``wrapped`` only
    the ciphertext. Checks in Transit's order: the path, ``context`` as base64, the key,
    ``bits`` (128, 256 or 512; default 256), then ``key_version`` as in encrypt, then, for a
    derived key, the context (sealed under its key: ``_derive``; a key that is not derived
    ignores it). A ``nonce`` is ignored (OpenBao 2.7 has no such field here): the nonce is a
    fresh random one, never the client's (a convergent key's, its own).
    """
    if kind not in DATAKEY_KINDS:
        raise _wire.user_error("Invalid path, must be 'plaintext' or 'wrapped'")
    context = _wire.as_str(body, "context")
    try:
        decoded = {0: _ciphertext.b64decode(context)} if context else {}
    except CiphertextError:
        raise _wire.user_error("failed to base64-decode context") from None
    if known(svc.store, name):
        key = key_of(svc.store, name)
    else:  # its refusal reads the keystore: off the event loop
        key = await asyncio.to_thread(key_of, svc.store, name)
    size = _DATAKEY_BYTES.get(_wire.as_int(body, "bits", 256))
    if size is None:
        raise _wire.user_error("invalid bit length")
    work = [Item("", _wire.as_int(body, "key_version"), "", "")]
    results = Results(1)
    wanted = wanted_versions(key, work, results)
    derived = derivation(key, decoded, results)
    if results.errors[0] is not None:
        raise _wire.user_error(results.errors[0])
    data_key = os.urandom(size)
    lease = functools.partial(lease_items, svc, key, wanted, {0: data_key}, results)
    try:
        versions, sealing = lease()
    except WouldWait:  # nothing leased yet: asked again in a thread (``UsageMeter``)
        versions, sealing = await asyncio.to_thread(lease)
    if results.errors[0] is not None:
        raise _wire.user_error(results.errors[0])
    version = versions[0]
    sealed = seal(cipher(key), sealing, versions, {0: b""}, {0: data_key}, derived)[0]
    found: dict[str, Any] = {
        "ciphertext": _ciphertext.encode(version, sealed),
        "key_version": version,
    }
    if kind == "plaintext":
        found["plaintext"] = b64(data_key)
    log.used(version)
    if log.contexts is not None and context:
        log.contexts.add(context)
    return 200, _wire.envelope(found)
