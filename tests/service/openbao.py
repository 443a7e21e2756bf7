"""OpenBao as a transit seal, for the tests: a dev server of one's own (which a test may stop,
or run over TLS), and a sealing key with the least-privileged token an operator should give
sealflow (``SEAL_POLICY``, the policy docs/DEPLOY.md shows).

The session-wide ``bao`` fixture (tests/service/transit/conftest.py) serves tests that never
stop it; ``run_openbao`` is for those that do.
"""

from __future__ import annotations

import os
import secrets
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.service.conftest import free_port
from tests.service.transit.conftest import bao_binary

# Encrypt and decrypt on the one key, nothing else: no create (Transit's encrypt would make a
# missing key), no read, no rotate. Kept word for word in docs/DEPLOY.md (a test checks it).
SEAL_POLICY = """\
path "{mount}/encrypt/{key}" {{
  capabilities = ["update"]
}}
path "{mount}/decrypt/{key}" {{
  capabilities = ["update"]
}}
"""


@dataclass
class OpenBao:
    url: str
    token: str  # the root token
    proc: subprocess.Popen[bytes]
    ca_file: Path | None = None

    def call(self, method: str, path: str, body: object = None) -> httpx.Response:
        return api(self.url, self.token, method, path, body, self.ca_file)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def api(
    url: str,
    token: str,
    method: str,
    path: str,
    body: object = None,
    ca_file: Path | None = None,
    namespace: str | None = None,
) -> httpx.Response:
    """A call to an OpenBao's API; fails the test on any error status."""
    verify = _verify(ca_file)
    headers = {"X-Vault-Token": token}
    if namespace:
        headers["X-Vault-Namespace"] = namespace
    answer = httpx.request(
        method,
        f"{url}/v1/{path}",
        json=body,
        headers=headers,
        verify=verify,
        timeout=30,
    )
    if answer.status_code >= 400:
        pytest.fail(f"{method} {path}: {answer.status_code} {answer.text}")
    return answer


@contextmanager
def run_openbao(workdir: Path, *, tls: bool = False) -> Iterator[OpenBao]:
    """``bao server -dev`` on a free loopback port, Transit enabled at ``transit``; with
    ``tls``, HTTPS under a CA of its own (``ca_file``). Stopped on exit."""
    token = secrets.token_urlsafe(24)
    port = free_port()
    args = [
        bao_binary(),
        "server",
        "-dev",
        f"-dev-root-token-id={token}",
        f"-dev-listen-address=127.0.0.1:{port}",
    ]
    ca_file = None
    if tls:
        certs = workdir / "bao-tls"
        certs.mkdir()
        args += ["-dev-tls", f"-dev-tls-cert-dir={certs}"]
        ca_file = certs / "vault-ca.pem"
    log = workdir / "bao.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603
    bao = OpenBao(f"{'https' if tls else 'http'}://127.0.0.1:{port}", token, proc, ca_file)
    try:
        _wait_ready(bao, log)
        bao.call("POST", "sys/mounts/transit", {"type": "transit"})
        yield bao
    finally:
        bao.stop()


def _verify(ca_file: Path | None) -> ssl.SSLContext | bool:
    return True if ca_file is None else ssl.create_default_context(cafile=str(ca_file))


def _wait_ready(bao: OpenBao, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if bao.proc.poll() is not None:
            pytest.fail(f"bao exited {bao.proc.returncode}: {log.read_text()[-2000:]}")
        if bao.ca_file is None or bao.ca_file.exists():
            verify = _verify(bao.ca_file)
            try:
                health = httpx.get(f"{bao.url}/v1/sys/health", timeout=5, verify=verify)
                if health.status_code == 200:
                    return
            except httpx.TransportError:
                pass
        if time.monotonic() > deadline:
            pytest.fail(f"bao not ready: {log.read_text()[-2000:]}")
        time.sleep(0.1)


@dataclass
class SealKey:
    mount: str
    key: str
    token: str
    token_file: Path

    def settings(self, url: str, ca_file: Path | None = None) -> dict[str, object]:
        """The transit provider's settings, as ``make_server(**...)`` takes them."""
        given: dict[str, object] = {
            "master_key_transit_addr": url,
            "master_key_transit_mount": self.mount,
            "master_key_transit_key": self.key,
            "master_key_transit_token_file": self.token_file,
        }
        if ca_file is not None:
            given["master_key_transit_ca_file"] = ca_file
        return given


def seal_key(
    url: str,
    root_token: str,
    workdir: Path,
    *,
    key_type: str = "aes256-gcm96",
    policy: str = SEAL_POLICY,
    ca_file: Path | None = None,
) -> SealKey:
    """A new Transit key at ``transit/`` and a periodic, orphan token that may only seal with
    it (``policy``), written to a 0600 file as an operator would."""
    key = f"seal-{os.urandom(4).hex()}"
    rules = policy.format(mount="transit", key=key)
    api(url, root_token, "POST", f"transit/keys/{key}", {"type": key_type}, ca_file)
    api(url, root_token, "PUT", f"sys/policies/acl/{key}", {"policy": rules}, ca_file)
    made = api(
        url,
        root_token,
        "POST",
        "auth/token/create-orphan",
        {"policies": [key], "period": "24h"},
        ca_file,
    ).json()
    token = made["auth"]["client_token"]
    token_file = workdir / f"{key}.token"
    token_file.touch(0o600)
    token_file.write_text(token + "\n")
    return SealKey("transit", key, token, token_file)
