"""SIGHUP on a real ``sealflow serve``: the certificate, key and client CAs are reloaded in place.

New handshakes get the new files, connections already made go on with theirs, none is closed;
a bad file keeps the old ones and the log says why; without TLS there is nothing to reload and
the server goes on. With ``--workers 2`` the supervisor passes SIGHUP to each worker, which
reloads itself (uvicorn's own handling would restart the workers: service/server/http/_serve.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from cryptography import x509
from uvicorn.supervisors import Multiprocess

from tests.service import pki
from tests.service.conftest import Server

MakeServer = Any


class Files:
    """Two CAs, a server certificate from each, a client of each; the server's files, which a
    test rewrites before its SIGHUP."""

    def __init__(self, directory: Path) -> None:
        issued = directory / "issued"
        self.ca1 = pki.ca(issued, "ca1")
        self.ca2 = pki.ca(issued, "ca2")
        self.old = pki.server_cert(self.ca1, issued, "server-old")
        self.new = pki.server_cert(self.ca2, issued, "server-new")
        self.client1 = pki.client_cert(self.ca1, issued, "client1")
        self.client2 = pki.client_cert(self.ca2, issued, "client2")
        self.cert, self.key, self.client_ca = (
            directory / "server.crt",
            directory / "server.key",
            directory / "clients.pem",
        )
        self.put(self.old, self.ca1)
        # Clients trust both CAs: what they see is the certificate served, not a failure.
        self.trust = directory / "trust.pem"
        self.trust.write_bytes(self.ca1.cert_path.read_bytes() + self.ca2.cert_path.read_bytes())

    def put(self, server: pki.Issued, client_ca: pki.Issued) -> None:
        """Install a server certificate and a client CA, each file replaced whole."""
        for source, target in (
            (server.cert_path, self.cert),
            (server.key_path, self.key),
            (client_ca.cert_path, self.client_ca),
        ):
            write(target, source.read_bytes())

    def settings(self, **more: object) -> dict[str, object]:
        return {
            "tls_cert": self.cert,
            "tls_key": self.key,
            "tls_client_ca": self.client_ca,
            "keepalive_timeout": 120,
            **more,
        }

    def context(self, client: pki.Issued | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.trust)
        if client is not None:
            ctx.load_cert_chain(client.cert_path, client.key_path)
        return ctx


def write(path: Path, data: bytes) -> None:
    """As an operator's deployment does: a new file renamed over the old one."""
    part = path.with_name(path.name + ".part")
    part.write_bytes(data)
    os.replace(part, path)


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path / "tls")


def serial_of(der: bytes | None) -> str:
    assert der is not None
    return format(x509.load_der_x509_certificate(der).serial_number, "x")


def served(port: int, ctx: ssl.SSLContext, name: str | None = "localhost") -> str:
    """The serial of the certificate a new connection is served (``name``: the SNI, None for
    none: a client that dials 127.0.0.1 sends none)."""
    if name is None:
        ctx.check_hostname = False
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=name) as conn,
    ):
        return serial_of(conn.getpeercert(binary_form=True))


def logged(srv: Server, message: str, count: int = 1) -> list[dict[str, Any]]:
    """The server's log lines whose message starts with ``message``, once there are ``count``
    (waits for them: a line is written when the server has acted on the signal)."""
    deadline = time.monotonic() + 300  # a bound against a hang, not a timing check
    while True:
        found = [line for line in log_lines(srv) if str(line.get("msg", "")).startswith(message)]
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, (message, srv.log.read_text()[-3000:])
        time.sleep(0.05)


def log_lines(srv: Server) -> list[dict[str, Any]]:
    lines = []
    for text in srv.log.read_text().splitlines():
        if text.startswith("{"):
            lines.append(json.loads(text))
    return lines


def test_sighup_with_200_requests_in_flight(make_server: MakeServer, files: Files) -> None:
    # The receive timeout well above the time the 200 take to arrive on a loaded machine.
    srv = make_server(**files.settings(max_concurrent_requests=512, receive_timeout=600))
    old, new = files.old.serial, files.new.serial
    assert served(srv.port, files.context()) == old
    outcome = asyncio.run(in_flight_reload(srv, files))
    statuses, first_round, second_round, during = outcome
    assert statuses == [200] * 200
    # Each request went over a connection of the first round, which still holds the old
    # certificate: not one connection was closed by the reload (httpx would have opened a new
    # one, served the new certificate).
    assert len(first_round) == 200
    assert set(second_round.values()) == {old}, len(second_round)
    assert set(second_round) <= set(first_round)
    # New connections, made while the 200 were in flight, got the new certificate, with the
    # server name and without, and the new client CAs: ca1's client is refused now, ca2's is in.
    assert during == {"sni": new, "no sni": new, "client2": new, "client1": "refused"}
    (line,) = logged(srv, "TLS reloaded")
    assert line["level"] == "info"
    assert (line["cert"], line["key"], line["client_ca"]) == (
        str(files.cert),
        str(files.key),
        str(files.client_ca),
    )
    assert line["subject"] == "CN=localhost"
    assert line["serial"] == new
    assert line["fingerprint"] == files.new.fingerprint
    assert line["not_after"] == files.new.cert.not_valid_after_utc.isoformat()
    assert line["client_cas"] == 1
    assert line["pid"] == srv.proc.pid
    assert srv.proc.poll() is None


async def in_flight_reload(
    srv: Server, files: Files
) -> tuple[list[int], dict[int, str], dict[int, str], dict[str, str]]:
    headers = {"authorization": f"Bearer {srv.token}"}
    # One client per connection, each kept alive as long as the test runs (httpx's default
    # drops a connection idle for 5 s). Not one client with a pool of 200: its pool scans
    # every connection for every request, and on a slow machine the 200 then reached the
    # server more slowly than its receive timeout let the first of them wait.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=None)
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=srv.https_url,
                    verify=files.context(files.client1),
                    limits=limits,
                    timeout=120,
                    headers=headers,
                )
            )
            for _ in range(200)
        ]

        async def encrypt(client: httpx.AsyncClient, gate: asyncio.Event) -> tuple[int, int, str]:
            async def body() -> AsyncIterator[bytes]:
                yield b"first half, "
                await gate.wait()  # the request stays in flight until the gate opens
                yield b"second half"

            response = await client.post("/v1/keys/default/encrypt", content=body())
            stream = response.extensions["network_stream"]
            ssl_object = stream.get_extra_info("ssl_object")
            port = stream.get_extra_info("client_addr")[1]  # the connection's own port
            if response.status_code == 200:
                opened = await client.post("/v1/decrypt", content=response.content)
                assert opened.content == b"first half, second half"
            return (
                response.status_code,
                port,
                serial_of(ssl_object.getpeercert(binary_form=True)),
            )

        # Round one opens 200 connections (200 requests at once, each on its own).
        gate = asyncio.Event()
        first = [asyncio.create_task(encrypt(client, gate)) for client in clients]
        await asyncio.sleep(0)
        gate.set()
        first_round = {conn: serial for _, conn, serial in await asyncio.gather(*first)}
        # Round two: 200 requests in flight on those kept-alive connections, the SIGHUP among
        # them.
        gate = asyncio.Event()
        second = [asyncio.create_task(encrypt(client, gate)) for client in clients]
        await until_in_flight(srv, 200)
        files.put(files.new, files.ca2)
        srv.proc.send_signal(signal.SIGHUP)
        await asyncio.to_thread(logged, srv, "TLS reloaded")
        during = await asyncio.to_thread(new_connections, srv, files)
        gate.set()
        results = await asyncio.gather(*second)
    return (
        [status for status, _, _ in results],
        first_round,
        {conn: serial for _, conn, serial in results},
        during,
    )


async def until_in_flight(srv: Server, n: int) -> None:
    """Until the server has ``n`` encrypts under way (its in-flight gauge, /metrics)."""
    deadline = time.monotonic() + 300  # a bound against a hang, not a timing check
    async with httpx.AsyncClient(base_url=srv.https_url, verify=False, timeout=30) as probe:  # noqa: S501
        while True:
            text = (await probe.get("/metrics")).text
            match = re.search(r"^sealflow_requests_in_flight(?:\{[^}]*\})? (\S+)$", text, re.M)
            assert match is not None, text[:2000]
            if float(match.group(1)) >= n:
                return
            assert time.monotonic() < deadline, match.group(0)
            await asyncio.sleep(0.05)


def new_connections(srv: Server, files: Files) -> dict[str, str]:
    """What new connections are served now, and whether ca1's client still gets in."""
    seen = {
        "sni": served(srv.port, files.context()),
        "no sni": served(srv.port, files.context(), name=None),
        "client2": served(srv.port, files.context(files.client2)),
    }
    with httpx.Client(base_url=srv.https_url, verify=files.context(files.client1)) as client:
        try:
            client.get("/readyz")
            seen["client1"] = "in"
        except httpx.TransportError:
            seen["client1"] = "refused"
    return seen


@pytest.mark.parametrize(
    ("breakage", "error"),
    [
        ("cert not PEM", "{cert} holds no PEM certificate"),
        ("cert missing", "cannot read {cert}: No such file or directory"),
        ("key of another certificate", "the key {key} does not match the certificate"),
        ("key not PEM", "{key}: not a usable PEM private key"),
        ("client CA not PEM", "{client_ca} holds no PEM certificate"),
        ("client CA a directory", "cannot read {client_ca}: Is a directory"),
    ],
)
def test_a_bad_file_keeps_the_old_ones(
    make_server: MakeServer, files: Files, breakage: str, error: str
) -> None:
    srv = make_server(**files.settings())
    old = files.old.serial
    with httpx.Client(base_url=srv.https_url, verify=files.context(files.client1)) as kept:
        assert kept.get("/readyz").status_code == 200
        files.put(files.new, files.ca2)  # all good but one file
        if breakage == "cert not PEM":
            write(files.cert, b"this is not a certificate\n")
        elif breakage == "cert missing":
            files.cert.unlink()
        elif breakage == "key of another certificate":
            write(files.key, files.old.key_path.read_bytes())
        elif breakage == "key not PEM":
            write(
                files.key, b"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"
            )
        elif breakage == "client CA not PEM":
            write(files.client_ca, b"")
        else:
            files.client_ca.unlink()
            files.client_ca.mkdir()
        srv.proc.send_signal(signal.SIGHUP)
        (line,) = logged(srv, "TLS reload failed")
        assert line["level"] == "error"
        wanted = error.format(cert=files.cert, key=files.key, client_ca=files.client_ca)
        assert line["error"].startswith(wanted), line
        assert line["serial"] == old  # the one that stays, named
        # The old certificate and client CAs still serve: new connections get them, ca1's
        # client is let in, and the connection made before goes on.
        assert served(srv.port, files.context(files.client1)) == old
        assert kept.get("/readyz").status_code == 200
    assert "PRIVATE KEY" not in srv.log.read_text()
    assert not logged_now(srv, "TLS reloaded")
    # Mended, the next SIGHUP loads the new files.
    if files.client_ca.is_dir():
        files.client_ca.rmdir()
    files.put(files.new, files.ca2)
    srv.proc.send_signal(signal.SIGHUP)
    (line,) = logged(srv, "TLS reloaded")
    assert line["serial"] == files.new.serial
    assert served(srv.port, files.context(files.client2)) == files.new.serial


def logged_now(srv: Server, message: str) -> list[dict[str, Any]]:
    return [line for line in log_lines(srv) if str(line.get("msg", "")).startswith(message)]


def test_sighup_without_tls(make_server: MakeServer) -> None:
    srv = make_server()
    with srv.client() as client:
        assert client.get("/readyz").status_code == 200  # a kept-alive connection
        srv.proc.send_signal(signal.SIGHUP)
        (line,) = logged(srv, "SIGHUP: TLS is off")
        assert line["msg"] == "SIGHUP: TLS is off (no --tls-cert), nothing to reload"
        assert line["pid"] == srv.proc.pid
        assert client.post("/v1/keys/default/encrypt", content=b"x").status_code == 200
    assert srv.proc.poll() is None
    with srv.client() as client:
        assert client.get("/readyz").status_code == 200


class KeptAlive:
    """A TLS connection that makes requests one after another (HTTP/1.1 keep-alive)."""

    def __init__(self, port: int, ctx: ssl.SSLContext) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.conn = ctx.wrap_socket(raw, server_hostname="localhost")
        self.serial = serial_of(self.conn.getpeercert(binary_form=True))

    def get(self) -> int:
        self.conn.sendall(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.conn.recv(4096)
            assert chunk, "the connection was closed"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        assert length is not None
        while len(body) < int(length.group(1)):
            body += self.conn.recv(4096)
        return int(head.split()[1])

    def close(self) -> None:
        self.conn.close()


def test_workers_reload_each_without_a_restart(make_server: MakeServer, files: Files) -> None:
    # What _serve._Workers relies on in uvicorn 0.54 (the pin): SIGHUP dispatched to handle_hup,
    # the workers and the exit flag as attributes of the supervisor.
    assert uvicorn.__version__.startswith("0.54.")
    assert callable(Multiprocess.handle_hup)
    assert "processes" in Multiprocess.__init__.__code__.co_names
    srv = make_server(**files.settings(workers=2))
    assert len(logged(srv, "TLS certificate loaded", 2)) == 2
    kept = [KeptAlive(srv.port, files.context(files.client1)) for _ in range(20)]
    try:
        assert {conn.get() for conn in kept} == {200}
        files.put(files.new, files.ca2)
        srv.proc.send_signal(signal.SIGHUP)
        reloaded = logged(srv, "TLS reloaded", 2)
        (passed,) = logged(srv, "SIGHUP: passed to the workers")
        loaded = logged_now(srv, "TLS certificate loaded")
        # Both workers reloaded, themselves: the two that started, none restarted.
        workers = {line["pid"] for line in loaded}
        assert len(workers) == 2
        assert {line["pid"] for line in reloaded} == workers == set(passed["workers"])
        assert {line["serial"] for line in reloaded} == {files.new.serial}
        assert srv.proc.pid not in workers  # the supervisor reloads nothing itself
        # Every connection made before goes on, with the certificate it was made with.
        assert {conn.get() for conn in kept} == {200}
        assert {conn.serial for conn in kept} == {files.old.serial}
        # New ones, whichever worker takes them, get the new certificate and client CAs.
        fresh = [KeptAlive(srv.port, files.context(files.client2)) for _ in range(20)]
        assert {conn.get() for conn in fresh} == {200}
        assert {conn.serial for conn in fresh} == {files.new.serial}
        for conn in fresh:
            conn.close()
        assert not logged_now(srv, "TLS reload failed")
        assert srv.proc.poll() is None
    finally:
        for conn in kept:
            conn.close()
