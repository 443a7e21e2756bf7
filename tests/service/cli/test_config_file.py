"""``sealflow serve --config FILE``: a TOML file of settings, below variables and flags."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.service.cli.test_cli import run
from tests.service.conftest import SEALFLOW, free_port


class Started:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, out: Path) -> None:
        self.proc, self.port, self.out = proc, port, out

    @property
    def token(self) -> str:
        lines = self.out.read_text().splitlines()
        return next(line.split(": ", 1)[1] for line in lines if line.startswith("Root token: "))

    def encrypt_single(self, size: int) -> int:
        response = httpx.post(
            f"http://127.0.0.1:{self.port}/v1/keys/default/encrypt?mode=single",
            content=b"x" * size,
            headers={"authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        return response.status_code


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Started]]:
    """Start ``sealflow serve`` with the given arguments and environment; wait for /readyz on
    ``port`` (which the file, a variable or a flag chose)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, port: int, env: dict[str, str] | None = None) -> Started:
        out = tmp_path / f"serve{len(started)}.stdout"
        err = tmp_path / f"serve{len(started)}.log"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(  # noqa: S603
                [SEALFLOW, "serve", *args],
                cwd=tmp_path,
                env={**os.environ, **(env or {})},
                stdout=stdout,
                stderr=stderr,
            )
        started.append(proc)
        while True:
            assert proc.poll() is None, err.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                    return Started(proc, port, out)
            except httpx.TransportError:
                time.sleep(0.05)

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(60)


def test_the_file_sets_the_service_up_for_every_worker(
    tmp_path: Path, serve: Callable[..., Started]
) -> None:
    port = free_port()
    (tmp_path / "sealflow.toml").write_text(
        f'port = {port}\ndata_dir = "{tmp_path / "from-file"}"\nworkers = 2\n'
        "max_single_bytes = 16\n"
    )
    server = serve("--config", "sealflow.toml", port=port)
    assert (tmp_path / "from-file" / "keystore.db").exists()
    assert not (tmp_path / ".sealflow").exists()
    # Each of the two workers read the limit from the file: no request gets past it.
    assert {server.encrypt_single(16) for _ in range(8)} == {200}
    assert {server.encrypt_single(17) for _ in range(8)} == {413}


def test_variables_override_the_file_and_flags_override_both(
    tmp_path: Path, serve: Callable[..., Started]
) -> None:
    file_port, env_port, flag_port = free_port(), free_port(), free_port()
    (tmp_path / "sealflow.toml").write_text(
        f"port = {file_port}\nmax_single_bytes = 16\nmax_record_bytes = 100\n"
    )
    env = {"SEALFLOW_PORT": str(env_port), "SEALFLOW_MAX_SINGLE_BYTES": "32"}
    server = serve("--config", "sealflow.toml", "--port", str(flag_port), env=env, port=flag_port)
    for port in (file_port, env_port):
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
    assert server.encrypt_single(32) == 200  # the variable's 32, not the file's 16
    assert server.encrypt_single(33) == 413


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prot = 8443\n", "unknown setting 'prot'"),
        ("port = 8443\n[tls]\ncert = 'c.pem'\n", "unknown setting 'tls'"),
        ("PORT = 8443\n", "unknown setting 'PORT'"),
        ('port = "8443\n', "not a valid TOML file"),
        ("port = 8443\nport = 8444\n", "not a valid TOML file"),
    ],
)
def test_a_bad_file_is_refused_by_name_with_exit_2(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "sealflow.toml").write_text(text)
    done = run("serve", "--config", "sealflow.toml", cwd=tmp_path)
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert stderr.startswith(f"sealflow: --config {tmp_path / 'sealflow.toml'}: "), stderr
    assert message in stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / ".sealflow").exists()  # refused before anything was created


def test_a_missing_file_and_a_bad_value_are_refused_with_exit_2(tmp_path: Path) -> None:
    missing = run("serve", "--config", "nowhere.toml", cwd=tmp_path)
    assert missing.returncode == 2
    assert "nowhere.toml: no such file" in missing.stderr.decode()
    (tmp_path / "sealflow.toml").write_text('port = "eighty"\n')
    bad = run("serve", "--config", "sealflow.toml", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.decode().startswith("sealflow: invalid setting --port / SEALFLOW_PORT")
    assert not (tmp_path / ".sealflow").exists()
