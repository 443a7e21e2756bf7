"""Cached native cipher contexts: the three strategies, per-thread ownership, no leaks."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from sealflow import engine
from sealflow.engine import AEAD, ContextStrategy, _binding


def native(strategy: str) -> dict[str, int]:
    stats = engine.context_stats()
    return {e: stats[("native", strategy, e)] for e in ("created", "rekeyed", "reused", "freed")}


def live(strategy: str) -> int:
    n = native(strategy)
    return n["created"] - n["freed"]


def delta(strategy: str, work: Callable[[], None]) -> dict[str, int]:
    """Counter changes across work(), which runs its operations in a thread that then ends."""
    before = native(strategy)
    work()
    # Thread.join() returns before the OS thread's exit handlers (which free its contexts)
    # have run: wait, boundedly, for the live count to come back down.
    deadline = time.monotonic() + 10
    while live(strategy) != before["created"] - before["freed"] and time.monotonic() < deadline:
        time.sleep(0.001)
    after = native(strategy)
    return {e: after[e] - before[e] for e in after}


def in_thread(work: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert errors == []


@pytest.fixture
def use_native() -> Iterator[None]:
    before = engine.get_context_strategy()
    engine.set_provider("native")
    try:
        yield
    finally:
        engine.set_provider(None)
        engine.set_context_strategy(before)


N = 200
KEYS = [os.urandom(32) for _ in range(N + 1)]


def same_key() -> None:
    a = AEAD("aes-256-gcm", KEYS[0])
    for _ in range(N):
        a.seal(bytes(12), b"", b"x")


def new_key_each_time() -> None:
    for key in KEYS[1:]:
        AEAD("aes-256-gcm", key).seal(bytes(12), b"", b"x")


def both() -> None:
    same_key()
    new_key_each_time()


@pytest.mark.usefixtures("use_native")
def test_lazy_keeps_one_context_and_rekeys_in_place() -> None:
    engine.set_context_strategy(ContextStrategy.LAZY)
    d = delta("lazy", lambda: in_thread(both))
    # first op creates, N-1 reuse the same key, then N re-keys; freed once when the thread ends
    assert d == {"created": 1, "reused": N - 1, "rekeyed": N, "freed": 1}


@pytest.mark.usefixtures("use_native")
def test_hybrid_keeps_context_only_while_the_key_stays() -> None:
    engine.set_context_strategy(ContextStrategy.HYBRID)
    d = delta("hybrid", lambda: in_thread(both))
    assert d == {"created": 1 + N, "reused": N - 1, "rekeyed": 0, "freed": 1 + N}


@pytest.mark.usefixtures("use_native")
def test_eager_frees_after_every_operation() -> None:
    engine.set_context_strategy(ContextStrategy.EAGER)
    d = delta("eager", lambda: in_thread(both))
    assert d == {"created": 2 * N, "reused": 0, "rekeyed": 0, "freed": 2 * N}


@pytest.mark.usefixtures("use_native")
@pytest.mark.parametrize("strategy", list(ContextStrategy))
def test_threads_never_share_contexts(strategy: ContextStrategy) -> None:
    engine.set_context_strategy(strategy)
    threads = 16
    barrier = threading.Barrier(threads)
    seen: dict[int, tuple[int, ...]] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            key = KEYS[i]
            barrier.wait()
            for j in range(300):
                nonce = j.to_bytes(12, "big")
                msg = os.urandom(j)
                a = AEAD("chacha20-poly1305", key if j % 3 else KEYS[-1 - i])
                assert a.open(nonce, b"", a.seal(nonce, b"", msg)) == msg
            seen[i] = _binding.thread_context_ids()
            barrier.wait()  # keep every thread (and its contexts) alive until all recorded
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == []
    holders = [ids[2] for ids in seen.values()]  # the ChaCha20-Poly1305 holder of each thread
    assert len(seen) == threads
    assert all(holders)
    assert len(set(holders)) == threads  # sixteen live threads, sixteen distinct contexts


@pytest.mark.usefixtures("use_native")
@pytest.mark.parametrize("strategy", [ContextStrategy.EAGER, ContextStrategy.LAZY])
def test_no_context_leak_after_a_million_operations(strategy: ContextStrategy) -> None:
    engine.set_context_strategy(strategy)
    name = strategy.name.lower()

    def million() -> None:
        a = AEAD("aes-128-gcm", bytes(16))
        b = AEAD("aes-128-gcm", bytes(range(16)))
        nonce = bytes(12)
        for i in range(500_000):
            a.seal(nonce, b"", b"")
            b.open(nonce, b"", b.seal(nonce, b"", b"")) if i % 1000 == 0 else b.seal(
                nonce, b"", b""
            )

    d = delta(name, lambda: in_thread(million))
    assert (
        d["created"] == d["freed"]
    )  # every context created was freed by the time the thread ended
    assert d["created"] + d["rekeyed"] + d["reused"] >= 1_000_000
    if strategy is ContextStrategy.LAZY:
        assert d["created"] == 1
