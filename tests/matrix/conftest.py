"""Session fixtures of the matrix: one server, its inputs, the stub DNS and the proxies."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.service.conftest import Server, start_server

from .dns import StubDns
from .exchange import Payload, make_payload
from .proxies import Proxy, start_haproxy, start_nginx


@pytest.fixture(scope="session")
def matrix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("matrix") / "data")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def payload(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Payload]:
    """The input of a size, made on first use and kept for the session."""
    folder = tmp_path_factory.mktemp("payloads")
    made: dict[int, Payload] = {}

    def get(size: int) -> Payload:
        if size not in made:
            made[size] = make_payload(folder, size)
        return made[size]

    return get


@pytest.fixture(scope="session")
def dns() -> Iterator[StubDns]:
    server = StubDns("sealflow")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def haproxy(matrix_server: Server, dns: StubDns) -> Iterator[Proxy]:
    proxy = start_haproxy(dns.port, matrix_server.port)
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="session")
def nginx(matrix_server: Server, dns: StubDns) -> Iterator[Proxy]:
    proxy = start_nginx(dns.port, matrix_server.port)
    try:
        yield proxy
    finally:
        proxy.stop()
