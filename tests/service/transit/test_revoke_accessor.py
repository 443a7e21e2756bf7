"""Issue 25, item 1: a token revoked through ``auth/token/revoke-accessor`` is refused on its
next request, on the fast answer and on the ASGI path, native and Transit, in the process that
revoked it and in another worker process; and the accessor routes are an ``admin``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import hvac
import hvac.exceptions
import pytest

from sealflow.service.server._startup import SERVICE_STALENESS
from tests.service.conftest import Server
from tests.service.server.test_fast_answer import lane_count, warmed
from tests.service.transit.test_differential import sealflow_token

MakeServer = Callable[..., Server]
Call = Callable[[httpx.Client, str], httpx.Response]


def transit_encrypt(c: httpx.Client, secret: str) -> httpx.Response:
    """A small Transit encrypt: a fast answer."""
    return c.post("/v1/transit/encrypt/default", json={"plaintext": "aGk="}, headers=vault(secret))


def single_shot(c: httpx.Client, secret: str) -> httpx.Response:
    """A small native single-shot encrypt: a fast answer."""
    return c.post("/v1/keys/default/encrypt?mode=single", content=b"x", headers=bearer(secret))


def stream(c: httpx.Client, secret: str) -> httpx.Response:
    """A native stream encrypt: the ASGI path."""
    return c.post("/v1/keys/default/encrypt", content=b"x", headers=bearer(secret))


def key_read(c: httpx.Client, secret: str) -> httpx.Response:
    """Transit's key metadata: the ASGI path."""
    return c.get("/v1/transit/keys/default", headers=vault(secret))


def lookup_self(c: httpx.Client, secret: str) -> httpx.Response:
    """Vault's token lookup: the ASGI path."""
    return c.get("/v1/auth/token/lookup-self", headers=vault(secret))


FAST: list[Call] = [transit_encrypt, single_shot]
CALLS: list[Call] = [*FAST, stream, key_read, lookup_self]
# What each answers a token it does not know: Vault's 403 on the Transit side, 401 natively.
REFUSED = [403, 401, 401, 403, 403]


def bearer(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


def vault(secret: str) -> dict[str, str]:
    return {"x-vault-token": secret}


def statuses(c: httpx.Client, secret: str) -> list[int]:
    return [call(c, secret).status_code for call in CALLS]


def revoke(c: httpx.Client, admin: str, accessor: str) -> httpx.Response:
    path = "/v1/auth/token/revoke-accessor"
    return c.post(path, json={"accessor": accessor}, headers=vault(admin))


def test_a_token_revoked_by_accessor_is_refused_at_once_on_every_path(
    make_server: MakeServer,
) -> None:
    srv = warmed(make_server())  # its own: the lane counter counts this test's requests only
    secret, accessor = sealflow_token(srv, "encrypt:default", "decrypt:default")
    with httpx.Client(base_url=srv.url) as c:  # a kept-alive connection
        before = lane_count(srv)
        assert statuses(c, secret) == [200] * len(CALLS)
        assert lane_count(srv) - before == len(FAST)  # those were fast answers, the rest not
        assert revoke(c, srv.token, accessor).status_code == 204
        assert statuses(c, secret) == REFUSED
    with httpx.Client(base_url=srv.url) as fresh:  # and on a new connection
        assert statuses(fresh, secret) == REFUSED
        assert single_shot(fresh, srv.token).status_code == 200  # the admin's token lives on


def worker_of(response: httpx.Response) -> str:
    """The process that answered: its request ids' prefix (``http._request_id``)."""
    return response.headers["x-request-id"].rsplit("-", 1)[0]


def test_a_token_revoked_in_one_worker_is_refused_by_the_other(make_server: MakeServer) -> None:
    """Two workers on one SQLite keystore, and kept-alive connections to each (new connections
    spread over them): the token revoked through one worker is refused by it at once, and by
    the other as a CLI revocation is, at its next read of the keystore once its cache is
    ``SERVICE_STALENESS`` old. Each call after the revocation has a connection of its own (a
    refused request with a body closes its connection, and a new one may reach either worker)."""
    srv = make_server(workers=2)
    secret, accessor = sealflow_token(srv, "encrypt:default", "decrypt:default")
    connections: dict[str, list[httpx.Client]] = {}
    try:
        for _ in range(400):
            c = httpx.Client(base_url=srv.url)
            warm = lookup_self(c, secret)
            assert warm.status_code == 200
            kept = connections.setdefault(worker_of(warm), [])
            if len(kept) < len(CALLS):
                kept.append(c)
            else:
                c.close()
            if len(connections) == 2 and all(len(k) == len(CALLS) for k in connections.values()):
                break
        (a, ones), (b, others) = connections.items()
        assert len(ones) == len(others) == len(CALLS), "new connections all went to one worker"
        for c in (*ones, *others):  # each path warm in each worker, the token good
            for call in CALLS:
                answered = call(c, secret)
                assert answered.status_code == 200
        revoked = revoke(ones[0], srv.token, accessor)
        assert (revoked.status_code, worker_of(revoked)) == (204, a)
        for where, kept in ((a, ones), (b, others)):
            if where == b:
                time.sleep(SERVICE_STALENESS)  # how old the other worker's cache may be
            answers = [call(c, secret) for call, c in zip(CALLS, kept, strict=True)]
            assert [(r.status_code, worker_of(r)) for r in answers] == [
                (status, where) for status in REFUSED
            ]
    finally:
        for kept in connections.values():
            for c in kept:
                c.close()


def test_only_an_admin_looks_up_or_revokes_by_accessor(server: Server) -> None:
    """Vault's default policy grants neither route, not even for the token's own accessor: a
    token looks itself up with lookup-self. sealflow keeps that: ``admin`` only."""
    secret, accessor = sealflow_token(server, "encrypt:*", "decrypt:*", "export:*")
    own = hvac.Client(url=server.url, token=secret, strict_http=True)
    for call in (own.auth.token.lookup_accessor, own.auth.token.revoke_accessor):
        with pytest.raises(hvac.exceptions.Forbidden, match="permission denied"):
            call(accessor)
    assert own.auth.token.lookup_self()["data"]["accessor"] == accessor  # still alive
    manager, _ = sealflow_token(server, "admin")
    admin = hvac.Client(url=server.url, token=manager, strict_http=True)
    data = admin.auth.token.lookup_accessor(accessor)["data"]
    assert (data["accessor"], data["id"], data["display_name"]) == (accessor, "", "diff")
    assert data["policies"] == ["encrypt:*", "decrypt:*", "export:*"]
    assert admin.auth.token.revoke_accessor(accessor).status_code == 204
    assert not own.is_authenticated()
