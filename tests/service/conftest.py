"""A real sealflow server (``sealflow serve`` in a subprocess) on a loopback port."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from sealflow.engine import Algorithm

from . import duplex as _duplex

SEALFLOW = str(Path(sys.executable).with_name("sealflow"))
# Exportable test keys, one per algorithm, so tests can check envelopes independently.
KEYS = {
    Algorithm.AES_128_GCM: "t-aes128",
    Algorithm.AES_256_GCM: "t-aes256",
    Algorithm.CHACHA20_POLY1305: "t-chacha",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    data_dir: Path
    port: int
    proc: subprocess.Popen[bytes]
    token: str
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    cert: Path | None = None  # a TLS server's self-signed certificate

    @property
    def https_url(self) -> str:
        """The URL of a TLS server, by the name its certificate holds."""
        return f"https://localhost:{self.port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **kwargs)

    def post(
        self,
        path: str,
        body: Iterable[bytes],
        length: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> _duplex.Reply:
        """A full-duplex POST (reads the reply while sending), for bodies of any size."""
        auth = {"authorization": f"Bearer {self.token}", **(headers or {})}
        return _duplex.post(self.url + path, body, auth, length)

    def access(self) -> list[dict[str, Any]]:
        """The access log so far: one JSON object per request (lines go out in batches)."""
        lines = self.log.read_text().splitlines()
        return [json.loads(line) for line in lines if '"sealflow.access"' in line]

    def status(self, field_name: str) -> int:
        """A field of /proc/<pid>/status in bytes (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field_name)

    def cli(self, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """Run a ``sealflow`` subcommand against this server's data dir and URL."""
        env = {**os.environ, **self.env, "SEALFLOW_URL": self.url, "SEALFLOW_TOKEN": self.token}
        return subprocess.run(  # noqa: S603
            [SEALFLOW, *args], input=stdin, capture_output=True, env=env, timeout=120, check=False
        )

    def stalled_encrypts(self, n: int) -> list[socket.socket]:
        """n encrypts that declare a 100-byte body and send 1 byte: each holds a slot (as this
        server's token) until its socket sends the other 99 or closes."""
        head = (
            f"POST /v1/keys/default/encrypt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            f"{self.token}\r\nContent-Length: 100\r\n\r\nx"
        ).encode()
        socks = [socket.create_connection(("127.0.0.1", self.port), timeout=20) for _ in range(n)]
        for sock in socks:
            sock.sendall(head)
        return socks

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_server(data_dir: Path, **settings: object) -> Server:
    """Start ``sealflow serve`` with SEALFLOW_* settings; wait until /readyz says ready.
    ``nofile``, not a setting: the server's descriptor limit (RLIMIT_NOFILE, soft and hard),
    set by ``prlimit``. ``probe_cert``, not a setting either: the (certificate, key) files the
    readiness probe presents, for a server that requires a TLS client certificate."""
    nofile = settings.pop("nofile", None)
    probe_cert = settings.pop("probe_cert", None)
    port = free_port()
    env = {f"SEALFLOW_{k.upper()}": str(v) for k, v in settings.items()}
    env["SEALFLOW_DATA_DIR"] = str(data_dir)
    # Beside the data dir, which `sealflow serve` creates itself.
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    out = data_dir.with_name(data_dir.name + ".stdout")
    log = data_dir.with_name(data_dir.name + ".log")
    limit = [] if nofile is None else ["prlimit", f"--nofile={nofile}:{nofile}", "--"]
    with out.open("wb") as stdout, log.open("ab") as stderr:
        proc = subprocess.Popen(  # noqa: S603
            [*limit, SEALFLOW, "serve", "--port", str(port)],
            env={**os.environ, **env},
            stdout=stdout,
            stderr=stderr,
        )
    scheme = "https" if "tls_cert" in settings else "http"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            probe = httpx.get(
                f"{scheme}://127.0.0.1:{port}/readyz",
                timeout=5,
                verify=_probe_context(probe_cert) if scheme == "https" else True,
            )
            if probe.status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"server not ready: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    tokens = [
        line.split(": ", 1)[1]
        for line in out.read_text().splitlines()
        if line.startswith("Root token: ")
    ]
    return Server(data_dir, port, proc, tokens[-1] if tokens else "", log, env)


def _probe_context(cert: object) -> ssl.SSLContext:
    """A client context that checks nothing of the server (the probe only waits for
    readiness; test_tls checks the certificate), with a client certificate if one is given."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        assert isinstance(cert, tuple)
        context.load_cert_chain(*cert)
    return context


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("server") / "data")
    try:
        with srv.client() as client:
            for alg, name in KEYS.items():
                body = {"name": name, "algorithm": alg.value, "exportable": True}
                client.post("/v1/keys", json=body).raise_for_status()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server on HTTPS with a self-signed certificate for localhost (``Server.cert``)."""
    from tests.service.server.test_operations import self_signed  # it imports this module

    folder = tmp_path_factory.mktemp("tls-server")
    cert, key = self_signed(folder)
    srv = start_server(folder / "data", tls_cert=cert, tls_key=key)
    srv.cert = cert
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Any]:
    """Start extra servers with their own settings; they are stopped after the test."""
    started: list[Server] = []

    def make(**settings: object) -> Server:
        srv = start_server(tmp_path / f"data{len(started)}", **settings)
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


def exported_key(client: httpx.Client, name: str, version: int | None = None) -> bytes:
    params = {} if version is None else {"version": version}
    response = client.get(f"/v1/keys/{name}/export", params=params)
    response.raise_for_status()
    return base64.b64decode(response.json()["key"])
