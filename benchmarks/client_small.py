"""The client's small calls: 1 KiB encrypts against ``httpx`` on a kept-alive connection.

    python -m benchmarks.client_small            (about 40 s)

``sealflow serve`` (its defaults: access log, metrics, auth) runs pinned to core 0, this
process (and any thread it starts) to core 1. Rows, alternating in each round:

- ``httpx.Client`` posting 1 KiB to ``?mode=single`` on one kept-alive connection: the plainest
  Python HTTP client doing the same job (its answer is the same single-shot envelope);
- ``Client.encrypt("default", 1 KiB)`` and ``Client.decrypt`` of its envelope, one after another;
- ``AsyncClient.encrypt`` one after another, and from TASKS tasks at once, on one event loop.

Calls per second over a window of WINDOW seconds; best and median of ROUNDS rounds (the
machine is shared: the load average before and after is printed with the figures).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from sealflow import AsyncClient, Client

from ._harness import Report, machine
from .http import SERVER_CORE, sealflow_server

CLIENT_CORE = 1
ROUNDS = int(os.environ.get("SEALFLOW_BENCH_ROUNDS", "7"))
WINDOW = float(os.environ.get("SEALFLOW_BENCH_SECONDS", "1.0"))
SIZE = 1024
TASKS = 16
HTTPX = "httpx.Client, mode=single, keep-alive"
SYNC = "Client.encrypt, sequential"
SYNC_DECRYPT = "Client.decrypt, sequential"
ASYNC = "AsyncClient.encrypt, sequential"
CONCURRENT = f"AsyncClient.encrypt, {TASKS} tasks"


def per_second(call: Callable[[], object]) -> float:
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < WINDOW:
        for _ in range(20):
            call()
        calls += 20
    return calls / elapsed


async def async_rates(url: str, token: str, data: bytes) -> tuple[float, float]:
    """(sequential, TASKS at once) calls per second of one AsyncClient."""
    async with AsyncClient(url, token) as api:
        await asyncio.gather(*(api.encrypt("default", data) for _ in range(TASKS)))  # warm
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < WINDOW:
            for _ in range(20):
                await api.encrypt("default", data)
            calls += 20
        sequential = calls / elapsed
        done = [0]
        deadline = time.perf_counter() + WINDOW

        async def worker() -> None:
            while time.perf_counter() < deadline:
                await api.encrypt("default", data)
                done[0] += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(TASKS)))
        return sequential, done[0] / (time.perf_counter() - start)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def main() -> int:
    os.sched_setaffinity(0, {CLIENT_CORE})  # threads started from here on inherit it
    print(
        f"# sealflow client, small calls\n\n{machine()}; server on core {SERVER_CORE}, client "
        f"on core {CLIENT_CORE}; {SIZE} bytes, {ROUNDS} rounds of {WINDOW:g} s per row\n\n"
        f"before: {load()}"
    )
    data = os.urandom(SIZE)
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, sealflow_server(Path(tmp)) as ours:
        auth = {"Authorization": f"Bearer {ours.token}"}
        single = f"{ours.url}/v1/keys/default/encrypt?mode=single"
        with httpx.Client(headers=auth) as plain, Client(ours.url, ours.token) as api:
            envelope = api.encrypt("default", data)

            def with_httpx() -> None:
                plain.post(single, content=data).raise_for_status()

            rows: dict[str, Callable[[], object]] = {
                HTTPX: with_httpx,
                SYNC: lambda: api.encrypt("default", data),
                SYNC_DECRYPT: lambda: api.decrypt(envelope),
            }
            for call in rows.values():
                call()
            for _ in range(ROUNDS):
                for name, call in rows.items():
                    rates.setdefault(name, []).append(per_second(call))
                sequential, concurrent = asyncio.run(async_rates(ours.url, ours.token, data))
                rates.setdefault(ASYNC, []).append(sequential)
                rates.setdefault(CONCURRENT, []).append(concurrent)
    print(f"after: {load()}")
    print("\n| client | best calls/s | median calls/s | us/call (best) | every round |")
    print("|---|---:|---:|---:|---|")
    for name, runs in rates.items():
        every = " ".join(f"{r:,.0f}" for r in runs)
        best, median = max(runs), statistics.median(runs)
        print(f"| {name} | {best:,.0f} | {median:,.0f} | {1e6 / best:,.0f} | {every} |")
    report = Report()
    for label, over, under, target in (
        ("Client.encrypt / httpx", SYNC, HTTPX, 2.5),
        (f"AsyncClient {TASKS} tasks / sequential", CONCURRENT, ASYNC, 3.0),
    ):
        report.check(f"{label}, best", max(rates[over]) / max(rates[under]), target)
        median = statistics.median(rates[over]) / statistics.median(rates[under])
        report.check(f"{label}, medians", median, target)
    return 0 if report.print_checks() else 1


if __name__ == "__main__":
    sys.exit(main())
