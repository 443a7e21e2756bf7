"""loadtests/run.sh: a short headless run passes, and any failed request fails the run; it runs
the active Python, says how to install Locust when it is missing, and writes each run into a
folder of its own."""

from __future__ import annotations

import csv
import os
import re
import shutil
import socketserver
import subprocess
import sys
import threading
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


class CuttingServer(socketserver.ThreadingTCPServer):
    """A server that fails the way a proxy cutting a stream does: every encrypt gets a 200
    whose body stops short of its Content-Length (it starts like an envelope), then the
    connection closes. It counts the decrypts it is sent. (A stand-in for a fault no real
    sealflow makes on purpose; the balancer of issue 15 made it.)"""

    daemon_threads = True
    allow_reuse_address = True
    decrypts = 0

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), CutReply)


class CutReply(socketserver.StreamRequestHandler):
    server: CuttingServer

    def handle(self) -> None:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = self.rfile.readline()
            if not line:
                return
            head += line
        request, *fields = head.decode("latin-1").split("\r\n")
        length = next(
            (int(f.split(":", 1)[1]) for f in fields if f.lower().startswith("content-length:")), 0
        )
        self.rfile.read(length)
        if request.startswith("POST /v1/decrypt"):
            self.server.decrypts += 1
            self.wfile.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\nSFL1" + bytes(996))
        # ... and the connection closes 4,000 bytes short.


def test_an_encrypt_cut_off_is_a_failure_and_its_envelope_is_never_decrypted(
    tmp_path: Path,
) -> None:
    server = CuttingServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        # Any token: this server checks none.
        env = {"SEALFLOW_TOKEN": "unused"}
        done = run(tmp_path, "--users", "2", "--duration", "3s", "--url", url, **env)
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 1, done.stderr[-2000:]
    rows = stats(tmp_path)
    encrypts = [row for name, row in rows.items() if name.startswith("encrypt")]
    assert sum(int(row["Failure Count"]) for row in encrypts) > 10
    assert not any(name.startswith("decrypt") for name in rows)
    assert server.decrypts == 0
    with (tmp_path / "locust_failures.csv").open() as f:
        failures = list(csv.DictReader(f))
    assert failures
    assert all(row["Name"].startswith("encrypt") for row in failures), failures


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
