"""The request path against a real ``sealflow serve``, tried as an attacker would: what arrives
after a head, or in a later read, never decides anything about a request, and cannot make the
server hold memory or a connection beyond its limits (issue 22's seven findings; the same rules
in-process: tests/service/server/http/test_protocol.py)."""

from __future__ import annotations

import contextlib
import re
import socket
import time
from collections.abc import Callable

import httpx

from tests.service.conftest import Server

MakeServer = Callable[..., Server]
MiB = 1 << 20


def connect(srv: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_all(sock: socket.socket, wait: float = 3.0) -> bytes:
    """What comes until the server closes (or resets) the connection, or goes quiet."""
    sock.settimeout(wait)
    data = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def statuses(data: bytes) -> list[int]:
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def closed(sock: socket.socket, wait: float) -> bool:
    """Whether the server has closed the connection within ``wait`` seconds."""
    sock.settimeout(wait)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_a_token_sent_as_a_trailer_does_not_authenticate(server: Server) -> None:
    for path, header in (
        ("/v1/keys/default/encrypt", f"Authorization: Bearer {server.token}"),
        ("/v1/transit/encrypt/default", f"X-Vault-Token: {server.token}"),
    ):
        sock = connect(server)
        body = b'{"plaintext": "aGk="}'
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            + b"%x\r\n%s\r\n0\r\n%s\r\n\r\n" % (len(body), body, header.encode())
        )
        reply = read_all(sock)
        sock.close()
        assert statuses(reply)[:1] in ([401], [403]), reply[:200]


def test_trailers_cannot_grow_the_server_or_hold_the_connection(make_server: MakeServer) -> None:
    srv = make_server()
    before = srv.status("VmRSS")
    socks = []
    for _ in range(4):
        sock = connect(srv)
        chunked = b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        sock.sendall(chunked + b"0\r\n")
        socks.append(sock)
    sent = 0
    line = b"X-Junk: " + b"j" * 4000 + b"\r\n"
    with contextlib.suppress(OSError):  # the server ends them
        for _ in range(2000):  # up to 8 MB a connection
            for sock in socks:
                sock.sendall(line)
            sent += len(line)
    assert sent < 4 * MiB  # refused long before the end
    assert all(closed(sock, 5) for sock in socks)
    assert srv.status("VmRSS") - before < 16 * MiB
    for sock in socks:
        sock.close()


def test_a_head_behind_a_complete_request_is_bounded(make_server: MakeServer) -> None:
    srv = make_server()
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 60_000
    socks = [connect(srv) for _ in range(20)]
    for sock in socks:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + head)
    for sock in socks:
        reply = read_all(sock, wait=5)
        assert statuses(reply) == [200, 431]
        sock.close()


def test_list_does_not_outlive_its_request(server: Server) -> None:
    vault = f"X-Vault-Token: {server.token}\r\n"
    small = (
        "POST /v1/keys/default/encrypt?mode=single HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {server.token}\r\nX-Note: "
    )
    sock = connect(server)
    # A request, then in the same read a small POST whose head ends mid-header...
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + small.encode())
    time.sleep(0.2)
    sock.sendall(b"LIST z\r\nContent-Length: 3\r\n\r\nabc")  # ...ended by a read starting LIST
    time.sleep(0.2)
    sock.sendall(f"GET /v1/transit/keys/default HTTP/1.1\r\nHost: x\r\n{vault}\r\n".encode())
    reply = read_all(sock, wait=2)
    sock.close()
    assert statuses(reply) == [200, 200, 200]  # the last read as the GET it is, not a LIST


def test_the_keep_alive_timer_waits_for_pending_requests(make_server: MakeServer) -> None:
    srv = make_server(keepalive_timeout=0.001)
    small = (
        f"POST /v1/keys/default/encrypt?mode=single HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {srv.token}\r\nContent-Length: 100\r\n\r\n"
    ).encode() + b"x" * 100
    app = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    sock = connect(srv)
    sock.sendall((small + app) * 30)
    reply = read_all(sock, wait=5)
    sock.close()
    assert statuses(reply) == [200] * 60


def test_two_vault_tokens_are_refused(server: Server) -> None:
    headers = [("X-Vault-Token", "unknown"), ("X-Vault-Token", server.token)]
    with httpx.Client(base_url=server.url) as c:
        lookup = c.get("/v1/auth/token/lookup-self", headers=headers)
        encrypt = c.post("/v1/transit/encrypt/default", json={"plaintext": "aGk="}, headers=headers)
    assert lookup.status_code == 400
    assert encrypt.status_code == 400
