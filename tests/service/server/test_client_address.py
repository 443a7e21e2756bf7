"""Against real servers: the access-log line names the request by the id its response carried
and the client by its address; behind a real nginx, the client nginx forwarded, but only when
the server trusts nginx's address (``SEALFLOW_TRUSTED_PROXIES``).

The clients connect from 127.0.0.2 (all of 127/8 is loopback) and nginx from 127.0.0.1, so the
log can tell the client from the proxy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.matrix.dns import StubDns
from tests.matrix.proxies import DEPLOY, Proxy, start_nginx
from tests.service.conftest import Server

MakeServer = Callable[..., Server]
ENCRYPT = "/v1/keys/default/encrypt"
CLIENT = "127.0.0.2"
# deploy/nginx.conf with the header it would add to name the client.
FORWARDING = 'proxy_set_header X-Forwarded-For "$proxy_add_x_forwarded_for";\n'


def client(base: str, token: str | None = None) -> httpx.Client:
    """A client whose connections come from CLIENT."""
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    transport = httpx.HTTPTransport(local_address=CLIENT)
    return httpx.Client(base_url=base, headers=headers, transport=transport, timeout=60)


def access(srv: Server, ids: list[str]) -> list[dict[str, Any]]:
    """The access-log lines of these requests, in the order of ids (the log goes out in
    batches every 0.1 s)."""
    deadline = time.monotonic() + 10
    while True:
        lines = {line.get("request_id"): line for line in srv.access()}
        if all(i in lines for i in ids) or time.monotonic() > deadline:
            return [lines[i] for i in ids]
        time.sleep(0.05)


def test_the_log_line_has_the_responses_id_and_the_peer(make_server: MakeServer) -> None:
    srv = make_server()
    given = "order-7.retry_2"
    with client(srv.url, srv.token) as c:
        replies = [
            c.post(ENCRYPT + "?mode=single", content=b"warm"),  # the key's first: the app's
            c.post(ENCRYPT + "?mode=single", content=b"x" * 1024),  # a fast answer
            c.post(ENCRYPT, content=b"x" * 1024, headers={"X-Request-Id": given}),  # a stream
            c.get("/healthz"),
            c.post("/v1/transit/encrypt/default", json={"plaintext": "aGk="},
                   headers={"X-Vault-Token": srv.token}),
            httpx.post(srv.url + ENCRYPT, content=b"x", headers={"X-Request-Id": "a b"}),  # 401
        ]  # fmt: skip
    assert [r.status_code for r in replies] == [200, 200, 200, 200, 200, 401]
    ids = [r.headers["x-request-id"] for r in replies]
    assert ids[2] == given
    assert ids[5] != "a b"
    assert len(set(ids)) == len(ids)
    lines = access(srv, ids)
    assert [line["status"] for line in lines] == [200, 200, 200, 200, 200, 401]
    assert [line["remote_addr"] for line in lines] == [CLIENT] * 5 + ["127.0.0.1"]


@pytest.fixture(scope="module")
def dns() -> Iterator[StubDns]:
    server = StubDns("sealflow")
    try:
        yield server
    finally:
        server.close()


def forwarding_nginx(dns: StubDns, srv: Server) -> Proxy:
    site = (DEPLOY / "nginx.conf").read_text()
    anchor = 'proxy_set_header Connection "";\n'
    assert site.count(anchor) == 1
    site = site.replace(anchor, anchor + "        " + FORWARDING)
    return start_nginx(dns.port, srv.port, site)


@pytest.fixture
def behind_nginx(make_server: MakeServer, dns: StubDns) -> Iterator[Callable[..., Any]]:
    """A server with these settings and an nginx in front of it that sets X-Forwarded-For."""
    proxies: list[Proxy] = []

    def make(**settings: object) -> tuple[Server, Proxy]:
        srv = make_server(**settings)
        proxies.append(forwarding_nginx(dns, srv))
        return srv, proxies[-1]

    yield make
    for proxy in proxies:
        proxy.stop()


def sent(srv: Server, base: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """One encrypt sent to base from CLIENT: its access-log line."""
    with client(base, srv.token) as c:
        reply = c.post(ENCRYPT + "?mode=single", content=b"x" * 1024, headers=headers)
    assert reply.status_code == 200
    (line,) = access(srv, [reply.headers["x-request-id"]])
    return line


def test_behind_a_trusted_nginx_the_log_has_the_client_it_forwarded(
    behind_nginx: Callable[..., Any],
) -> None:
    srv, nginx = behind_nginx(trusted_proxies="127.0.0.1")
    assert sent(srv, nginx.url)["remote_addr"] == CLIENT
    # What the client claims is left of what nginx appends: never read.
    spoofed = {"X-Forwarded-For": "203.0.113.9", "Forwarded": "for=203.0.113.9"}
    assert sent(srv, nginx.url, {"X-Forwarded-For": "203.0.113.9"})["remote_addr"] == CLIENT
    # Straight to the server, from an address it does not trust: the claim is ignored.
    assert sent(srv, srv.url, spoofed)["remote_addr"] == CLIENT
    # The client's id passes through nginx both ways and is the log's.
    with client(nginx.url, srv.token) as c:
        reply = c.get("/healthz", headers={"X-Request-Id": "through-nginx-1"})
    assert reply.headers["x-request-id"] == "through-nginx-1"
    (line,) = access(srv, ["through-nginx-1"])
    assert line["remote_addr"] == CLIENT


def test_behind_an_untrusted_nginx_the_log_has_nginx(behind_nginx: Callable[..., Any]) -> None:
    srv, nginx = behind_nginx()  # no trusted proxies: the default
    assert sent(srv, nginx.url)["remote_addr"] == "127.0.0.1"
    srv, nginx = behind_nginx(trusted_proxies="10.0.0.0/8, ::1")  # others trusted, not nginx
    assert sent(srv, nginx.url)["remote_addr"] == "127.0.0.1"


def test_a_trusted_peer_names_the_client_with_forwarded(make_server: MakeServer) -> None:
    """RFC 7239's header, from a trusted peer (here the test itself on 127.0.0.1); it wins
    over X-Forwarded-For."""
    srv = make_server(trusted_proxies="127.0.0.1")
    with srv.client() as c:
        replies = [
            c.get("/healthz", headers={"Forwarded": 'for="[2001:db8::7]:4711";proto=http'}),
            c.get("/healthz", headers={"Forwarded": "for=192.0.2.5", "X-Forwarded-For": "1.2.3.4"}),
            c.get("/healthz", headers={"Forwarded": "for=unknown"}),
            c.get("/healthz", headers={"X-Forwarded-For": "192.0.2.8, 127.0.0.1"}),
        ]
    lines = access(srv, [r.headers["x-request-id"] for r in replies])
    addresses = ["2001:db8::7", "192.0.2.5", "127.0.0.1", "192.0.2.8"]
    assert [line["remote_addr"] for line in lines] == addresses
