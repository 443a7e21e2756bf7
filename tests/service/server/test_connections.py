"""The connection cap against a real server whose descriptors are few (issue 24, item 4):
idle sockets without a token cannot take every descriptor; the ones that never authenticated
are closed first, oldest first, and clients with a token still get in."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable

import pytest

from tests.service.conftest import Server

MakeServer = Callable[..., Server]
DESCRIPTORS = 1024
FLOOD = 1100  # more sockets than the server has descriptors


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed (or reset) this connection; it never sent on it."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def exchange(sock: socket.socket, request: bytes) -> tuple[bytes, bytes]:
    """One request on an open connection, kept alive: the answer's status line and body."""
    sock.setblocking(True)
    sock.sendall(request)
    answer = b""
    while b"\r\n\r\n" not in answer:
        piece = sock.recv(65536)
        assert piece, "the server closed the connection"
        answer += piece
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b"\r\n")[0], body


def encrypt_on(sock: socket.socket, token: str) -> bytes:
    request = (
        b"POST /v1/keys/default/encrypt?mode=single HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer %s\r\nContent-Length: 2\r\n\r\nhi" % token.encode()
    )
    return exchange(sock, request)[0]


def refused(sock: socket.socket, reason: str) -> float:
    """sealflow_connections_refused_total for ``reason``, scraped on ``sock`` (a new
    connection would itself make the server shed one)."""
    status, text = exchange(sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == b"HTTP/1.1 200 OK"
    name = f'sealflow_connections_refused_total{{reason="{reason}"}}'
    lines = text.decode().splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(name))


def logged_cap(srv: Server) -> int:
    for line in srv.log.read_text().splitlines():
        if '"msg": "connections"' in line:
            fields = json.loads(line)
            assert fields["descriptors"] == DESCRIPTORS
            cap: int = fields["max_connections"]
            return cap
    raise AssertionError("the server logged no connection cap")


@pytest.mark.parametrize("sends", [b"", b"POST /v1/keys/default/encrypt HTTP/1.1\r\nHost: x\r\n"])
def test_idle_sockets_without_a_token_cannot_lock_out_a_client_with_one(
    make_server: MakeServer, sends: bytes
) -> None:
    srv = make_server(nofile=DESCRIPTORS)
    kept = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    try:
        # A client with a token, its connection kept alive from before the flood.
        assert encrypt_on(kept, srv.token) == b"HTTP/1.1 200 OK"
        flood = []
        for _ in range(FLOOD):
            sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            if sends:
                sock.sendall(sends)  # a head begun, never finished
            flood.append(sock)
        # A new client with a token gets in, and the old one's connection is still there.
        with srv.client() as c:
            assert c.post("/v1/keys/default/encrypt", content=b"hi").status_code == 200
        assert encrypt_on(kept, srv.token) == b"HTTP/1.1 200 OK"
        closed = [closed_by_server(sock) for sock in flood]
        shed = sum(closed)
        # The oldest went first: the closed ones are the first opened, the rest still open.
        assert closed == [True] * shed + [False] * (FLOOD - shed)
        cap = logged_cap(srv)
        assert cap < DESCRIPTORS
        # Each connection past the cap made room: what stays open is the cap's worth, the
        # flood's newest, the kept connection and the new client's (closed since).
        assert FLOOD - shed == cap - 2
        assert refused(kept, "shed_unauthenticated") == shed
        assert refused(kept, "shed_idle") == 0
        assert len(os.listdir(f"/proc/{srv.proc.pid}/fd")) < DESCRIPTORS
        for sock in flood:
            sock.close()
    finally:
        kept.close()
    srv.stop()
    assert "Too many open files" not in srv.log.read_text()
