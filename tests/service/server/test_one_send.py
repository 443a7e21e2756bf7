"""A response's head leaves with its first body bytes in one write (server/_protocol.py,
``_OneSend``): every shape of response must still arrive whole and in order."""

from __future__ import annotations

import socket

import pytest

from tests.service.conftest import Server


def exchange(srv: Server, request: bytes, then: bytes = b"") -> bytes:
    """Send a request (and `then`, once the first answer bytes came), read until close."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(request)
        reply = sock.recv(65536)
        if then:
            sock.sendall(then)
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/v1/keys"])
def test_head_requests_get_their_head_and_no_body(server: Server, path: str) -> None:
    auth = f"Authorization: Bearer {server.token}\r\n"
    reply = exchange(
        server, f"HEAD {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n".encode()
    )
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), reply
    assert body == b""


def test_100_continue_goes_out_before_the_response(server: Server) -> None:
    # The interim 100 is written while no response has started: never held back (the
    # client waits for it before sending the body).
    head = (
        f"POST /v1/keys/default/encrypt?mode=single HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {server.token}\r\nContent-Length: 5\r\n"
        "Expect: 100-continue\r\nConnection: close\r\n\r\n"
    ).encode()
    reply = exchange(server, head, then=b"hello")
    assert reply.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 ")


def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    one = (
        f"POST /v1/keys/default/encrypt?mode=single HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {server.token}\r\nContent-Length: 3\r\n\r\nabc"
    ).encode()
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    reply = exchange(server, one + one + last)
    assert reply.count(b"HTTP/1.1 200 ") == 3
    assert reply.index(b"application/octet-stream") < reply.rindex(b"application/json")
