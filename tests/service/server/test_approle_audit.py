"""AppRole on the audit trail, and the client address it checks: a login names the role, the
token it made and the client's address; a refused login is an auth_failure; role and secret-id
changes are change records; a secret id is never written. The address is the peer's, or the
client a trusted proxy names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.service.audit.records import files_of, lines
from tests.service.conftest import Server, start_server


def test_logins_and_changes_are_recorded_without_the_secret_id(tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    srv = start_server(tmp_path / "data", audit_file=audit)
    try:
        admin = {"X-Vault-Token": srv.token}
        with httpx.Client(base_url=srv.url + "/v1/auth/approle", timeout=30) as c:
            assert c.post("/role/web", json={"token_policies": "encrypt:default"}, headers=admin)
            role_id = c.get("/role/web/role-id", headers=admin).json()["data"]["role_id"]
            made = c.post("/role/web/secret-id", json={}, headers=admin).json()["data"]
            secret = made["secret_id"]
            good = c.post("/login", json={"role_id": role_id, "secret_id": secret})
            assert good.status_code == 200, good.text
            accessor = good.json()["auth"]["accessor"]
            bad = c.post("/login", json={"role_id": role_id, "secret_id": secret + "x"})
            assert (bad.status_code, bad.json()) == (400, {"errors": ["invalid role or secret ID"]})
            gone = c.post("/role/web/secret-id/destroy", json={"secret_id": secret}, headers=admin)
            assert gone.status_code == 204
            assert c.delete("/role/web", headers=admin).status_code == 204
    finally:
        srv.stop()
    records = [line.record for line in lines(files_of(audit))]  # each checked by the schema
    text = audit.read_text()
    assert secret not in text
    assert role_id not in text
    logins = [r for r in records if r.get("operation") == "login"]
    assert [(r["type"], r["status"]) for r in logins] == [("request", 200), ("auth_failure", 400)]
    ok, failed = logins
    assert (ok["role"], ok["accessor"], ok["remote_addr"]) == ("web", accessor, "127.0.0.1")
    assert (failed["error"], failed["remote_addr"]) == ("login_refused", "127.0.0.1")
    changes = [(r["operation"], r.get("role")) for r in records if r["type"] == "change"]
    assert changes == [
        ("approle_role_create", "web"),
        ("approle_secret_id_create", "web"),
        ("token_create", "web"),
        ("approle_secret_id_destroy", "web"),
        ("approle_role_delete", "web"),
    ]
    made_token = next(r for r in records if r.get("operation") == "token_create")
    assert (made_token["target_accessor"], made_token["auth_method"]) == (accessor, "approle")
    secret_ids = {r.get("secret_id_accessor") for r in records if r["type"] == "change"}
    assert made["secret_id_accessor"] in secret_ids


def test_the_source_address_is_the_forwarded_client_only_from_a_trusted_proxy(
    make_server: Callable[..., Server],
) -> None:
    """A secret id bound to 10.0.0.0/8: a login through a trusted proxy (the loopback peer)
    naming a client there passes; the same header from an untrusted peer does not count."""
    for trusted, status in (("127.0.0.1", 200), ("", 400)):
        srv = make_server(trusted_proxies=trusted) if trusted else make_server()
        admin = {"X-Vault-Token": srv.token}
        with httpx.Client(base_url=srv.url + "/v1/auth/approle", timeout=30) as c:
            body = {"token_policies": "encrypt:default", "secret_id_bound_cidrs": "10.0.0.0/8"}
            assert c.post("/role/edge", json=body, headers=admin).status_code == 204
            role_id = c.get("/role/edge/role-id", headers=admin).json()["data"]["role_id"]
            made = c.post("/role/edge/secret-id", json={}, headers=admin).json()["data"]
            login = {"role_id": role_id, "secret_id": made["secret_id"]}
            r = c.post("/login", json=login, headers={"X-Forwarded-For": "10.1.2.3"})
        assert r.status_code == status, (trusted, r.text)
        if status == 400:
            assert r.json() == {
                "errors": [
                    'source address "127.0.0.1" unauthorized by CIDR restrictions on the role'
                ]
            }
