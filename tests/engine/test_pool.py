"""CryptoPool: awaitable, inline for small jobs, threads for large ones, bounded."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from sealflow import engine
from sealflow.engine import CryptoPool


def test_small_jobs_run_inline_and_large_ones_on_workers() -> None:
    pool = CryptoPool(threads=2, inline_below=1000)

    async def main() -> tuple[str, str]:
        small = await pool.run(10, lambda: threading.current_thread().name)
        large = await pool.run(5000, lambda: threading.current_thread().name)
        return small, large

    try:
        small, large = asyncio.run(main())
    finally:
        pool.close()
    assert small == threading.current_thread().name
    assert large.startswith("sealflow-crypto-")
    assert pool.inlined == 1
    assert pool.offloaded == 1
    assert pool.queued == 0


def test_many_concurrent_seals_are_correct_and_bounded() -> None:
    pool = CryptoPool(threads=2, max_queue=4, inline_below=0)
    key = os.urandom(32)
    peak = 0

    async def one(i: int) -> None:
        nonlocal peak
        data = os.urandom(1000 + i)
        nonce = i.to_bytes(12, "big")
        sealed = await pool.run(len(data), engine.seal, "aes-256-gcm", key, nonce, b"", data)
        peak = max(peak, pool.queued)
        assert engine.open("aes-256-gcm", key, nonce, b"", sealed) == data

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(200)))

    try:
        asyncio.run(main())
    finally:
        pool.close()
    assert 1 <= peak <= 4


def test_errors_reach_the_awaiting_coroutine() -> None:
    pool = CryptoPool(threads=1, inline_below=0)

    async def main() -> None:
        await pool.run(1, engine.open, "aes-256-gcm", bytes(32), bytes(12), b"", bytes(40))

    try:
        with pytest.raises(engine.DecryptionError):
            asyncio.run(main())
    finally:
        pool.close()


def test_cancelled_caller_waits_until_the_worker_is_done_with_its_buffers() -> None:
    pool = CryptoPool(threads=1, inline_below=0)
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    def job() -> None:
        started.set()
        release.wait(5)
        finished.append(True)

    async def main() -> None:
        task = asyncio.ensure_future(pool.run(1, job))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        task.cancel()
        await asyncio.sleep(0.01)
        assert not task.done()  # still waiting for the worker
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == [True]

    try:
        asyncio.run(main())
    finally:
        pool.close()


def test_self_test_passes() -> None:
    engine.self_test()


def test_provider_choice_is_reported_for_every_algorithm_and_class() -> None:
    choice = engine.provider_choice()
    assert set(choice) == set(engine.Algorithm)
    for classes in choice.values():
        assert set(classes) == {"small", "large", "chunks", "records_small", "records_large"}
        assert set(classes.values()) <= set(engine.PROVIDERS)


def test_self_test_catches_a_provider_that_computes_wrong_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider = engine.PROVIDERS["native"]
    real = provider.seal_into

    def off_by_one_bit(*args: object) -> None:
        real(*args)  # type: ignore[arg-type]
        out = args[-1]
        assert isinstance(out, bytearray | memoryview)
        out[0] ^= 1

    monkeypatch.setattr(provider, "seal_into", off_by_one_bit)
    with pytest.raises(engine.SelfTestError, match="native aes-128-gcm seal known answer"):
        engine.self_test()
