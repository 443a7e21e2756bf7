"""Revocation has a bound during a partition (issue 24, item 2).

A real ``sealflow serve`` whose PostgreSQL keystore is reached through a TCP proxy the test
cuts (tests/tcp_proxy.py), and a second store connected directly, as another replica would be,
that revokes a token while the first is cut off. Before this, the cut-off replica kept
accepting the revoked token for the whole partition; now, past ``SEALFLOW_KEYSTORE_MAX_CACHE_AGE``
without hearing from the database, it refuses every request with a token (503
``keystore_unavailable``, in Vault's shape on Transit) while its probes answer, unless the
operator chose ``SEALFLOW_KEYSTORE_STALE_CACHE=serve``. No timing is asserted: each state is
polled for, under one generous deadline.
"""

from __future__ import annotations

import base64
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import httpx
import pydantic
import pytest

from sealflow.service.config import Settings
from sealflow.service.keystore import PostgresKeyStore
from tests.postgres import Cluster
from tests.service.conftest import Server
from tests.service.server.test_replicas import start_replicas
from tests.tcp_proxy import TcpProxy

DEADLINE = 60.0  # seconds any one state may take to come, far beyond what it needs
ENCRYPT = "/v1/keys/default/encrypt?mode=single"


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def native(srv: Server, token: str) -> httpx.Response:
    with srv.client(token) as client:
        return client.post(ENCRYPT, content=b"hi")


def vault(srv: Server, token: str) -> httpx.Response:
    body = {"plaintext": "aGk="}
    headers = {"X-Vault-Token": token}
    return httpx.post(srv.url + "/v1/transit/encrypt/default", json=body, headers=headers)


def get(srv: Server, path: str) -> httpx.Response:
    return httpx.get(srv.url + path, timeout=60)


def head_only(srv: Server, token: str) -> bytes:
    """The answer to an encrypt whose head declares a body that is never sent."""
    head = (
        f"POST {ENCRYPT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        "Content-Length: 100\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
        sock.sendall(head)
        return sock.recv(65536)


@contextmanager
def behind_proxy(
    postgres: Cluster, folder: Path, stale_cache: str
) -> Iterator[tuple[Server, TcpProxy, PostgresKeyStore]]:
    """A replica on a new database through a proxy (max cache age 2 s), and a store on the same
    database connected directly."""
    url = postgres.new_database()
    master = base64.b64encode(os.urandom(32)).decode()
    with TcpProxy("127.0.0.1", postgres.port) as proxy:
        proxied = url.replace(f":{postgres.port}/", f":{proxy.port}/")
        (srv,) = start_replicas(
            folder, proxied, master, n=1, keystore_max_cache_age=2, keystore_stale_cache=stale_cache
        )
        try:
            assert proxy.accepted > 0  # the replica's keystore does go through the proxy
            direct = PostgresKeyStore(url, base64.b64decode(master), watch=False)
            with closing(direct):
                yield srv, proxy, direct
        finally:
            srv.stop()


def test_a_cut_off_replica_refuses_tokens_past_the_max_cache_age_then_recovers(
    postgres: Cluster, tmp_path: Path
) -> None:
    with behind_proxy(postgres, tmp_path, "refuse") as (srv, proxy, direct):
        doomed_info, doomed = direct.create_token(["encrypt:*"], "doomed")
        _, live = direct.create_token(["encrypt:*"], "live")
        until(lambda: native(srv, doomed).status_code == 200, "the replica knows the token")
        assert native(srv, live).status_code == 200
        assert vault(srv, doomed).status_code == 200

        proxy.cut()
        direct.revoke_token(doomed_info.id)  # committed: the database says revoked
        until(lambda: native(srv, doomed).status_code == 503, "the revoked token refused")

        refused = native(srv, doomed)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "keystore_unavailable"
        # Any token: none can be checked (the live one, the root token on an admin route).
        assert native(srv, live).json()["error"]["code"] == "keystore_unavailable"
        with srv.client() as client:
            assert client.get("/v1/keys").status_code == 503
        # Transit, in Vault's shape.
        transit = vault(srv, doomed)
        assert transit.status_code == 503
        assert list(transit.json()) == ["errors"]
        assert "keystore" in transit.json()["errors"][0]
        assert vault(srv, live).status_code == 503
        # Decided from the head: answered though the body it declares never comes.
        assert head_only(srv, doomed).startswith(b"HTTP/1.1 503 ")
        # The probes answer; readiness says why it is out.
        assert get(srv, "/healthz").status_code == 200
        ready = get(srv, "/readyz")
        assert ready.status_code == 503
        assert ready.json()["status"] == "keystore_unreachable"
        assert get(srv, "/v1/sys/health").status_code == 200
        metrics = get(srv, "/metrics").text
        line = 'sealflow_auth_failures_total{reason="keystore_stale"} '
        assert float(metrics.split(line, 1)[1].split()[0]) >= 6

        proxy.restore()
        seen: set[int] = set()

        def revoked() -> bool:
            status = native(srv, doomed).status_code
            seen.add(status)
            return status == 401

        until(revoked, "the revocation heard once the database is back")
        assert seen <= {503, 401}  # refused or known revoked: never served again
        assert vault(srv, doomed).status_code == 403
        assert native(srv, live).status_code == 200
        assert vault(srv, live).status_code == 200
        until(lambda: get(srv, "/readyz").status_code == 200, "ready again")


def test_with_serve_a_cut_off_replica_keeps_serving_a_revoked_token(
    postgres: Cluster, tmp_path: Path
) -> None:
    """The trade-off an operator may choose: available through an outage, revocation unbounded
    until the database is back (docs/OPERATIONS.md)."""
    with behind_proxy(postgres, tmp_path, "serve") as (srv, proxy, direct):
        doomed_info, doomed = direct.create_token(["encrypt:*"], "doomed")
        until(lambda: native(srv, doomed).status_code == 200, "the replica knows the token")
        assert vault(srv, doomed).status_code == 200

        proxy.cut()
        direct.revoke_token(doomed_info.id)
        until(lambda: get(srv, "/readyz").status_code == 503, "staleness reported")
        assert get(srv, "/readyz").json()["status"] == "keystore_unreachable"
        assert native(srv, doomed).status_code == 200
        assert vault(srv, doomed).status_code == 200

        proxy.restore()
        until(lambda: native(srv, doomed).status_code == 401, "the revocation heard")
        assert vault(srv, doomed).status_code == 403


def test_the_max_cache_age_has_a_floor_and_stale_cache_two_values() -> None:
    assert Settings().keystore_stale_cache == "refuse"
    assert Settings(keystore_max_cache_age=2).keystore_max_cache_age == 2
    assert Settings(keystore_stale_cache="serve").keystore_stale_cache == "serve"
    with pytest.raises(pydantic.ValidationError, match="keystore_max_cache_age"):
        Settings(keystore_max_cache_age=1.9)
    with pytest.raises(pydantic.ValidationError, match="keystore_stale_cache"):
        Settings(keystore_stale_cache="sometimes")
    # Polling no more often than the cache may age would make a replica stale between polls.
    with pytest.raises(pydantic.ValidationError, match="poll-interval must be shorter"):
        Settings(keystore_max_cache_age=2, keystore_poll_interval=2)
