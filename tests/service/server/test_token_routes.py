"""Issue 26, item 2, natively: ``/v1/tokens`` over a real server with httpx. Create (the secret
once), look up, renew and revoke oneself, list without secrets, revoke by accessor with the
children and not the orphans; the scope-subset rule and separation of duties (an ``admin``-only
token mints no data scope, on either API); refusals decided from the head, before the body; and
every creation, renewal and revocation on the audit trail without a secret."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from sealflow.service.server._token_rules import covers
from tests.service.conftest import Server, start_server
from tests.service.server.test_audit_trail import records, verify


def create(c: httpx.Client, **body: Any) -> httpx.Response:
    return c.post("/v1/tokens", json=body)


def made(c: httpx.Client, *scopes: str, **body: Any) -> dict[str, Any]:
    answer = create(c, scopes=list(scopes), **body)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


@pytest.mark.parametrize(
    ("held", "wanted", "granted"),
    [
        ("encrypt:orders*", "encrypt:orders-eu", True),
        ("encrypt:orders*", "encrypt:orders-eu*", True),
        ("encrypt:*", "encrypt:anything?", True),
        ("encrypt:orders", "encrypt:orders", True),
        ("encrypt:orders?", "encrypt:orders*", False),  # a wider glob than the parent's
        ("encrypt:orders", "encrypt:orders*", False),
        ("encrypt:o*s", "encrypt:orders*", False),  # not a plain prefix: refused, the safe side
        ("encrypt:*", "decrypt:orders", False),
        ("admin", "encrypt:orders", False),
        ("admin", "admin", True),
        ("encrypt:*", "admin", False),
        ("export:*", "export:orders", True),
    ],
)
def test_which_scope_covers_which(held: str, wanted: str, granted: bool) -> None:
    assert covers(held, wanted) is granted


def test_create_look_up_renew_and_revoke_oneself(server: Server) -> None:
    with server.client() as root:
        body = made(root, "encrypt:orders", label="app", ttl="1m", explicit_max_ttl=90)
        secret, accessor = body["token"], body["accessor"]
        assert (body["creation_ttl"], body["explicit_max_ttl"], body["renewable"]) == (60, 90, True)
        assert (body["parent"] is not None, body["orphan"], body["warnings"]) == (True, False, [])
        listed = root.get("/v1/tokens")
        assert listed.status_code == 200
        assert accessor in {t["accessor"] for t in listed.json()["tokens"]}
        assert secret not in listed.text
    with server.client(secret) as app:
        me = app.get("/v1/tokens/self").json()
        assert (me["accessor"], me["label"], me["scopes"]) == (accessor, "app", ["encrypt:orders"])
        assert "token" not in me
        renewed = app.post("/v1/tokens/self/renew", json={"increment": "5m"})
        assert renewed.status_code == 200
        (warning,) = renewed.json()["warnings"]
        assert warning.startswith('TTL of "5m" exceeded the effective max_ttl of "1m')
        assert 60 < renewed.json()["ttl"] <= 90
        bad = app.post("/v1/tokens/self/renew", json={"increment": "soon"})
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, "bad_request")
        assert app.delete("/v1/tokens/self").status_code == 204
        assert app.get("/v1/tokens/self").status_code == 401


def test_a_token_that_never_expires_is_not_renewable(server: Server) -> None:
    with server.client() as root:
        answer = root.post("/v1/tokens/self/renew", json={})
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "not_renewable")


def test_revoking_by_accessor_takes_the_children_but_not_the_orphans(server: Server) -> None:
    with server.client() as root:
        parent = made(root, "admin", "encrypt:orders*")
    with server.client(parent["token"]) as c:
        child = made(c, "encrypt:orders-eu")
        orphan = made(c, "encrypt:orders-eu", orphan=True)
        assert (child["parent"], child["orphan"]) == (parent["accessor"], False)
        assert orphan["orphan"] is True
    with server.client() as root:
        assert root.delete(f"/v1/tokens/{parent['accessor']}").status_code == 204
        tokens = {t["accessor"]: t for t in root.get("/v1/tokens").json()["tokens"]}
        assert tokens[child["accessor"]]["revoked"] is True
        assert tokens[orphan["accessor"]]["revoked"] is False
        unknown = root.delete("/v1/tokens/tok_0123456789abcdef")
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "token_not_found")
    for gone, status in ((parent, 401), (child, 401), (orphan, 200)):
        with server.client(gone["token"]) as c:
            assert c.get("/v1/tokens/self").status_code == status


def test_a_token_grants_only_scopes_it_holds(server: Server) -> None:
    with server.client() as root:
        ops = made(root, "admin", "encrypt:orders*")
        admin_only = made(root, "admin")
    with server.client(ops["token"]) as c:
        assert create(c, scopes=["encrypt:orders-eu"]).status_code == 201
        for wider in (["decrypt:orders"], ["encrypt:*"], ["encrypt:order*"], ["export:orders"]):
            refused = create(c, scopes=wider)
            assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
    # Separation of duties: an admin-only token manages tokens, and mints no data scope, not
    # even for itself, on either API.
    with server.client(admin_only["token"]) as c:
        assert create(c, scopes=["admin"]).status_code == 201
        assert create(c, scopes=["admin", "encrypt:orders"]).status_code == 403
        assert create(c, scopes=["decrypt:*"]).status_code == 403
        vault = {"x-vault-token": admin_only["token"]}
        refused = c.post("/v1/auth/token/create", json={"policies": ["encrypt:*"]}, headers=vault)
        assert refused.status_code == 400
        assert refused.json() == {"errors": ["child policies must be subset of parent"]}


def test_a_child_never_outlives_its_parent(server: Server) -> None:
    with server.client() as root:
        parent = made(root, "admin", "encrypt:orders", ttl="2m")
    with server.client(parent["token"]) as c:
        child = made(c, "encrypt:orders", ttl="1h")
        assert child["expire_time"] <= parent["expire_time"]
        (warning,) = child["warnings"]
        assert warning.startswith('TTL of "1h" exceeded the effective max_ttl of')
        orphan = made(c, "encrypt:orders", ttl="1h", orphan=True)
        assert orphan["creation_ttl"] == 3600


BAD: list[tuple[dict[str, Any], int, str]] = [
    ({"scopes": ["encrypt:orders"], "ttl": "an hour"}, 400, "bad_request"),
    ({"scopes": ["encrypt:orders"], "num_uses": -1}, 400, "bad_request"),
    ({"scopes": []}, 400, "bad_request"),
    ({"scopes": ["encrypt:orders"], "policy": "x"}, 400, "bad_request"),
    ({"scopes": ["no such scope"]}, 403, "forbidden"),  # held by nobody
]


@pytest.mark.parametrize(("body", "status", "code"), BAD)
def test_bad_requests_are_refused(
    server: Server, body: dict[str, Any], status: int, code: str
) -> None:
    with server.client() as root:
        answer = create(root, **body)
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code)


def head_only(server: Server, request: bytes) -> bytes:
    """A request whose head declares a 60000-byte body of which one byte is sent: a server that
    waited for the body would answer 408 after its receive deadline, not this."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(request + b"Content-Length: 60000\r\n\r\n{")
        reply = b""
        while chunk := sock.recv(65536):  # the server closes the connection after answering
            reply += chunk
    return reply


@pytest.mark.parametrize(
    ("path", "auth", "status"),
    [
        (b"/v1/tokens", b"", 401),
        (b"/v1/tokens", b"Authorization: Bearer %s\r\n", 403),
        (b"/v1/auth/token/create", b"", 403),
        (b"/v1/auth/token/create", b"X-Vault-Token: %s\r\n", 403),
        (b"/v1/auth/token/revoke", b"X-Vault-Token: %s\r\n", 403),
        (b"/v1/auth/token/renew-accessor", b"X-Vault-Token: %s\r\n", 403),
    ],
)
def test_refusals_come_from_the_head(server: Server, path: bytes, auth: bytes, status: int) -> None:
    with server.client() as root:
        plain = made(root, "encrypt:orders")["token"].encode()
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" % path
    reply = head_only(server, head + (auth % plain if auth else b""))
    assert reply.startswith(b"HTTP/1.1 %d " % status), reply[:200]
    assert b"connection: close" in reply.lower()


def test_token_changes_are_on_record_without_secrets(tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    srv = start_server(tmp_path / "data", audit_file=audit)
    try:
        with srv.client() as root:
            parent = made(root, "admin", "encrypt:orders", label="ops")
        with srv.client(parent["token"]) as c:
            child = made(c, "encrypt:orders", ttl="10m", label="app")
        vault = {"x-vault-token": child["token"]}
        as_parent = {"x-vault-token": parent["token"]}
        with httpx.Client(base_url=srv.url) as c:
            assert c.post("/v1/auth/token/renew-self", json={}, headers=vault).status_code == 200
            made_orphan = c.post(
                "/v1/auth/token/create-orphan",
                json={"policies": ["encrypt:orders"], "display_name": "batch"},
                headers=as_parent,
            )
            assert made_orphan.status_code == 200
            orphan = made_orphan.json()["auth"]
        with srv.client() as root:
            assert root.delete(f"/v1/tokens/{parent['accessor']}").status_code == 204
    finally:
        srv.stop()
    lines = records(audit)
    changes = [
        (r["operation"], r.get("accessor"), r["target_accessor"], r.get("revoked_with"))
        for r in lines
        if r["type"] == "change" and r.get("origin") == "http"
    ]
    root_id = parent["parent"]
    assert changes == [
        ("token_create", root_id, parent["accessor"], None),
        ("token_create", parent["accessor"], child["accessor"], None),
        ("token_renew", child["accessor"], child["accessor"], None),
        ("token_create", parent["accessor"], orphan["accessor"], None),
        ("token_revoke", root_id, parent["accessor"], None),
        ("token_revoke", root_id, child["accessor"], parent["accessor"]),
    ]
    create_record = next(r for r in lines if r.get("target_accessor") == child["accessor"])
    assert (create_record["parent"], create_record["orphan"]) == (parent["accessor"], False)
    requests = [
        (r["operation"], r["status"], r.get("target_accessor"))
        for r in lines
        if r["type"] == "request"
    ]
    assert requests == [
        ("token_create", 201, parent["accessor"]),
        ("token_create", 201, child["accessor"]),
        ("token_renew", 200, None),
        ("token_create", 200, orphan["accessor"]),
        ("token_revoke", 204, parent["accessor"]),
    ]
    text = audit.read_text()
    for secret in (parent["token"], child["token"], orphan["client_token"], srv.token):
        assert secret not in text
    assert json.dumps(child["token"]) not in text
    done = verify(audit, srv, "--strict")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_child_is_refused_on_every_path_once_its_parent_is_revoked(server: Server) -> None:
    """The fast answer (a small single-shot encrypt, a small Transit encrypt) and the ASGI path
    alike: the revocation of the parent's tree drops the token cache as any revocation does."""
    with server.client() as root:
        parent = made(root, "admin", "encrypt:default")
    with server.client(parent["token"]) as c:
        child = made(c, "encrypt:default")["token"]

    def statuses(c: httpx.Client) -> list[int]:
        single = c.post(
            "/v1/keys/default/encrypt?mode=single",
            content=b"x",
            headers={"authorization": f"Bearer {child}"},
        )
        transit = c.post(
            "/v1/transit/encrypt/default",
            json={"plaintext": "aGk="},
            headers={"x-vault-token": child},
        )
        own = c.get("/v1/tokens/self", headers={"authorization": f"Bearer {child}"})
        return [single.status_code, transit.status_code, own.status_code]

    with httpx.Client(base_url=server.url) as c:  # one kept-alive connection throughout
        assert statuses(c) == [200, 200, 200]
        revoked = c.post("/v1/auth/token/revoke-self", headers={"x-vault-token": parent["token"]})
        assert revoked.status_code == 204
        assert statuses(c) == [401, 403, 401]
