"""Hardening of the front door: what an unauthenticated (or greedy) client can make the server
hold, and for how long. Each test runs the attack against a real server while a legitimate
client keeps working, and checks that the legitimate requests all succeed and that the
server's memory stays bounded. (How fast they are served under attack is measured by
``python -m benchmarks.attack``, not asserted here.)"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.service.conftest import Server

MakeServer = Callable[..., Server]
MiB = 1 << 20


def reply_of(sock: socket.socket, wait: float = 20.0) -> bytes:
    """What the server answers on this socket until it closes it (or resets it)."""
    sock.settimeout(wait)
    reply = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


@contextlib.contextmanager
def legitimate_traffic(srv: Server) -> Iterator[list[int]]:
    """1 KiB encrypts in a loop while the block runs; yields their statuses."""
    statuses: list[int] = []
    stop = threading.Event()

    def run() -> None:
        with srv.client() as c:
            while not stop.is_set():
                statuses.append(c.post("/v1/keys/default/encrypt", content=b"x" * 1024).status_code)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        yield statuses
    finally:
        stop.set()
        worker.join()


def flood_headers(port: int) -> bytes:
    """An endless stream of small header lines on one connection, until the server stops it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    line = b"X-Flood: " + b"f" * 90 + b"\r\n"
    with contextlib.suppress(OSError):
        sock.sendall(b"POST /v1/keys/default/encrypt HTTP/1.1\r\nHost: x\r\n")
        # 1 MiB of header lines: after the refusal the server discards what still comes for
        # a moment (so that the client can read the answer), then drops the connection.
        for _ in range(1 * MiB // len(line)):
            sock.sendall(line)
    reply = reply_of(sock)
    sock.close()
    return reply


def test_a_header_flood_is_refused_with_431_and_memory_stays_bounded(
    make_server: MakeServer,
) -> None:
    srv = make_server()
    rss_before = srv.status("VmRSS")
    with legitimate_traffic(srv) as statuses:
        replies = [flood_headers(srv.port) for _ in range(60)]  # 60 MiB offered
    assert all(status_of(r) == 431 for r in replies), {status_of(r) for r in replies}
    assert b'"headers_too_large"' in replies[0]
    assert statuses, "the legitimate client got no answer at all"
    assert set(statuses) == {200}
    assert srv.status("VmRSS") - rss_before < 64 * MiB


def test_an_endless_url_is_refused_with_414(server: Server) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    with contextlib.suppress(OSError):
        sock.sendall(b"GET /")
        for _ in range(256):
            sock.sendall(b"a" * 4096)
    reply = reply_of(sock)
    assert status_of(reply) == 414
    sock.close()


def test_a_head_that_never_completes_is_closed_after_the_header_timeout(
    make_server: MakeServer,
) -> None:
    srv = make_server(header_timeout=1)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
    # One byte every 0.3 s would take 30 s to send 100; the server gives up long before.
    with contextlib.suppress(OSError):
        for _ in range(100):
            time.sleep(0.3)
            sock.sendall(b"s")
    reply = reply_of(sock)
    sock.close()
    assert status_of(reply) == 408
    assert b'"request_timeout"' in reply


def test_a_connection_that_sends_nothing_is_closed(make_server: MakeServer) -> None:
    srv = make_server(header_timeout=1)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    assert reply_of(sock) == b""  # closed without a word, well before the 20 s wait
    sock.close()


def test_an_idle_keep_alive_connection_is_closed(make_server: MakeServer) -> None:
    srv = make_server(keepalive_timeout=1)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    first = b""
    while b'{"status":' not in first:
        first += sock.recv(65536)
    assert status_of(first) == 200
    assert reply_of(sock) == b""  # then nothing more, and the server closed it
    sock.close()


def test_unauthenticated_requests_never_hold_a_slot(make_server: MakeServer) -> None:
    srv = make_server(max_concurrent_requests=4)
    held = []
    # 40 connections that send an admin head and one byte of a large body, then stall.
    for _ in range(40):
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
        sock.sendall(
            b"POST /v1/keys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 60000\r\n\r\n{"
        )
        held.append(sock)
    try:
        with srv.client() as c:
            for i in range(10):
                r = c.post("/v1/keys", json={"name": f"slot-{i}"})
                assert r.status_code == 201, r.text
                assert c.post("/v1/keys/default/encrypt", content=b"y").status_code == 200
        # Each of them was refused at once, unread.
        assert all(status_of(reply_of(s)) == 401 for s in held)
    finally:
        for s in held:
            s.close()


def test_an_admin_body_is_read_under_the_receive_deadline(make_server: MakeServer) -> None:
    srv = make_server(receive_timeout=1)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    sock.sendall(
        b"POST /v1/keys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {srv.token}\r\n".encode()
        + b"Content-Length: 1000\r\n\r\n{"
    )
    reply = reply_of(sock)
    sock.close()
    assert status_of(reply) == 408
    with srv.client() as c:
        assert c.get("/v1/keys").status_code == 200


def test_a_stalled_transit_body_gets_vaults_shape(make_server: MakeServer) -> None:
    srv = make_server(receive_timeout=1)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    sock.sendall(
        b"POST /v1/transit/encrypt/default HTTP/1.1\r\nHost: x\r\n"
        + f"X-Vault-Token: {srv.token}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    reply = reply_of(sock)
    sock.close()
    assert status_of(reply) == 408
    head, body = reply.split(b"\r\n\r\n", 1)
    assert b"connection: close" in head.lower()
    assert json.loads(body) == {"errors": ["the request body was not received in time"]}


def test_one_token_holds_at_most_its_share_of_the_slots(make_server: MakeServer) -> None:
    srv = make_server(max_concurrent_requests=4, max_concurrent_per_token=2)
    other = srv.cli("tokens", "create", "--scope", "encrypt:*").stdout.decode().strip()
    slow = srv.stalled_encrypts(2)
    try:
        deadline = time.monotonic() + 10
        with srv.client() as c:
            while (r := c.post("/v1/keys/default/encrypt", content=b"y")).status_code != 429:
                assert time.monotonic() < deadline, "the two slow requests never counted"
                time.sleep(0.05)
            assert r.json()["error"]["code"] == "too_many_requests"
            assert r.headers["retry-after"] == "1"
        with httpx.Client(base_url=srv.url, headers={"authorization": f"Bearer {other}"}) as c:
            assert c.post("/v1/keys/default/encrypt", content=b"y").status_code == 200
        for sock in slow:
            sock.sendall(b"x" * 99)
            assert sock.recv(12) == b"HTTP/1.1 200"
    finally:
        for sock in slow:
            sock.close()


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1%2Fkeys%2Fdefault%2Fexport"), ("POST", "/v1/keys/default%2Fencrypt")],
)
def test_encoded_slashes_are_refused(client: httpx.Client, method: str, path: str) -> None:
    r = client.request(method, path, content=b"x" if method == "POST" else None)
    assert r.status_code == 400
    assert "%2F" in r.json()["error"]["message"]


@pytest.mark.parametrize("header", ["authorization", "x-aad"])
def test_duplicate_authorization_or_aad_is_refused(server: Server, header: str) -> None:
    value = f"Bearer {server.token}" if header == "authorization" else "YWFk"
    headers = [("authorization", f"Bearer {server.token}"), (header, value)]
    if header == "x-aad":
        headers.append((header, value))
    with httpx.Client(base_url=server.url) as c:
        r = c.post("/v1/keys/default/encrypt", content=b"x", headers=headers)
    assert r.status_code == 400
    assert "more than one" in r.json()["error"]["message"]


def test_declared_but_unsent_bodies_do_not_take_the_memory_budget(
    make_server: MakeServer,
) -> None:
    # Eight requests declare 64 MiB single-shot bodies and send nothing: a declared length buys
    # only a first reserve of the budget (and of memory) until its bytes come.
    srv = make_server(max_buffered_bytes=256 * MiB, max_concurrent_per_token=16)
    rss_before = srv.status("VmRSS")
    head = (
        f"POST /v1/keys/default/encrypt?mode=single HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        f"{srv.token}\r\nContent-Length: {64 * MiB}\r\n\r\nx"
    ).encode()
    stalled = [socket.create_connection(("127.0.0.1", srv.port), timeout=20) for _ in range(8)]
    try:
        for sock in stalled:
            sock.sendall(head)
        time.sleep(0.5)  # let every one of them reach the server and reserve what it may
        with srv.client() as c:
            for _ in range(5):
                r = c.post("/v1/keys/default/encrypt?mode=single", content=b"z" * MiB)
                assert r.status_code == 200, r.text
        assert srv.status("VmRSS") - rss_before < 64 * MiB
    finally:
        for sock in stalled:
            sock.close()
