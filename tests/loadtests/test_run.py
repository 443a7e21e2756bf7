"""loadtests/run.sh: a short headless run passes, and any failed request fails the run; it runs
the active Python, says how to install Locust when it is missing, and writes each run into a
folder of its own."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.conftest import free_port, start_server

ROOT = Path(__file__).resolve().parents[2]
INSTALL_HINT = "pip install 'sealflow[load]'"


def run_script(
    script: Path, *args: str, env: dict[str, str], cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603
        [str(script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def run(out: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, **env}
    return run_script(ROOT / "loadtests" / "run.sh", "--out", str(out), *args, env=env)


def reports(done: subprocess.CompletedProcess[str]) -> Path:
    """The folder named by the last line on stdout."""
    last = (done.stdout.splitlines() or [""])[-1]
    assert last.startswith("reports: "), done.stdout[-2000:]
    return Path(last.removeprefix("reports: "))


def stats(out: Path) -> dict[str, dict[str, str]]:
    with (out / "locust_stats.csv").open() as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


def test_a_short_run_against_its_own_server_has_no_failures(tmp_path: Path) -> None:
    done = run(tmp_path, "--users", "8", "--spawn-rate", "8", "--duration", "8s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert reports(done) == tmp_path
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


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with nothing installed: no Locust, no sealflow."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # noqa: S603
    return venv


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """run.sh in a copy of loadtests/: its default folder (loadtests/out/) is then in tmp_path."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "loadtests", tree / "loadtests", ignore=shutil.ignore_patterns("out"))
    return tree / "loadtests" / "run.sh"


def dead_end() -> tuple[str, ...]:
    """A port nothing listens on: every request fails at once, and the run still writes its
    reports. No server is started, so a run takes about a second."""
    return ("--url", f"http://127.0.0.1:{free_port()}", "--users", "1", "--duration", "1s")


@pytest.mark.parametrize("how", ["PYTHON", "PATH"])
def test_without_locust_it_says_how_to_install_it(
    tmp_path: Path, bare_venv: Path, how: str
) -> None:
    env = {**os.environ, "SEALFLOW_TOKEN": "unused"}
    if how == "PYTHON":
        env["PYTHON"] = str(bare_venv / "bin" / "python")
    else:
        # No PYTHON: the python3 first on PATH (an activated venv) is the one used.
        env.pop("PYTHON", None)
        env["PATH"] = f"{bare_venv / 'bin'}{os.pathsep}{env['PATH']}"
    out = tmp_path / "out"
    done = run_script(ROOT / "loadtests" / "run.sh", "--out", str(out), *dead_end(), env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    python = bare_venv / "bin" / ("python" if how == "PYTHON" else "python3")
    assert done.stderr == f"locust is not installed for {python}: {INSTALL_HINT}\n"
    assert not out.exists()


def test_without_sealflow_it_says_how_to_install_it(tmp_path: Path, bare_venv: Path) -> None:
    # Only a server started here needs sealflow: from a checkout, install it with Locust.
    python = bare_venv / "bin" / "python"
    env = {**os.environ, "PYTHON": str(python)}
    out = tmp_path / "out"
    done = run_script(ROOT / "loadtests" / "run.sh", "--out", str(out), "--duration", "1s", env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == f"sealflow is not installed for {python}: pip install -e '{ROOT}[load]'\n"
    assert not out.exists()


def test_each_run_gets_a_fresh_folder(copy: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "SEALFLOW_TOKEN": "unused"}
    first = run_script(copy, *dead_end(), env=env)
    assert first.returncode == 1, first.stderr[-2000:]
    folder = reports(first)
    stats_before = (folder / "locust_stats.csv").read_bytes()
    second = run_script(copy, *dead_end(), env=env)
    assert second.returncode == 1, second.stderr[-2000:]
    assert reports(second) != folder
    for done in (first, second):
        assert reports(done).parent == copy.parent / "out"
        assert re.fullmatch(r"\d{8}T\d{6}Z-\d+", reports(done).name)
        assert (reports(done) / "locust_stats.csv").is_file()
    assert (folder / "locust_stats.csv").read_bytes() == stats_before


def test_a_folder_that_is_not_empty_is_refused(tmp_path: Path, copy: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "old.csv").write_text("from an earlier run\n")
    # A relative --out is taken from the caller's directory.
    env = {**os.environ, "PYTHON": sys.executable, "SEALFLOW_TOKEN": "unused"}
    done = run_script(copy, "--out", "reports", *dead_end(), env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith(f"--out {tmp_path / 'reports'} is not empty")
    assert done.stderr.count("\n") == 1
    assert [p.name for p in (tmp_path / "reports").iterdir()] == ["old.csv"]
