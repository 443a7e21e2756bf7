"""The client's batch calls: ``Client.encrypt_many`` of 1,000,000 values of 100 B against a
loop of ``Client.encrypt``, and the client's memory for 10,000,000 values from a generator.

    python -m benchmarks.client_many            (about 90 s)

``sealflow serve`` (its defaults) runs pinned to core 0, this process to core 1. Rows, each
best and median of ROUNDS rounds (the machine is shared: the load average before and after is
printed with the figures):

- ``Client.encrypt_many`` and ``decrypt_many`` of COUNT values of SIZE bytes from a list,
  consumed one by one: values per second end to end (framing, the requests, the answers cut
  into one ``bytes`` per value);
- ``AsyncClient.encrypt_many`` of the same;
- a loop of ``Client.encrypt`` of SIZE bytes for WINDOW seconds (its rate scaled, not 1M calls);
- the CPU time per value of the client (this process) and of the server (its process, all
  its threads) during the ``encrypt_many`` and ``decrypt_many`` rounds: where the time goes;
- in a process of its own, ``encrypt_many`` of STREAMED values from a generator, envelopes
  dropped as they come: the growth of its peak RSS (VmHWM) over its RSS before the call.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sealflow import AsyncClient, Client

from ._harness import Report, machine
from .http import SERVER_CORE, sealflow_server

CLIENT_CORE = 1
ROUNDS = int(os.environ.get("SEALFLOW_BENCH_ROUNDS", "5"))
WINDOW = float(os.environ.get("SEALFLOW_BENCH_SECONDS", "2.0"))
COUNT = 1_000_000
SIZE = 100
STREAMED = int(os.environ.get("SEALFLOW_BENCH_STREAMED", "10000000"))
MANY = "Client.encrypt_many"
DECRYPT_MANY = "Client.decrypt_many"
ASYNC_MANY = "AsyncClient.encrypt_many"
LOOP = "Client.encrypt, a loop"

RSS_PROBE = """
import os, sys
from sealflow import Client

def kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

value = os.urandom(int(sys.argv[4]))
with Client(sys.argv[1], sys.argv[2]) as client:
    for _ in client.encrypt_many("default", [value] * 100_000):  # warm
        pass
    before = kib("VmRSS:")
    count = 0
    for envelope in client.encrypt_many("default", (value for _ in range(int(sys.argv[3])))):
        count += 1
    print(count, kib("VmHWM:") - before, kib("VmRSS:") - before)
"""


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far, user and system, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(run: Callable[[], int], server: int, cpu: dict[str, list[float]], name: str) -> float:
    """Values per second of ``run``; the client's and the server's CPU microseconds per
    value go to ``cpu``."""
    start, own, theirs = time.perf_counter(), time.process_time(), cpu_seconds(server)
    count = run()
    elapsed = time.perf_counter() - start
    cpu.setdefault(f"{name}: client", []).append((time.process_time() - own) / count * 1e6)
    cpu.setdefault(f"{name}: server", []).append((cpu_seconds(server) - theirs) / count * 1e6)
    return count / elapsed


def loop_rate(client: Client, value: bytes) -> float:
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < WINDOW:
        for _ in range(50):
            client.encrypt("default", value)
        calls += 50
    return calls / elapsed


async def async_rate(url: str, token: str, values: list[bytes]) -> float:
    async with AsyncClient(url, token) as client:
        start = time.perf_counter()
        count = 0
        async for _ in client.encrypt_many("default", values):
            count += 1
        return count / (time.perf_counter() - start)


def main() -> int:
    os.sched_setaffinity(0, {CLIENT_CORE})
    print(
        f"# sealflow client: batches of records\n\n{machine()}; server on core {SERVER_CORE}, "
        f"client on core {CLIENT_CORE}; {COUNT:,} values of {SIZE} B; {ROUNDS} rounds; "
        f"load average before: {os.getloadavg()[0]:.2f}"
    )
    values = [os.urandom(SIZE) for _ in range(COUNT)]
    rates: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, sealflow_server(Path(tmp)) as ours:
        with Client(ours.url, ours.token) as client:
            sealed = list(client.encrypt_many("default", values))  # warm; and to decrypt
            assert client.decrypt(sealed[-1]) == values[-1]

            def many() -> int:
                count = 0
                for _ in client.encrypt_many("default", values):
                    count += 1
                return count

            def decrypt_many() -> int:
                count = 0
                for _ in client.decrypt_many(sealed):
                    count += 1
                return count

            for _ in range(ROUNDS):
                pid = ours.proc.pid
                rates.setdefault(MANY, []).append(timed(many, pid, cpu, MANY))
                rates.setdefault(DECRYPT_MANY, []).append(
                    timed(decrypt_many, pid, cpu, DECRYPT_MANY)
                )
                rates.setdefault(ASYNC_MANY, []).append(
                    asyncio.run(async_rate(ours.url, ours.token, values))
                )
                rates.setdefault(LOOP, []).append(loop_rate(client, values[0]))
        probe = subprocess.run(
            [sys.executable, "-c", RSS_PROBE, ours.url, ours.token, str(STREAMED), str(SIZE)],
            capture_output=True,
            text=True,
            check=True,
        )
    count, peak_kib, after_kib = map(int, probe.stdout.split())
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("\n| call | best values/s | median values/s | every round |\n|---|---:|---:|---|")
    for name, runs in rates.items():
        every = " ".join(f"{r:,.0f}" for r in runs)
        print(f"| {name} | {max(runs):,.0f} | {statistics.median(runs):,.0f} | {every} |")
    print("\n| CPU per value | median us | every round |\n|---|---:|---|")
    for name, runs in cpu.items():
        every = " ".join(f"{r:.2f}" for r in runs)
        print(f"| {name} | {statistics.median(runs):.2f} | {every} |")
    ratios = [m / loop for m, loop in zip(rates[MANY], rates[LOOP], strict=True)]
    print(f"\nencrypt_many / a loop of encrypt, same rounds: best {max(ratios):,.0f}x, "
          f"median {statistics.median(ratios):,.0f}x")  # fmt: skip
    print(f"\n{count:,} values from a generator: client peak RSS growth {peak_kib / 1024:.1f} MiB "
          f"(RSS after, over before: {after_kib / 1024:.1f} MiB)")  # fmt: skip
    report = Report()
    report.check(f"{MANY}, best values/s / 1,000,000", max(rates[MANY]) / 1e6, 1.0)
    report.check(f"{MANY} / {LOOP} / 300, best round", max(ratios) / 300, 1.0)
    report.check("128 MiB / RSS growth for a generator", 128 * 1024 / max(peak_kib, 1), 1.0)
    return 0 if report.print_checks() else 1


if __name__ == "__main__":
    sys.exit(main())
