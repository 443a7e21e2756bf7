"""What one audit batch costs the caller of ``Sink.write``: the audit table on a local
PostgreSQL against the audit file (issue 25, item 4; docs/AUDIT.md, "PostgreSQL sink").

    python -m benchmarks.audit_sink      (needs postgresql: apt-get install -y postgresql)

The sink alone, no server: batches of 1, 2, 10 and 100 request records (the size of a real
one, chained as the ``Auditor`` chains them) written by ``PostgresSink`` to a throwaway cluster
(tests/postgres.py: loopback TCP, fsync off, so the round trip and the server's work, not the
disk) and by ``FileSink`` to a file in a temporary folder; and PostgreSQL's floor, a
``SELECT 1`` on a connection already open. In the server the table's batch is the writer
thread's (an answer in mode required waits for it, the event loop does not); a file's alone
is written on the loop (``benchmarks.audit_hop`` has why).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import psycopg

from sealflow.service.audit import Chain, FileSink, Sink, audit_key
from sealflow.service.keystore import PostgresKeyStore, PostgresSink
from tests.postgres import start_cluster

from ._harness import machine

BATCHES = (1, 2, 10, 100)
ROUNDS = 400  # batches timed per size and sink (fewer for 100: ROUNDS // 4)
RECORD: dict[str, object] = {
    "time": "2026-12-02T13:26:00.123456Z",
    "type": "request",
    "request_id": "2d2b16d32dac8397-1234",
    "replica": "host-a.example.internal:23764",
    "accessor": "tok_4f1c2a9b7e3d5c60",
    "label": "batch jobs",
    "remote_addr": "10.20.30.40",
    "method": "POST",
    "route": "/v1/keys/{name}/encrypt",
    "operation": "encrypt",
    "key": "default",
    "version": 3,
    "mode": "single",
    "status": 200,
    "bytes_in": 1024,
    "bytes_out": 1052,
    "origin": "http",
}


def timings(write: Callable[[list[bytes]], None], chain: Chain, n: int) -> list[float]:
    """Seconds per ``write`` of n new chained lines, sorted (a few untimed first)."""
    rounds = ROUNDS if n < 100 else ROUNDS // 4
    taken = []
    for i in range(rounds + 10):
        lines = [chain.line(RECORD) for _ in range(n)]
        start = time.perf_counter()
        write(lines)
        if i >= 10:
            taken.append(time.perf_counter() - start)
    return sorted(taken)


def row(what: str, n: int, taken: list[float]) -> str:
    p90 = taken[int(len(taken) * 0.9)]
    median = statistics.median(taken)
    return f"| {what} | {n} | {median * 1e6:,.0f} | {p90 * 1e6:,.0f} | {median / n * 1e6:,.1f} |"


def main() -> None:
    master = os.urandom(32)
    chain = Chain(audit_key(master), "host-a.example.internal:23764:1a2b3c4d")
    print(f"{machine()}; load average {os.getloadavg()[0]:.2f}")
    print(f"one record: {len(chain.line(RECORD))} bytes")
    cluster = start_cluster()
    try:
        url = cluster.new_database()
        with closing(PostgresKeyStore(url, master, watch=False)):
            pass  # the schema, the audit table with it
        with psycopg.connect(url, autocommit=True) as db:
            floor = sorted(_select_one(db) for _ in range(ROUNDS))
        print(f"SELECT 1 round trip: median {statistics.median(floor) * 1e6:,.0f} us")
        print("\n| sink | lines per batch | median us | p90 us | median us per line |")
        print("|---|---:|---:|---:|---:|")
        with tempfile.TemporaryDirectory() as folder:
            sinks: list[tuple[str, Sink]] = [
                ("PostgresSink (local PostgreSQL)", PostgresSink(url)),
                ("FileSink", FileSink(Path(folder) / "audit.log", 0)),
            ]
            for n in BATCHES:
                for what, sink in sinks:
                    print(row(what, n, timings(sink.write, chain, n)))
            for _, sink in sinks:
                sink.close()
    finally:
        cluster.remove()


def _select_one(db: psycopg.Connection[tuple[object, ...]]) -> float:
    start = time.perf_counter()
    db.execute("SELECT 1").fetchone()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
