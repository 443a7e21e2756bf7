"""Clients through HAProxy and nginx, each run from the file compose ships (see proxies.py).

HAProxy forwards both directions of an exchange at once: both modes work through it. nginx
stops forwarding a request body once the response header has arrived, so deploy/nginx.conf
removes the header that asks for full duplex: a client that sends it through nginx gets the
default mode (request-then-response), which works with every client at every size.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.service.conftest import Server

from .clients import CLIENTS, Client
from .dns import StubDns
from .exchange import DEFAULT, DUPLEX, ENCRYPT, SIZES, Payload, auth, round_trip
from .proxies import DEPLOY, Proxy, start_nginx

# The clients the matrix runs through each proxy: half-duplex ones with a length and chunked,
# and curl in both modes.
CASES = [
    pytest.param(CLIENTS[name], mode, id=f"{name}-{mode}")
    for name, mode in [
        ("httpx-bytes", DEFAULT),
        ("httpx-generator", DEFAULT),
        ("requests-file", DEFAULT),
        ("curl", DEFAULT),
        ("curl", DUPLEX),  # through nginx: asked for, not given (see the module docstring)
        ("sealflow-client", DEFAULT),
        ("sealflow-client", DUPLEX),  # through nginx: falls back, or is answered by default
    ]
]
BUFFERED = "a client request body is buffered to a temporary file"


@pytest.fixture(params=["haproxy", "nginx"])
def proxy(request: pytest.FixtureRequest) -> Proxy:
    found: Proxy = request.getfixturevalue(request.param)
    return found


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize(("client", "mode"), CASES)
def test_round_trip_through_the_proxy(
    matrix_server: Server,
    payload: Callable[[int], Payload],
    tmp_path: Path,
    proxy: Proxy,
    client: Client,
    mode: str,
    size: int,
) -> None:
    round_trip(client, proxy.url, auth(matrix_server.token, mode), payload(size), tmp_path)


def encrypt(proxy: Proxy, token: str, mode: str, src: Path, dst: Path) -> dict[str, str]:
    reply = CLIENTS["curl"].post(proxy.url + ENCRYPT, auth(token, mode), src, dst)
    assert (reply.status, reply.complete) == (200, True)
    return dict(reply.headers)


def test_haproxy_passes_either_mode_through(
    matrix_server: Server, payload: Callable[[int], Payload], tmp_path: Path, haproxy: Proxy
) -> None:
    src = payload(SIZES["1KiB"]).path
    default = encrypt(haproxy, matrix_server.token, DEFAULT, src, tmp_path / "out")
    assert "sealflow-duplex" not in default
    assert int(default["content-length"]) == (tmp_path / "out").stat().st_size
    duplex = encrypt(haproxy, matrix_server.token, DUPLEX, src, tmp_path / "out")
    assert duplex.get("sealflow-duplex") == "1"


def test_nginx_never_offers_full_duplex(
    matrix_server: Server, payload: Callable[[int], Payload], tmp_path: Path, nginx: Proxy
) -> None:
    # Asked for, it is not honoured: the reply says so by not echoing the header, and it is
    # the default mode's (after the whole body, with its length).
    src = payload(SIZES["1KiB"]).path
    headers = encrypt(nginx, matrix_server.token, DUPLEX, src, tmp_path / "out")
    assert "sealflow-duplex" not in headers
    assert int(headers["content-length"]) == (tmp_path / "out").stat().st_size


def test_nginx_writes_no_request_body_to_its_temp_files(
    matrix_server: Server,
    payload: Callable[[int], Payload],
    tmp_path: Path,
    dns: StubDns,
    nginx: Proxy,
) -> None:
    src = payload(1 << 20).path  # over client_body_buffer_size (16 KiB), which stays in memory
    encrypt(nginx, matrix_server.token, DEFAULT, src, tmp_path / "out")
    assert BUFFERED not in (nginx.folder / "logs" / "error.log").read_text()
    # The check can fail: with request buffering on (nginx's default), the same body of
    # plaintext goes to a file under client_body_temp_path, and nginx logs that it did.
    shipped = (DEPLOY / "nginx.conf").read_text()
    buffering = shipped.replace("proxy_request_buffering off;", "proxy_request_buffering on;")
    assert buffering != shipped
    other = start_nginx(dns.port, matrix_server.port, buffering)
    try:
        encrypt(other, matrix_server.token, DEFAULT, src, tmp_path / "out")
        assert BUFFERED in (other.folder / "logs" / "error.log").read_text()
    finally:
        other.stop()
