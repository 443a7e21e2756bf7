"""Usage accounting per key version: the one lease every sealing takes, and the automatic
rotations it and time trigger.

Every sealing on every API (native single-shot, stream and records; Transit encrypt, rewrap
and datakey) is leased before it is made: ``UsageMeter.lease`` counts it against a key version
and hands back the version's material. Leases come from sealings this process reserved in
the store beforehand, in blocks (``reserve_usage``: up to ``BLOCK`` at a time, one
transaction), so a request never waits for the store but when its process's block ran out: a
new block is asked for in the background once a quarter is left. What a process reserved and
did not use is counted as used if it crashes (over-counting, never under-counting) and given
back when it closes. A reservation belongs to the key's identity fixed at creation (``Slot``:
the name and ``KeyInfo.born``), never to its name alone: a key created again under a deleted
key's name is not given what the old one's users held.

Near a version's limit (``SCARCE`` or fewer left) blocks would strand sealings with processes
that do not need them, and the version would rotate before its limit: there a process reserves
only what it seals, as it seals, and gives back what it holds within a tick. A version that
reached its limit leases nothing more. The latest is then rotated (``rotate_if_latest``: of
several processes that see it at once, exactly one adds a version), by the process whose
reservation reached the limit or by the first that finds nothing left, and leases go on under
the new version; a version asked for by number (Transit's ``key_version``) is refused
(``VersionUsedUp``). ``auto_rotate_period`` is checked every second by every process the same
way.

Nothing that waits on the store runs on the event loop: once ``bind_loop`` named the loop's
thread, a lease asked for there that needs the store (a reservation, a rotation) raises
``WouldWait`` before it counts anything, and the caller asks again from a thread (``ready``
tells beforehand whether a lease would be served from what is held). Blocks are topped up in
the background, so a warm key never needs the store on the loop.

Plaintext bytes are added up in memory and written with the next reservation or every few
seconds: a crash may lose the last few seconds of them (bytes bound nothing).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import NamedTuple

from ._base import KeyInfo, KeyStore, Slot
from ._rows import BLOCK
from .errors import (
    MISSING_CONTEXT,
    SOFT_DELETED,
    KeyNotFound,
    KeySoftDeleted,
    KeyStoreError,
    KeyStoreUnavailable,
    VersionUsedUp,
    WouldWait,
    WrongKeyType,
)

log = logging.getLogger("sealflow.keystore")

SCARCE = 1024
_REFILL_BELOW = BLOCK // 4
_TICK = 0.1
_SCARCE_CHECK = 0.25
_BYTES_FLUSH = 5.0
_PERIOD_CHECK = 1.0
# How long after a version came near its limit others may still hold sealings of it.
_WINDOW = 3 * _SCARCE_CHECK
_RETRY = 0.02
# Rotations a lease of the latest version tries before it gives up (others took each new one).
_ROTATIONS = 3


class Lease(NamedTuple):
    """``sealings`` counted under one version of a key, and the version's material to make
    them with. (A tuple: made on every request, it costs a third of a frozen dataclass.)"""

    key: KeyInfo
    version: int
    sealings: int
    material: bytes
    slot: Slot  # what the sealings were counted against (``add_bytes``)

    def __repr__(self) -> str:  # never the material, in a log line or a message
        return f"Lease(key={self.key.name!r}, version={self.version}, sealings={self.sealings})"


class UsageMeter:
    """Counts sealings per key version for one process; see the module docstring."""

    def __init__(self, store: KeyStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._held: dict[Slot, int] = {}  # reserved, not used yet
        self._bytes: dict[Slot, int] = {}  # not written yet
        self._scarce: dict[Slot, float] = {}  # near the limit since (monotonic)
        self._refill: set[Slot] = set()
        self._rotate: set[Slot] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._loop: int | None = None  # the event loop's thread (``bind_loop``)
        self._thread = threading.Thread(target=self._run, name="sealflow-usage", daemon=True)
        self._thread.start()

    # -- the request path

    def bind_loop(self) -> None:
        """Name the calling thread as the event loop's: leases asked for on it never wait on
        the store (``WouldWait`` instead)."""
        self._loop = threading.get_ident()

    def ready(self, name: str, n: int = 1) -> bool:
        """Whether a lease of ``n`` sealings under the key's latest version would be served
        from what this process holds, without the store (a hint: another lease may take them
        first)."""
        try:
            key = self._store.get_key(name)
        except KeyStoreError:
            return False
        slot = key.slot(key.latest)
        with self._lock:
            return self._held.get(slot, 0) >= n and slot not in self._scarce

    def on_loop(self) -> bool:
        """Whether the caller runs on the event loop's thread (``bind_loop``), where nothing
        may wait on the store."""
        return self._loop is not None and threading.get_ident() == self._loop

    def _may_wait(self, what: str) -> None:
        """Refuse, before anything is counted, a call to the store from the event loop."""
        if self.on_loop():
            raise WouldWait(f"{what} needs the keystore: asked again off the event loop")

    def lease(
        self, name: str, version: int | None = None, n: int = 1, derived: bool = False
    ) -> Lease:
        """From 1 to ``n`` sealings under a version of the key, counted before they are made:
        the one rule for every sealing (see the module docstring).

        ``version`` None, the latest: if it has none left, the key is rotated first (once,
        however many see it) and the new version leased. A version given (Transit's
        ``key_version``): VersionUsedUp if it has none left. Fewer than ``n`` only when the
        version reached its limit with these: ask again for the rest (under the latest, that
        is the next version; under a version given, VersionUsedUp).

        ``derived``: the caller seals under a per-context key it derives from the material
        (Transit's derived keys); a derived key is refused to every other caller, and a key of
        a type that does not encrypt to all (``sealable``).

        KeyNotFound for a key, or a version given, that does not exist; KeySoftDeleted;
        WrongKeyType;
        KeyStoreUnavailable
        if a reservation is needed and the store does not answer (a sealing is never made
        uncounted).
        """
        if n < 1:
            raise ValueError("a lease is for one sealing or more")
        key = self._store.get_key(name)
        if key.soft_deleted:
            raise KeySoftDeleted(SOFT_DELETED)
        sealable(key, derived)
        latest = key.latest
        asked = latest if version is None else version
        if not 1 <= asked <= latest:
            raise KeyNotFound(f"key {name!r} version {asked} not found")
        for _ in range(_ROTATIONS):
            slot = key.slot(asked)
            material = self._store.material(slot)
            got = self._take(key, slot, n)
            if got:
                return Lease(key, asked, got, material, slot)
            if version is not None:
                if version == key.latest:
                    self._may_wait("a rotation")
                    self._rotate_now(key, version)  # used up, whoever finds it so
                raise VersionUsedUp(
                    f"key {name!r} version {version} has reached its max_encryptions"
                    f" ({key.max_encryptions}) and seals nothing more: use a later version"
                )
            self._may_wait("a rotation")
            key = self._rotate_now(key, asked)
            asked = key.latest
        raise KeyStoreUnavailable(f"key {name!r}: no version with sealings left")

    def add_bytes(self, lease: Lease, nbytes: int) -> None:
        """Plaintext bytes sealed under a lease (written with a later reservation, or within
        ``_BYTES_FLUSH`` seconds)."""
        if nbytes > 0:
            with self._lock:
                self._bytes[lease.slot] = self._bytes.get(lease.slot, 0) + nbytes

    def forget(self, name: str) -> None:
        """Drop what this process holds or has not written for a key just deleted: its rows
        are gone, and a new key of the same name starts from nothing. (Other processes drop
        theirs once they find the key gone, ``_give_back``.)"""
        with self._lock:
            for slot in {s for s in (*self._held, *self._bytes, *self._scarce) if s.name == name}:
                self._drop(slot)

    # -- reservations

    def _take(self, key: KeyInfo, slot: Slot, n: int) -> int:
        """Up to ``n`` sealings of a version: from what this process holds, else reserved now.
        Fewer only when the version reached its limit with them; 0 once it has none left for
        this process (and others had their time to give back theirs)."""
        with self._lock:
            held = self._held.get(slot, 0)
            if held >= n:
                self._held[slot] = held - n
                if held - n < _REFILL_BELOW and slot not in self._scarce:
                    self._refill.add(slot)
                    self._wake.set()
                return n
            self._may_wait("a reservation")
            if key.max_encryptions <= SCARCE:
                self._scarce.setdefault(slot, time.monotonic())
            # Blocks for the latest version only: one asked for by number is reserved as used.
            bulk = slot not in self._scarce and slot.version == key.latest
        limit = key.max_encryptions
        want = max(n, BLOCK) if bulk else n
        granted, total = self._store.reserve_usage(slot, want, limit, self._bytes_of(slot))
        got = min(granted, n)
        surplus = granted - got
        # Near the limit a reservation gets a sixteenth of what is left: again, until n or none.
        while got < n:
            if not granted:
                if got or not self._others_may_give_back(slot):
                    break
                time.sleep(_RETRY)
            granted, total = self._store.reserve_usage(slot, n - got, limit)
            got += granted
        with self._lock:
            if limit - total < SCARCE:
                self._scarce.setdefault(slot, time.monotonic())
            if slot in self._scarce:
                # Near the limit nothing is held (another thread's block too): what others
                # may need stays theirs to take.
                surplus += self._held.pop(slot, 0)
            else:
                self._held[slot] = self._held.get(slot, 0) + surplus
                surplus = 0
            if total >= limit:
                self._rotate.add(slot)
                self._wake.set()
        if surplus:
            self._store.release_usage(slot, surplus)
        return got

    def _others_may_give_back(self, slot: Slot) -> bool:
        """Whether the version came near its limit so recently that other processes may still
        hold sealings of it they are about to give back (they look every ``_SCARCE_CHECK``):
        until then a used-up version is not rotated, so it seals up to its limit. Waiting
        happens once per version, when its last sealings went within ``_WINDOW`` of that."""
        with self._lock:
            since = self._scarce.get(slot)
        return since is not None and time.monotonic() - since < _WINDOW

    def _bytes_of(self, slot: Slot) -> int:
        with self._lock:
            return self._bytes.pop(slot, 0)

    def _rotate_now(self, key: KeyInfo, version: int) -> KeyInfo:
        if not rotatable(key):
            raise VersionUsedUp(
                f"key {key.name!r} version {version} has reached its max_encryptions"
                f" ({key.max_encryptions}) and was imported without allow_rotation: import"
                " a new version"
            )
        return self._store.rotate_if_latest(key.name, version)

    def _current(self, slot: Slot) -> KeyInfo | None:
        """The key a slot belongs to, or None if it is gone (deleted, maybe replaced)."""
        try:
            key = self._store.get_key(slot.name)
        except KeyNotFound:
            return None
        return key if key.born == slot.born else None

    def _drop(self, slot: Slot) -> None:
        """Forget a slot whose key is gone (the lock held): the store keeps nothing of it."""
        for table in (self._held, self._bytes, self._scarce):
            table.pop(slot, None)
        self._refill.discard(slot)
        self._rotate.discard(slot)

    # -- the background thread

    def close(self) -> None:
        """Give back what is held and write the bytes (best effort: the store may be gone)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        with self._lock:
            held, self._held = self._held, {}
            nbytes, self._bytes = self._bytes, {}
        for slot in held.keys() | nbytes.keys():
            if held.get(slot) or nbytes.get(slot):
                try:
                    self._store.release_usage(slot, held.get(slot, 0), nbytes.get(slot, 0))
                except KeyStoreError:
                    return

    def _run(self) -> None:
        last = dict.fromkeys(("scarce", "bytes", "period"), time.monotonic())
        while not self._stop.is_set():
            self._wake.wait(_TICK)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._rotations()
                self._refills()
                now = time.monotonic()
                if now - last["scarce"] >= _SCARCE_CHECK:
                    last["scarce"] = now
                    self._give_back()
                if now - last["bytes"] >= _BYTES_FLUSH:
                    last["bytes"] = now
                    self._flush_bytes()
                if now - last["period"] >= _PERIOD_CHECK:
                    last["period"] = now
                    self._periods()
            except KeyStoreError as exc:
                log.debug("usage accounting waits for the keystore: %s", exc)

    def _rotations(self) -> None:
        with self._lock:
            due, self._rotate = self._rotate, set()
        for slot in due:
            if self._others_may_give_back(slot):
                with self._lock:
                    self._rotate.add(slot)  # again at a later tick
                continue
            key = self._current(slot)
            # Still reserved to the limit once others had their time to give sealings back.
            if key is None or not rotatable(key):
                continue
            if self._store.reserved([slot]).get(slot, 0) >= key.max_encryptions:
                self._rotate_now(key, slot.version)

    def _refills(self) -> None:
        with self._lock:
            due, self._refill = self._refill, set()
        for slot in due:
            key = self._current(slot)
            if key is not None and key.latest == slot.version:
                self._top_up(key, slot)

    def _top_up(self, key: KeyInfo, slot: Slot) -> None:
        with self._lock:
            if slot in self._scarce or self._held.get(slot, 0) >= _REFILL_BELOW:
                return
        granted, total = self._store.reserve_usage(
            slot, BLOCK, key.max_encryptions, self._bytes_of(slot)
        )
        with self._lock:
            if key.max_encryptions - total < SCARCE:
                self._scarce.setdefault(slot, time.monotonic())
                surplus = granted  # near the limit nothing is held
            else:
                self._held[slot] = self._held.get(slot, 0) + granted
                surplus = 0
        if surplus:
            self._store.release_usage(slot, surplus)

    def _give_back(self) -> None:
        """Return what is held of versions near their limit, or no longer the latest."""
        with self._lock:
            held = [slot for slot, n in self._held.items() if n > 0]
        if not held:
            return
        totals = self._store.reserved(held)
        for slot in held:
            key = self._current(slot)
            with self._lock:
                if key is None:
                    self._drop(slot)  # deleted (delete_key): nothing to give back to
                    continue
                near = key.max_encryptions - totals.get(slot, 0) < SCARCE
                if near:
                    self._scarce.setdefault(slot, time.monotonic())
                if not near and key.latest == slot.version:
                    continue
                n, self._held[slot] = self._held.get(slot, 0), 0
            if n:
                self._store.release_usage(slot, n, self._bytes_of(slot))

    def _flush_bytes(self) -> None:
        with self._lock:
            nbytes, self._bytes = self._bytes, {}
        for slot, n in nbytes.items():
            self._store.release_usage(slot, 0, n)

    def _periods(self) -> None:
        now = time.time()
        for key in self._store.list_keys():
            period = key.auto_rotate_period
            if period > 0 and rotatable(key) and now >= key.versions[-1].created_at + period:
                self._rotate_now(key, key.latest)


def rotatable(key: KeyInfo) -> bool:
    """Whether sealflow may rotate the key: not one imported without ``allow_rotation``
    (Transit's rule; docs/TRANSIT.md, Importing keys), nor one soft-deleted (it rests until
    restored: no periodic rotation is even attempted)."""
    return not key.soft_deleted and (key.allow_rotation or not key.imported)


def next_rotation(key: KeyInfo) -> float | None:
    """When the key rotates by time (Unix time), or None."""
    if key.auto_rotate_period <= 0 or not rotatable(key):
        return None
    return key.versions[-1].created_at + key.auto_rotate_period


def sealable(key: KeyInfo, derived: bool = False) -> None:
    """WrongKeyType, in Transit's words, unless the key seals: an AEAD or RSA key, derived
    exactly when the caller derives (see ``UsageMeter.lease``)."""
    if not key.key_type.encrypts:
        raise WrongKeyType(f"message encryption not supported for key type {key.key_type.name}")
    if key.key_type.derived != derived:
        raise WrongKeyType(MISSING_CONTEXT if key.key_type.derived else "key is not derived")
