"""Usage accounting and limits, over SQLite and a real PostgreSQL: reservations never past the
limit, exactly one automatic rotation however many processes see it, counts that a crash
raises and never lowers, limits that the master key vouches for."""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    SCARCE,
    InvalidRequest,
    KeyStore,
    KeyStoreCorrupt,
    UsageMeter,
    VersionUsage,
)

Open = Callable[[bytes], KeyStore]


def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < within, "not within the time allowed"
        time.sleep(0.01)


def test_new_keys_have_the_nist_bound_and_no_period(store: KeyStore) -> None:
    key = store.create_key("k", Algorithm.AES_256_GCM)
    assert (key.max_encryptions, key.auto_rotate_period) == (2**32, 0.0)
    assert store.usage("k") == {}


def test_limits_are_set_checked_and_kept(open_store: Open, master_key: bytes) -> None:
    store = open_store(master_key)
    key = store.create_key("k", Algorithm.AES_128_GCM, max_encryptions=10, auto_rotate_period=60)
    assert (key.max_encryptions, key.auto_rotate_period) == (10, 60.0)
    assert store.set_limits("k", max_encryptions=20).auto_rotate_period == 60.0
    for most, period in [(0, None), (2**32 + 1, None), (None, 0.5)]:
        with pytest.raises(InvalidRequest):
            store.set_limits("k", most, period)
    again = open_store(master_key)
    eventually(lambda: again.get_key("k").max_encryptions == 20)


def test_reservations_never_pass_the_limit_and_shrink_near_it(store: KeyStore) -> None:
    slot = store.create_key("k", Algorithm.AES_256_GCM).slot(1)
    # At most a sixteenth of what is left, never past the limit.
    assert store.reserve_usage(slot, 65536, 1600) == (100, 100)
    assert store.reserve_usage(slot, 65536, 1600) == (93, 193)
    granted = sum(store.reserve_usage(slot, 1, 1600)[0] for _ in range(2000))
    assert granted == 1600 - 193
    # Nothing past it, whoever asks (there is no unbounded reservation).
    assert store.reserve_usage(slot, 5, 1600, nbytes=77) == (0, 1600)
    store.release_usage(slot, 3, nbytes=3)
    assert store.usage("k") == {1: VersionUsage(1597, 80)}


def test_rotate_if_latest_adds_exactly_one_version_however_many_ask(
    open_store: Open, master_key: bytes
) -> None:
    stores = [open_store(master_key) for _ in range(3)]
    stores[0].create_key("k", Algorithm.AES_256_GCM)
    eventually(lambda: all(any(k.name == "k" for k in s.list_keys()) for s in stores))
    with ThreadPoolExecutor(12) as pool:
        latest = list(pool.map(lambda i: stores[i % 3].rotate_if_latest("k", 1).latest, range(12)))
    assert set(latest) == {2}
    assert [v.version for v in stores[0].get_key("k").versions] == [1, 2]


def test_every_sealing_is_counted_and_closing_gives_back_the_rest(
    open_store: Open, master_key: bytes
) -> None:
    store = open_store(master_key)
    store.create_key("k", Algorithm.AES_256_GCM)
    meter = UsageMeter(store)
    try:
        for _ in range(500):
            lease = meter.lease("k")
            assert (lease.version, lease.sealings, len(lease.material)) == (1, 1, 32)
            meter.add_bytes(lease, 10)
        # Reserved in a block: counted ahead, never behind.
        assert store.usage("k")[1].encryptions >= 500
    finally:
        meter.close()
    assert store.usage("k") == {1: VersionUsage(500, 5000)}


def test_a_crash_over_counts_and_never_under_counts(open_store: Open, master_key: bytes) -> None:
    store = open_store(master_key)
    store.create_key("k", Algorithm.AES_256_GCM)
    crashed = UsageMeter(store)
    for _ in range(300):
        crashed.lease("k")
    # Never closed: what it reserved and did not use stays counted.
    counted = store.usage("k")[1].encryptions
    assert counted >= 300
    survivor = UsageMeter(open_store(master_key))
    try:
        for _ in range(200):
            survivor.lease("k")
    finally:
        survivor.close()
    assert store.usage("k")[1].encryptions >= 500
    assert store.usage("k")[1].encryptions == counted + 200


@pytest.mark.parametrize("limit", [50, SCARCE + 500])
def test_the_limit_rotates_exactly_once_across_processes(
    open_store: Open, master_key: bytes, limit: int
) -> None:
    stores = [open_store(master_key) for _ in range(3)]
    stores[0].create_key("k", Algorithm.AES_256_GCM, max_encryptions=limit)
    eventually(lambda: all(any(k.name == "k" for k in s.list_keys()) for s in stores))
    meters = [UsageMeter(s) for s in stores]
    versions: list[int] = []
    lock = threading.Lock()

    def seal(i: int) -> None:
        lease = meters[i % 3].lease("k")
        with lock:
            versions.append(lease.version)

    try:
        with ThreadPoolExecutor(6) as pool:
            list(pool.map(seal, range(limit)))
        # Every sealing up to the limit used version 1; reaching it rotated the key once.
        assert versions == [1] * limit
        eventually(lambda: stores[0].get_key("k").latest == 2)
        with ThreadPoolExecutor(6) as pool:
            list(pool.map(seal, range(limit, limit + 30)))
        assert versions[limit:] == [2] * 30
    finally:
        for meter in meters:
            meter.close()
    assert [v.version for v in stores[0].get_key("k").versions] == [1, 2]
    assert stores[0].usage("k")[1].encryptions == limit


def test_a_period_rotates_once_per_period_across_processes(
    open_store: Open, master_key: bytes
) -> None:
    stores = [open_store(master_key) for _ in range(3)]
    stores[0].create_key("k", Algorithm.AES_256_GCM, auto_rotate_period=1)
    meters = [UsageMeter(s) for s in stores]
    try:
        eventually(lambda: stores[0].get_key("k").latest >= 3, within=10)
    finally:
        for meter in meters:
            meter.close()
    created = [v.created_at for v in stores[0].get_key("k").versions]
    # One rotation per period, never two for the same one (the three meters all check).
    assert all(b - a >= 0.99 for a, b in itertools.pairwise(created))


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_limit_raised_in_the_sqlite_file_refuses_the_key(
    open_store: Open, master_key: bytes, db_path: Path
) -> None:
    store = open_store(master_key)
    store.create_key("k", Algorithm.AES_256_GCM, max_encryptions=1000)
    with closing(sqlite3.connect(db_path)) as db, db:
        db.execute("UPDATE key_limits SET max_encryptions = 4294967296")
    with pytest.raises(KeyStoreCorrupt, match="'k' fails its integrity check"):
        open_store(master_key).get_key("k")
