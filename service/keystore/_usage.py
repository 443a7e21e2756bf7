"""Usage accounting per key version, and the automatic rotations it and time trigger.

Every sealing is counted against its key version before it is made, from sealings this process
reserved in the store beforehand, in blocks (``reserve_usage``: up to ``BLOCK`` at a time, one
transaction), so a request never waits for the store but when its process's block ran out:
a new block is asked for in the background once a quarter is left. What a process reserved
and did not use is counted as used if it crashes (over-counting, never under-counting) and
given back when it closes.

Near a version's limit (``SCARCE`` or fewer left) blocks would strand sealings with processes
that do not need them, and the version would rotate before its limit: there a process reserves
one sealing at a time, as it seals, and gives back what it holds within a tick. The process
whose reservation reaches the limit rotates the key (``rotate_if_latest``: of several
processes that see it at once, exactly one adds a version); one that finds nothing left before
that rotation is done does it itself. ``auto_rotate_period`` is checked every second by every
process the same way.

Plaintext bytes are added up in memory and written with the next reservation or every few
seconds: a crash may lose the last few seconds of them (bytes bound nothing).
"""

from __future__ import annotations

import logging
import threading
import time

from ._base import KeyInfo, KeyStore
from ._rows import BLOCK
from .errors import KeyNotFound, KeyStoreError, KeyStoreUnavailable

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

Version = tuple[str, int]


class UsageMeter:
    """Counts sealings per key version for one process; see the module docstring."""

    def __init__(self, store: KeyStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._held: dict[Version, int] = {}  # reserved, not used yet
        self._limits: dict[Version, int] = {}
        self._bytes: dict[Version, int] = {}  # not written yet
        self._scarce: dict[Version, float] = {}  # near the limit since (monotonic)
        self._refill: set[Version] = set()
        self._rotate: set[Version] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sealflow-usage", daemon=True)
        self._thread.start()

    # -- the request path

    def seal(self, name: str) -> tuple[KeyInfo, bytes]:
        """The key and the material of the version one new sealing uses, counted.

        KeyNotFound, or KeyStoreUnavailable if a reservation is needed and the store does
        not answer (a sealing is never made uncounted).
        """
        key = self._store.get_key(name)
        for _ in range(3):
            version = key.latest
            if self.count(key, version, 1, limit=True):
                return key, self._store.key_material(name, version)
            key = self._rotate_now(key, version)
        raise KeyStoreUnavailable(f"key {name!r}: no version with sealings left")

    def count(self, key: KeyInfo, version: int, n: int, limit: bool = False) -> bool:
        """Count ``n`` sealings under a version. With ``limit``: False, and nothing counted,
        if the version has fewer than ``n`` left; without (sealings a batch makes whatever
        comes), always True, past the limit if need be."""
        k = (key.name, version)
        with self._lock:
            held = self._held.get(k, 0)
            if held >= n:
                self._held[k] = held - n
                if held - n < _REFILL_BELOW and k not in self._scarce:
                    self._refill.add(k)
                    self._wake.set()
                return True
            self._limits[k] = key.max_encryptions
            if key.max_encryptions <= SCARCE:
                self._scarce.setdefault(k, time.monotonic())
        return self._reserve_for(key, version, n, limit)

    def forget(self, name: str) -> None:
        """Drop what this process holds or has not written for a key just deleted: its rows
        are gone, and a new key of the same name starts from nothing. (Other processes drop
        theirs once they find the key gone, ``_give_back``.)"""
        with self._lock:
            for table in (self._held, self._limits, self._bytes, self._scarce):
                for k in [k for k in table if k[0] == name]:
                    del table[k]
            self._refill = {k for k in self._refill if k[0] != name}
            self._rotate = {k for k in self._rotate if k[0] != name}

    def add_bytes(self, name: str, version: int, nbytes: int) -> None:
        if nbytes > 0:
            with self._lock:
                self._bytes[name, version] = self._bytes.get((name, version), 0) + nbytes

    # -- reservations

    def _reserve_for(self, key: KeyInfo, version: int, n: int, limit: bool) -> bool:
        k = (key.name, version)
        bound = key.max_encryptions if limit else 0
        with self._lock:
            want = n if k in self._scarce else max(n, BLOCK)
        nbytes = self._bytes_of(k)
        granted, total = self._store.reserve_usage(key.name, version, want, bound, nbytes)
        while granted < n and limit:
            if granted:
                self._store.release_usage(key.name, version, granted)
            if not self._others_may_give_back(k):
                return False
            time.sleep(_RETRY)
            granted, total = self._store.reserve_usage(key.name, version, n, bound)
        surplus = granted - n
        with self._lock:
            if key.max_encryptions - total < SCARCE:
                self._scarce.setdefault(k, time.monotonic())
            if k in self._scarce:
                # Near the limit nothing is held (another thread's block too): what others
                # may need stays theirs to take.
                surplus += self._held.pop(k, 0)
            else:
                self._held[k] = self._held.get(k, 0) + surplus
                surplus = 0
            if total >= key.max_encryptions:
                self._rotate.add(k)
                self._wake.set()
        if surplus:
            self._store.release_usage(key.name, version, surplus)
        return True

    def _others_may_give_back(self, k: Version) -> bool:
        """Whether the version came near its limit so recently that other processes may still
        hold sealings of it they are about to give back (they look every ``_SCARCE_CHECK``):
        until then a used-up version is not rotated, so it seals up to its limit. Waiting
        happens once per version, when its last sealings went within ``_WINDOW`` of that."""
        with self._lock:
            since = self._scarce.get(k)
        return since is not None and time.monotonic() - since < _WINDOW

    def _bytes_of(self, k: Version) -> int:
        with self._lock:
            return self._bytes.pop(k, 0)

    def _rotate_now(self, key: KeyInfo, version: int) -> KeyInfo:
        return self._store.rotate_if_latest(key.name, version)

    # -- the background thread

    def close(self) -> None:
        """Give back what is held and write the bytes (best effort: the store may be gone)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        with self._lock:
            held, self._held = self._held, {}
            nbytes, self._bytes = self._bytes, {}
        for k in held.keys() | nbytes.keys():
            if held.get(k) or nbytes.get(k):
                try:
                    self._store.release_usage(*k, held.get(k, 0), nbytes.get(k, 0))
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
        for k in due:
            if self._others_may_give_back(k):
                with self._lock:
                    self._rotate.add(k)  # again at a later tick
                continue
            name, version = k
            try:
                key = self._store.get_key(name)
            except KeyNotFound:
                continue
            # Still reserved to the limit once others had their time to give sealings back.
            if self._store.reserved([k]).get(k, 0) >= key.max_encryptions:
                self._rotate_now(key, version)

    def _refills(self) -> None:
        with self._lock:
            due, self._refill = self._refill, set()
        for name, version in due:
            try:
                key = self._store.get_key(name)
            except KeyNotFound:
                continue
            if key.latest == version:
                self._top_up(key, version)

    def _top_up(self, key: KeyInfo, version: int) -> None:
        k = (key.name, version)
        with self._lock:
            if k in self._scarce or self._held.get(k, 0) >= _REFILL_BELOW:
                return
        granted, total = self._store.reserve_usage(
            key.name, version, BLOCK, key.max_encryptions, self._bytes_of(k)
        )
        with self._lock:
            if key.max_encryptions - total < SCARCE:
                self._scarce.setdefault(k, time.monotonic())
                surplus = granted  # near the limit nothing is held
            else:
                self._held[k] = self._held.get(k, 0) + granted
                surplus = 0
        if surplus:
            self._store.release_usage(key.name, version, surplus)

    def _give_back(self) -> None:
        """Return what is held of versions near their limit, or no longer the latest."""
        with self._lock:
            held = [k for k, n in self._held.items() if n > 0]
        if not held:
            return
        totals = self._store.reserved(held)
        for k in held:
            name, version = k
            try:
                latest = self._store.get_key(name).latest
            except KeyNotFound:
                self.forget(name)  # deleted (delete_key): nothing to give back to
                continue
            with self._lock:
                near = self._limits.get(k, 0) - totals.get(k, 0) < SCARCE
                if near:
                    self._scarce.setdefault(k, time.monotonic())
                if not near and latest == version:
                    continue
                n, self._held[k] = self._held.get(k, 0), 0
            if n:
                self._store.release_usage(name, version, n, self._bytes_of(k))

    def _flush_bytes(self) -> None:
        with self._lock:
            nbytes, self._bytes = self._bytes, {}
        for (name, version), n in nbytes.items():
            self._store.release_usage(name, version, 0, n)

    def _periods(self) -> None:
        now = time.time()
        for key in self._store.list_keys():
            period = key.auto_rotate_period
            if period > 0 and now >= key.versions[-1].created_at + period:
                self._rotate_now(key, key.latest)


def next_rotation(key: KeyInfo) -> float | None:
    """When the key rotates by time (Unix time), or None."""
    if key.auto_rotate_period <= 0:
        return None
    return key.versions[-1].created_at + key.auto_rotate_period
