"""Keystore benchmark: 1 KiB single-shot encrypt req/s with the PostgreSQL keystore against the
SQLite keystore, same run.

    python -m benchmarks.keystore     (needs wrk and postgresql: apt-get install -y wrk postgresql)

Two ``sealflow serve`` processes with their defaults, one on an SQLite keystore in its data
dir, one on a throwaway PostgreSQL cluster (tests/postgres.py: initdb in a temporary folder, as
nobody under root), each pinned to core 0 in turn; wrk on core 1, PostgreSQL unpinned. They
alternate ``ROUNDS`` times and the best round of each counts. The PostgreSQL one must not wait
on the database per request: keys, tokens and usage are in memory (docs/SERVICE.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.postgres import start_cluster

from ._harness import Report, machine
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

ROUNDS = 3


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
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            script = work / "post.lua"
            script.write_text(LUA)
            body = work / "1k"
            body.write_bytes(os.urandom(1024))
            master = {"SEALFLOW_MASTER_KEY": "A" * 43 + "="}
            pg = {**master, "SEALFLOW_KEYSTORE_URL": cluster.new_database()}
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
    ratio = pg_best.rps / lite_best.rps
    report.check("PostgreSQL keystore 1 KiB encrypt req/s vs SQLite", ratio, 0.95)
    return 0 if report.print_checks() else 1


if __name__ == "__main__":
    sys.exit(main())
