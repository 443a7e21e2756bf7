"""Logins (AppRole, cert) hold at most an eighth of the concurrency slots, together
(``Front.login_limit``): a login is a counted route a client without a token reaches, so
clients trickling login bodies must not take the slots clients with a token need."""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx

LOGIN = "/v1/auth/approle/login"
CERT_LOGIN = "/v1/auth/cert/login"


def test_trickled_logins_leave_the_slots_to_tokens(make_server: Any) -> None:
    srv = make_server(max_concurrent_requests=8)  # a login may hold one slot
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as held:
        # A login whose body never ends: it holds its slot until the receive timeout.
        held.sendall(
            b"POST " + LOGIN.encode() + b" HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            b'{"role_id": "'
        )
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            refused = until(
                lambda: client.post(LOGIN, json={"role_id": "r", "secret_id": "s"}), 503
            )
            assert refused.json() == {"errors": ["too many concurrent requests; retry later"]}
            # A client with a token still gets a slot.
            sealed = client.post(
                "/v1/keys/default/encrypt",
                content=b"hello",
                headers={"authorization": f"Bearer {srv.token}"},
            )
            assert sealed.status_code == 200
    # The held login gone, its slot is free again: the next one is answered on its merits.
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        answered = until(lambda: client.post(LOGIN, json={"role_id": "r", "secret_id": "s"}), 400)
        assert answered.json() == {"errors": ["invalid role or secret ID"]}


def test_cert_logins_share_the_login_slots(make_server: Any) -> None:
    srv = make_server(max_concurrent_requests=8)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as held:
        held.sendall(
            b"POST " + CERT_LOGIN.encode() + b" HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            b'{"name": "'
        )
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            until(lambda: client.post(LOGIN, json={"role_id": "r", "secret_id": "s"}), 503)
            assert client.post(CERT_LOGIN, json={}).status_code == 503
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        # Plain HTTP: no connection certificate, so Vault's 400.
        answered = until(lambda: client.post(CERT_LOGIN, json={}), 400)
        assert answered.json() == {"errors": ["no client certificate found"]}


def until(call: Any, status: int) -> httpx.Response:
    """``call()`` again until it answers ``status`` (the server sees the held request, or its
    end, a moment after the socket's bytes are sent)."""
    deadline = time.monotonic() + 60  # a bound against a hang, not a timing check
    while True:
        response: httpx.Response = call()
        if response.status_code == status or time.monotonic() > deadline:
            assert response.status_code == status, response.text
            return response
        time.sleep(0.05)
