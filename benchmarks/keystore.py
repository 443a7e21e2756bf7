"""Keystore benchmark: 1 KiB single-shot encrypt req/s with the PostgreSQL keystore against the
SQLite keystore, same run.

    python -m benchmarks.keystore     (needs wrk and postgresql: apt-get install -y wrk postgresql)

Two ``sealflow serve`` processes with their defaults, one on an SQLite keystore in its data
dir, one on a throwaway PostgreSQL cluster (tests/postgres.py: initdb in a temporary folder, as
nobody under root), both pinned to core 0 (each idle while the other is measured); wrk and
PostgreSQL on core 1 (in a deployment the database runs on another host). They
alternate ``ROUNDS`` times and the best round of each counts. The PostgreSQL one must not wait
on the database per request: keys, tokens and usage are in memory (docs/SERVICE.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    KeyStore,
    PostgresKeyStore,
    SQLiteKeyStore,
    UsageMeter,
)
from sealflow.service.server._startup import SERVICE_STALENESS
from tests.postgres import Cluster, start_cluster

from ._harness import Report, machine, rate
from .http import (
    LOAD_CORE,
    LUA,
    SECONDS,
    SERVER_CORE,
    Load,
    Server,
    best,
    free_port,
    wait_ready,
    wrk,
)

ROUNDS = 5


def pin_cluster(cluster: Cluster, core: int) -> None:
    """PostgreSQL on the load core: in a deployment it runs on another host, never on the
    replica's CPU. Backends forked later inherit the postmaster's affinity."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, ppid = int(stat.parent.name), int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if postmaster in (pid, ppid):
            os.sched_setaffinity(pid, {core})


@contextmanager
def sealflow(workdir: Path, name: str, env: dict[str, str]) -> Iterator[Server]:
    port = free_port()
    out = workdir / f"{name}.out"
    with out.open("wb") as stdout:
        cmd = [
            "taskset", "-c", SERVER_CORE, str(Path(sys.executable).with_name("sealflow")),
            "serve", "--port", str(port), "--data-dir", str(workdir / name),
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdout=stdout, stderr=subprocess.DEVNULL, env={**os.environ, **env}
        )
    srv = Server(name, f"http://127.0.0.1:{port}", proc)
    try:
        wait_ready(srv.url + "/readyz", srv.proc)
        srv.token = out.read_text().split("Root token: ", 1)[1].split()[0]
        yield srv
    finally:
        srv.proc.terminate()
        srv.proc.wait(30)


def in_process(report: Report, url: str, workdir: Path) -> None:
    """The keystore calls one encrypt request makes (token lookup, then the sealing version
    counted and its material), in this process on core 1, alternating the two stores: what the
    request path pays for each keystore, without HTTP's noise."""
    master = os.urandom(32)
    stores: dict[str, KeyStore] = {
        "sqlite": SQLiteKeyStore(workdir / "inproc.db", master, max_staleness=SERVICE_STALENESS),
        "postgres": PostgresKeyStore(url, master),
    }
    meters = {name: UsageMeter(store) for name, store in stores.items()}
    try:
        calls = {}
        for name, store in stores.items():
            store.create_key("bench", Algorithm.AES_256_GCM)
            calls[name] = _request_calls(store, meters[name], store.create_token(["admin"])[1])
        rates: dict[str, list[float]] = {name: [] for name in stores}
        for _ in range(ROUNDS):
            for name, call in calls.items():
                rates[name].append(rate(call))
        lite, pg = max(rates["sqlite"]), max(rates["postgres"])
        print("\n| keystore calls of one encrypt request, in process | calls/s | us each |")
        print("|---|---:|---:|")
        for label, value in (("SQLite", lite), ("PostgreSQL", pg)):
            print(f"| {label} | {value:,.0f} | {1e6 / value:.2f} |")
        report.check("PostgreSQL keystore request-path calls/s vs SQLite", pg / lite, 0.95)
    finally:
        for name, store in stores.items():
            meters[name].close()
            store.close()


def _request_calls(store: KeyStore, meter: UsageMeter, secret: str) -> Callable[[], object]:
    def call() -> None:
        store.find_token(secret)
        meter.lease("bench")

    return call


def main() -> int:
    for tool in ("wrk", "taskset"):
        if shutil.which(tool) is None:
            print(f"{tool} is missing: apt-get install -y wrk util-linux", file=sys.stderr)
            return 2
    os.sched_setaffinity(0, {int(LOAD_CORE)})
    report = Report()
    print(
        f"# sealflow keystore benchmark\n\n{machine()}; server on core {SERVER_CORE}, load on"
        f" core {LOAD_CORE}, {SECONDS} s per wrk run, best of {ROUNDS} alternating rounds"
    )
    runs: dict[str, list[Load]] = {"sqlite": [], "postgres": []}
    cluster = start_cluster()
    pin_cluster(cluster, int(LOAD_CORE))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            script = work / "post.lua"
            script.write_text(LUA)
            body = work / "1k"
            body.write_bytes(os.urandom(1024))
            master = {"SEALFLOW_MASTER_KEY": "A" * 43 + "="}
            pg = {**master, "SEALFLOW_KEYSTORE_URL": cluster.new_database()}
            in_process(report, cluster.new_database(), work)
            with sealflow(work, "sqlite", master) as lite, sealflow(work, "postgres", pg) as pgs:
                for _ in range(ROUNDS):
                    for srv in (lite, pgs):
                        url = srv.url + "/v1/keys/default/encrypt?mode=single"
                        runs[srv.name].append(wrk(url, body, srv.token, 16, script))
    finally:
        cluster.remove()
    lite_best, pg_best = best(runs["sqlite"]), best(runs["postgres"])
    print("\n| 1 KiB single-shot encrypt, 16 connections | req/s | p99 ms |\n|---|---:|---:|")
    for name, load in (("SQLite keystore", lite_best), ("PostgreSQL keystore", pg_best)):
        print(f"| {name} | {load.rps:,.0f} | {load.p99_ms:.2f} |")
    rounds = ", ".join(
        f"{a.rps:,.0f}/{b.rps:,.0f}" for a, b in zip(runs["sqlite"], runs["postgres"], strict=True)
    )
    print(f"\nevery round, SQLite/PostgreSQL req/s: {rounds}")
    ratios = sorted(b.rps / a.rps for a, b in zip(runs["sqlite"], runs["postgres"], strict=True))
    print(f"median of the per-round ratios: {ratios[len(ratios) // 2]:.2f}x")
    ratio = pg_best.rps / lite_best.rps
    report.check("PostgreSQL keystore 1 KiB encrypt req/s vs SQLite", ratio, 0.95)
    return 0 if report.print_checks() else 1


if __name__ == "__main__":
    sys.exit(main())
