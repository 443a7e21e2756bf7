"""What an expiring token costs: a 1 KiB encrypt with a token that has a TTL against one that
never expires, on the same server, in the same run (issue 26).

    python -m benchmarks.http ttl        (needs wrk)

Both tokens are made with ``sealflow tokens create`` on the benchmark server's keystore, with
the same scope (``encrypt:default``): one ``--ttl 1h``, one without (no default TTL is set, so
it never expires). Rounds alternate between them; the best of each counts. The expiring token
is checked against the clock on every request, from the cached row (no keystore round trip).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ._harness import Report
from .http import ROUNDS, Load, Server, best, table, wrk


def _token(work: Path, *flags: str) -> str:
    cmd = [
        str(Path(sys.executable).with_name("sealflow")), "tokens", "create",
        "--data-dir", str(work / "data"), "--scope", "encrypt:default", *flags,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def ttl_part(report: Report, ours: Server, work: Path, script: Path) -> None:
    body = work / "ttl-1k"
    body.write_bytes(os.urandom(1024))
    url = ours.url + "/v1/keys/default/encrypt?mode=single"
    expiring, lasting = _token(work, "--ttl", "1h"), _token(work)
    runs: dict[str, list[Load]] = {"lasting": [], "expiring": []}
    for _ in range(ROUNDS):
        runs["lasting"].append(wrk(url, body, lasting, 16, script))
        runs["expiring"].append(wrk(url, body, expiring, 16, script))
    never, ttl = best(runs["lasting"]), best(runs["expiring"])
    rows = [
        f"| never expires | {never.rps:,.0f} | {never.p99_ms:.2f} |",
        f"| --ttl 1h | {ttl.rps:,.0f} | {ttl.p99_ms:.2f} |",
    ]
    table("1 KiB single-shot encrypt, 16 connections, by token", "req/s | p99 ms", rows)
    report.check(
        "26. 1 KiB encrypt, expiring token / non-expiring (issue 26: 0.97x)",
        ttl.rps / never.rps,
        0.97,
    )
