"""loadtests/run.sh: a short headless run passes, and any failed request fails the run."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from tests.service.conftest import start_server

ROOT = Path(__file__).resolve().parents[2]


def run(out: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603
        [str(ROOT / "loadtests" / "run.sh"), "--out", str(out), *args],
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def stats(out: Path) -> dict[str, dict[str, str]]:
    with (out / "locust_stats.csv").open() as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


def test_a_short_run_against_its_own_server_has_no_failures(tmp_path: Path) -> None:
    done = run(tmp_path, "--users", "8", "--spawn-rate", "8", "--duration", "8s")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = stats(tmp_path)
    total = rows["Aggregated"]
    assert int(total["Request Count"]) > 100
    assert int(total["Failure Count"]) == 0
    assert any(name.startswith("decrypt stream 64 KiB") for name in rows)
    assert (tmp_path / "report.html").stat().st_size > 0
    assert len((tmp_path / "rss.csv").read_text().splitlines()) > 2


def test_any_failed_request_fails_the_run(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data")
    try:
        # Encrypt only: every decrypt gets 403, which the locustfile reports as a failure.
        token = srv.cli("tokens", "create", "--scope", "encrypt:default").stdout.decode().strip()
        done = run(
            tmp_path / "out", "--users", "2", "--duration", "3s", "--url", srv.url,
            SEALFLOW_TOKEN=token,
        )  # fmt: skip
    finally:
        srv.stop()
    assert done.returncode != 0
    rows = stats(tmp_path / "out")
    assert int(rows["Aggregated"]["Failure Count"]) > 0
    with (tmp_path / "out" / "locust_failures.csv").open() as f:
        assert any("HTTP 403" in row["Error"] for row in csv.DictReader(f))
