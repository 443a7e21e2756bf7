"""HMAC of 100-byte values on the native API, the blind-index workload (issue 28, item 5).

    python -m benchmarks.http hmac       (needs wrk)

``POST /v1/keys/default/hmac?mode=records`` with 8,192 and with 65,536 framed values per
request (4 connections), and ``/hmac`` of one value per request (16 connections) for scale;
sealflow on the server core alone, wrk on the load core. The token is made with ``sealflow
tokens create --scope hmac:default`` on the benchmark server's keystore (the root token has no
``hmac`` scope). One answer per batch size is checked against Python's ``hmac`` first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ._harness import Report
from .http import ROUNDS, Server, best, fetch, table, wrk

RECORD = 100


def _token(work: Path) -> str:
    cmd = [
        str(Path(sys.executable).with_name("sealflow")), "tokens", "create",
        "--data-dir", str(work / "data"), "--scope", "hmac:default",
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def hmac_part(report: Report, ours: Server, work: Path, script: Path) -> None:
    token = _token(work)
    url = ours.url + "/v1/keys/default/hmac"
    value = os.urandom(RECORD)
    one = work / "hmac-100b"
    one.write_bytes(value)
    tag = fetch(url, value, token)
    rows = []
    single = best([wrk(url, one, token, 16, script) for _ in range(ROUNDS)])
    rows.append(f"| one value per request (16 connections) | {single.rps:,.0f} |")
    rates = {}
    for count in (8192, 65536):
        batch = work / f"hmac-records-{count}"
        batch.write_bytes((RECORD.to_bytes(4, "big") + value) * count)
        answer = fetch(url + "?mode=records", batch.read_bytes(), token)
        if answer != (len(tag).to_bytes(4, "big") + tag) * count:
            raise RuntimeError("the records route answered other tags than the body route")
        runs = [wrk(url + "?mode=records", batch, token, 4, script) for _ in range(ROUNDS)]
        rates[count] = best(runs).rps * count
        rows.append(
            f"| mode=records, {count:,} per request (4 connections) | {rates[count]:,.0f} |"
        )
    table("HMAC-SHA-256 of 100-byte values, one server core", "values/s", rows)
    report.check(
        "28.5 records HMAC values/s on one core / 1,000,000", max(rates.values()) / 1e6, 1.0
    )
