"""Proxies from the environment, through a real forward proxy (tinyproxy, from apt's
``tinyproxy-bin``): absolute-form request targets to an http:// service, a CONNECT tunnel to
an https:// one, NO_PROXY, and ``trust_env=False``. Its log says what it was asked."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from sealflow import AsyncClient, Client
from sealflow.service.client import SealflowError, TransportError
from tests.service.conftest import Server, free_port

BIG = 300_000  # over 64 KiB: the event-loop path, not only the small calls'


@dataclass
class Tinyproxy:
    url: str
    log: Path

    def requests(self) -> list[str]:
        """The request lines it received (``POST http://...``, ``CONNECT host:port``)."""
        lines = self.log.read_text().splitlines()
        return [line.split("): ", 1)[1] for line in lines if "Request (file descriptor" in line]


@contextmanager
def run_tinyproxy(directory: Path, extra: str = "") -> Iterator[Tinyproxy]:
    binary = shutil.which("tinyproxy")
    assert binary is not None, "tinyproxy is missing: apt-get install tinyproxy-bin"
    port = free_port()
    log = directory / "tinyproxy.log"
    conf = directory / "tinyproxy.conf"
    conf.write_text(
        f'Port {port}\nListen 127.0.0.1\nTimeout 60\nLogLevel Info\nLogFile "{log}"\n'
        f"MaxClients 50\nAllow 127.0.0.1\nDisableViaHeader Yes\n{extra}"
    )
    proc = subprocess.Popen([binary, "-d", "-c", str(conf)], stderr=subprocess.DEVNULL)  # noqa: S603
    try:
        deadline = time.monotonic() + 10
        while not (log.exists() and "Accepting connections" in log.read_text()):
            assert proc.poll() is None, "tinyproxy exited"
            assert time.monotonic() < deadline, "tinyproxy did not start"
            time.sleep(0.05)
        yield Tinyproxy(f"http://127.0.0.1:{port}", log)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def tinyproxy(tmp_path: Path) -> Iterator[Tinyproxy]:
    with run_tinyproxy(tmp_path) as proxy:
        yield proxy


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def round_trips(client: Client) -> None:
    for size in (10, BIG):
        data = os.urandom(size)
        assert client.decrypt(client.encrypt("default", data)) == data
    values = [b"a", b"bc", b""]
    assert list(client.decrypt_many(client.encrypt_many("default", values))) == values


async def async_round_trips(client: AsyncClient) -> None:
    for size in (10, BIG):
        data = os.urandom(size)
        assert await client.decrypt(await client.encrypt("default", data)) == data
    sealed = [e async for e in client.encrypt_many("default", [b"x", b"yz"])]
    assert [p async for p in client.decrypt_many(sealed)] == [b"x", b"yz"]


async def async_client_round_trips(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client:
        await async_round_trips(client)


@pytest.mark.parametrize("name", ["HTTP_PROXY", "http_proxy"])
def test_an_http_service_through_the_proxy_gets_absolute_form_targets(
    server: Server, tinyproxy: Tinyproxy, no_proxy_env: pytest.MonkeyPatch, name: str
) -> None:
    no_proxy_env.setenv(name, tinyproxy.url)
    with Client(server.url, server.token) as client:
        round_trips(client)
    asyncio.run(async_client_round_trips(server))
    targets = tinyproxy.requests()
    base = f"http://127.0.0.1:{server.port}/v1/"
    assert f"POST {base}keys/default/encrypt?mode=single HTTP/1.1" in targets
    assert f"POST {base}keys/default/encrypt?mode=records HTTP/1.1" in targets
    assert f"POST {base}decrypt?mode=records HTTP/1.1" in targets
    assert all(t.split()[1].startswith(base) for t in targets)


def test_an_https_service_through_the_proxy_gets_a_connect_tunnel(
    tls_server: Server, tinyproxy: Tinyproxy, no_proxy_env: pytest.MonkeyPatch
) -> None:
    no_proxy_env.setenv("HTTPS_PROXY", tinyproxy.url)
    no_proxy_env.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # for http:// only: unused here
    cert = tls_server.cert
    assert cert is not None
    with Client(tls_server.https_url, tls_server.token, verify=cert) as client:
        round_trips(client)

    async def main() -> None:
        async with AsyncClient(tls_server.https_url, tls_server.token, verify=cert) as client:
            await async_round_trips(client)

    asyncio.run(main())
    targets = tinyproxy.requests()
    assert targets
    assert set(targets) == {f"CONNECT localhost:{tls_server.port} HTTP/1.1"}
    # Both clients' pools opened tunnels: several connections, each one CONNECT.
    assert len(targets) >= 2


def test_no_proxy_and_trust_env_false_go_direct(
    server: Server, tinyproxy: Tinyproxy, no_proxy_env: pytest.MonkeyPatch
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: a proxied call fails
    no_proxy_env.setenv("HTTP_PROXY", dead)
    with Client(server.url, server.token) as client, pytest.raises(TransportError):
        client.encrypt("default", b"x")
    with Client(server.url, server.token, trust_env=False) as client:
        round_trips(client)
    for bypass in ("127.0.0.1", "localhost,127.0.0.1", "*", f"127.0.0.1:{server.port}"):
        no_proxy_env.setenv("no_proxy", bypass)
        with Client(server.url, server.token) as client:
            round_trips(client)
    # A NO_PROXY that names another host leaves this one proxied.
    no_proxy_env.setenv("no_proxy", "example.com")
    no_proxy_env.setenv("HTTP_PROXY", tinyproxy.url)
    with Client(server.url, server.token) as client:
        round_trips(client)
    assert tinyproxy.requests()


def test_proxy_credentials_from_the_url_go_as_basic_authorization(
    server: Server, tls_server: Server, tmp_path: Path, no_proxy_env: pytest.MonkeyPatch
) -> None:
    cert = tls_server.cert
    assert cert is not None
    with run_tinyproxy(tmp_path, "BasicAuth app s3cr3t\n") as proxy:
        no_proxy_env.setenv("HTTP_PROXY", proxy.url)
        with Client(server.url, server.token) as client, pytest.raises(SealflowError) as refused:
            client.encrypt("default", b"x")
        assert refused.value.status == 407
        with_credentials = proxy.url.replace("http://", "http://app:s3cr3t@")
        no_proxy_env.setenv("HTTP_PROXY", with_credentials)
        no_proxy_env.setenv("HTTPS_PROXY", with_credentials)
        with Client(server.url, server.token) as client:
            round_trips(client)
        with Client(tls_server.https_url, tls_server.token, verify=cert) as client:
            round_trips(client)
        assert any(t.startswith("CONNECT ") for t in proxy.requests())


def test_only_http_proxies_are_taken(server: Server, no_proxy_env: pytest.MonkeyPatch) -> None:
    no_proxy_env.setenv("HTTP_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(ValueError, match="only http:// proxies"):
        Client(server.url, server.token)
    Client(server.url, server.token, trust_env=False).close()
