"""``UsageMeter.lease``, the one usage rule of every sealing, over SQLite and a real PostgreSQL:
exactly ``max_encryptions`` under each version, one automatic rotation when the latest is used
up, a version asked for by number refused once used up (and never sealed past its limit), and
reservations that belong to a key's identity, never to its name."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    KeyInfo,
    KeyNotFound,
    KeyStore,
    Lease,
    UsageMeter,
    VersionUsage,
    VersionUsedUp,
)

Open = Callable[[bytes], KeyStore]


@contextmanager
def metered(store: KeyStore) -> Iterator[UsageMeter]:
    meter = UsageMeter(store)
    try:
        yield meter
    finally:
        meter.close()


def versions(store: KeyStore, name: str) -> list[int]:
    return [v.version for v in store.get_key(name).versions]


def sealed(leases: list[Lease]) -> Counter[int]:
    """Sealings per version."""
    counted: Counter[int] = Counter()
    for lease in leases:
        counted[lease.version] += lease.sealings
    return counted


def seen(store: KeyStore, key: KeyInfo) -> None:
    """Wait until the store's cache shows ``key`` (PostgreSQL learns of others' writes by
    notification, a moment later)."""
    deadline = time.monotonic() + 10
    while key.born not in [k.born for k in store.list_keys() if k.name == key.name]:
        assert time.monotonic() < deadline, "the new key never showed"
        time.sleep(0.01)


def test_the_latest_seals_exactly_its_limit_then_rotates_once(store: KeyStore) -> None:
    store.create_key("k", Algorithm.AES_256_GCM, max_encryptions=100)
    with metered(store) as meter:
        leases = [meter.lease("k") for _ in range(130)]
    assert [lease.version for lease in leases] == [1] * 100 + [2] * 30
    assert all(lease.sealings == 1 for lease in leases)
    assert versions(store, "k") == [1, 2]
    assert {v: u.encryptions for v, u in store.usage("k").items()} == {1: 100, 2: 30}


def test_a_batch_is_split_at_the_limit_never_sealed_past_it(store: KeyStore) -> None:
    store.create_key("k", Algorithm.AES_128_GCM, max_encryptions=100)
    with metered(store) as meter:
        first = [meter.lease("k", n=30) for _ in range(3)]
        assert sealed(first) == {1: 90}
        # 30 more: the 10 version 1 has left, then (asked again) 20 under version 2.
        short = meter.lease("k", n=30)
        assert (short.version, short.sealings) == (1, 10)
        rest = meter.lease("k", n=20)
        assert (rest.version, rest.sealings) == (2, 20)
        # More than a whole version's limit: one lease per version, each to its limit.
        leases, left = [], 250
        while left:
            leases.append(meter.lease("k", n=left))
            left -= leases[-1].sealings
        assert sealed(leases) == {2: 80, 3: 100, 4: 70}
    assert versions(store, "k") == [1, 2, 3, 4]
    assert {v: u.encryptions for v, u in store.usage("k").items()} == {
        1: 100,
        2: 100,
        3: 100,
        4: 70,
    }


def test_a_version_asked_for_seals_up_to_its_limit_then_is_refused(store: KeyStore) -> None:
    store.create_key("k", Algorithm.CHACHA20_POLY1305, max_encryptions=20)
    with metered(store) as meter:
        for _ in range(15):
            assert meter.lease("k").version == 1
        store.rotate_key("k")  # version 1 is an older version now, 5 sealings left
        leases = [meter.lease("k", 1) for _ in range(5)]
        assert sealed(leases) == {1: 5}
        with pytest.raises(VersionUsedUp, match="version 1 has reached its max_encryptions"):
            meter.lease("k", 1)
        batch = meter.lease("k", 2, n=30)  # asked for by number: only what it has left
        assert (batch.version, batch.sealings) == (2, 20)
        with pytest.raises(VersionUsedUp):
            meter.lease("k", 2, n=30)
        # Used up as the latest, asked for by number: refused, and the key rotates (once).
        assert meter.lease("k").version == 3
    assert versions(store, "k") == [1, 2, 3]
    assert {v: u.encryptions for v, u in store.usage("k").items()} == {1: 20, 2: 20, 3: 1}


def test_lease_refuses_what_does_not_exist(store: KeyStore) -> None:
    store.create_key("k", Algorithm.AES_256_GCM)
    with metered(store) as meter:
        for version in (0, 2):
            with pytest.raises(KeyNotFound):
                meter.lease("k", version)
        with pytest.raises(KeyNotFound):
            meter.lease("absent")
        with pytest.raises(ValueError, match="one sealing or more"):
            meter.lease("k", n=0)
        lease = meter.lease("k")
    assert "material" not in repr(lease)  # a lease in a log line shows no key material
    assert store.usage("k") == {1: VersionUsage(1, 0)}


def test_bytes_are_counted_under_the_lease(store: KeyStore) -> None:
    store.create_key("k", Algorithm.AES_256_GCM, max_encryptions=3)
    with metered(store) as meter:
        for size in (10, 20, 30, 40):
            meter.add_bytes(meter.lease("k"), size)
    assert store.usage("k") == {1: VersionUsage(3, 60), 2: VersionUsage(1, 40)}


def test_reservations_belong_to_the_key_not_to_its_name(
    open_store: Open, master_key: bytes
) -> None:
    """A process that holds a block of a key deleted elsewhere, then created again under the
    same name, seals nothing of the new key from the old block, and gives the old block back to
    nobody: the new key counts exactly what was sealed under it."""
    store, elsewhere = open_store(master_key), open_store(master_key)
    old = store.create_key("k", Algorithm.AES_256_GCM)
    with metered(store) as meter:
        for _ in range(5):
            meter.lease("k")  # the rest of a block of 65,536 held by this meter
        elsewhere.configure("k", deletion_allowed=True)
        elsewhere.delete_key("k")
        new = elsewhere.create_key("k", Algorithm.AES_256_GCM)
        assert new.born != old.born
        seen(store, new)
        with pytest.raises(KeyNotFound):
            store.reserve_usage(old.slot(1), 1, 100)
        for _ in range(3):
            lease = meter.lease("k")
            assert lease.key.born == new.born
            assert lease.material == store.key_material("k", 1)
        store.release_usage(old.slot(1), 1000)  # the old key's: nothing of the new one's
        assert store.reserved([old.slot(1)]) == {}
    # Closed: what the meter held of the new key is given back, nothing of the old one lands.
    assert store.usage("k") == {1: VersionUsage(3, 0)}


class Interleaved:
    """A real store as a lease sees it, but for one thing: right after the next ``get_key`` the
    test's thread makes, ``between()`` runs (another process deletes and re-creates the key)."""

    def __init__(self, store: KeyStore, between: Callable[[], None]) -> None:
        self._store, self._between = store, between
        self._armed: int | None = None

    def arm(self) -> None:
        self._armed = threading.get_ident()

    def get_key(self, name: str) -> KeyInfo:
        key = self._store.get_key(name)
        if self._armed == threading.get_ident():
            self._armed = None
            self._between()
        return key

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._store, attr)


def test_a_lease_never_pairs_one_keys_info_with_anothers_material(
    open_store: Open, master_key: bytes
) -> None:
    """The key deleted and created again elsewhere between the lease's look-up of the key and of
    its material, while this process holds a block of the old key: the lease is refused (the key
    it began with is gone), never the old key's slot and block with the new key's material. By
    name, the material was the new key's, sealed from the old block, counted for no key."""
    store, elsewhere = open_store(master_key), open_store(master_key)
    old = store.create_key("k", Algorithm.AES_256_GCM)
    made: list[KeyInfo] = []

    def delete_and_create() -> None:
        elsewhere.configure("k", deletion_allowed=True)
        elsewhere.delete_key("k")
        made.append(elsewhere.create_key("k", Algorithm.AES_256_GCM))
        seen(store, made[0])

    view = Interleaved(store, delete_and_create)
    with metered(cast(KeyStore, view)) as meter:
        first = meter.lease("k")  # and a block of 65,536 held for the old key
        assert (first.key.born, first.material) == (old.born, store.key_material("k", 1))
        view.arm()
        with pytest.raises(KeyNotFound):  # by name: the old key's block, the new key's material
            meter.lease("k")
        (new,) = made
        assert new.born != old.born
        lease = meter.lease("k")
        assert (lease.key.born, lease.slot) == (new.born, new.slot(1))
        assert lease.material == store.material(new.slot(1)) == store.key_material("k", 1)
        with pytest.raises(KeyNotFound):
            store.material(old.slot(1))
    assert store.usage("k") == {1: VersionUsage(1, 0)}
