"""AppRole with hvac 2.4, unchanged, against a real OpenBao dev server and a real sealflow:
one script, the same outcomes (role, role id, secret id, login, the token encrypting on
Transit, a secret id used up, one refused by its CIDR bound, destroy, list, delete)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import hvac
import hvac.exceptions
import pytest
import requests
from requests.adapters import HTTPAdapter

from tests.service.conftest import Server
from tests.service.server.test_auth import new_token
from tests.service.transit.conftest import Bao, unique

INVALID = "invalid role or secret ID"
HOUR = "1h"  # as Vault users write a duration


class _From(HTTPAdapter):
    """Connections from one local address: the client's source address, as the server sees it."""

    def __init__(self, address: str) -> None:
        self._address = address
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["source_address"] = (self._address, 0)
        super().init_poolmanager(*args, **kwargs)


def _client(url: str, token: str | None = None, source: str = "127.0.0.1") -> hvac.Client:
    session = requests.Session()
    session.mount("http://", _From(source))
    return hvac.Client(url=url, token=token, session=session, strict_http=True)


@dataclass
class Target:
    name: str
    url: str
    admin: hvac.Client

    def anonymous(self, source: str = "127.0.0.1") -> hvac.Client:
        return _client(self.url, source=source)


@pytest.fixture(scope="module")
def bao_approle(bao: Bao) -> Bao:
    admin = hvac.Client(url=bao.url, token=bao.token)
    if "approle/" not in admin.sys.list_auth_methods()["data"]:
        admin.sys.enable_auth_method("approle")
    return bao


@pytest.fixture(params=["openbao", "sealflow"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "openbao":
        bao: Bao = request.getfixturevalue("bao_approle")
        yield Target("openbao", bao.url, _client(bao.url, bao.token))
    else:
        server: Server = request.getfixturevalue("server")
        yield Target("sealflow", server.url, _client(server.url, server.token))


def _key_and_policy(target: Target) -> str:
    """A Transit key, and on OpenBao a policy named as sealflow's scope that allows encrypting
    with it: the same role definition then works on both."""
    key = unique("ar")
    target.admin.secrets.transit.create_key(key)
    if target.name == "openbao":
        target.admin.sys.create_or_update_policy(
            f"encrypt:{key}", f'path "transit/encrypt/{key}" {{ capabilities = ["update"] }}'
        )
    return key


def _scopes(policies: list[str]) -> list[str]:
    return [p for p in policies if p != "default"]  # OpenBao adds its default policy


def test_approle_round_trip(target: Target) -> None:
    admin, key, role = target.admin, _key_and_policy(target), unique("role")
    admin.auth.approle.create_or_update_approle(
        role, token_policies=[f"encrypt:{key}"], secret_id_num_uses=2, token_ttl=HOUR
    )
    data = admin.auth.approle.read_role(role)["data"]
    assert data["token_policies"] == [f"encrypt:{key}"]
    assert (data["secret_id_num_uses"], data["token_ttl"], data["bind_secret_id"]) == (
        2,
        3600,
        True,
    )
    assert set(data) >= {"secret_id_bound_cidrs", "secret_id_ttl", "token_max_ttl", "token_type"}
    assert role in admin.auth.approle.list_roles()["data"]["keys"]

    role_id = admin.auth.approle.read_role_id(role)["data"]["role_id"]
    made = admin.auth.approle.generate_secret_id(role, metadata={"team": "orders"})["data"]
    assert set(made) == {"secret_id", "secret_id_accessor", "secret_id_num_uses", "secret_id_ttl"}
    assert (made["secret_id_num_uses"], made["secret_id_ttl"]) == (2, 0)
    looked = admin.auth.approle.read_secret_id(role, made["secret_id"])["data"]
    assert looked["secret_id_accessor"] == made["secret_id_accessor"]
    assert (looked["secret_id_num_uses"], looked["metadata"]) == (2, {"team": "orders"})
    assert made["secret_id"] not in str(looked)

    app = target.anonymous()
    auth = app.auth.approle.login(role_id, made["secret_id"], use_token=False)["auth"]
    assert _scopes(auth["policies"]) == [f"encrypt:{key}"]
    assert auth["metadata"] == {"role_name": role, "team": "orders"}
    assert (auth["orphan"], auth["lease_duration"], auth["token_type"]) == (True, 3600, "service")
    worker = _client(target.url, auth["client_token"])
    plaintext = base64.b64encode(b"approle").decode()
    sealed = worker.secrets.transit.encrypt_data(key, plaintext)["data"]["ciphertext"]
    assert sealed.startswith("vault:v1:")
    assert _scopes(worker.auth.token.lookup_self()["data"]["policies"]) == [f"encrypt:{key}"]

    app.auth.approle.login(role_id, made["secret_id"], use_token=False)  # its second and last use
    with pytest.raises(hvac.exceptions.InvalidRequest, match=INVALID):
        app.auth.approle.login(role_id, made["secret_id"], use_token=False)
    with pytest.raises(hvac.exceptions.InvalidRequest, match=INVALID):
        app.auth.approle.login("not-" + role_id, made["secret_id"], use_token=False)


def test_a_secret_id_bound_to_another_address_is_refused(target: Target) -> None:
    admin, key, role = target.admin, _key_and_policy(target), unique("role")
    admin.auth.approle.create_or_update_approle(role, token_policies=[f"encrypt:{key}"])
    role_id = admin.auth.approle.read_role_id(role)["data"]["role_id"]
    secret = admin.auth.approle.generate_secret_id(role, cidr_list=["127.0.0.2/32"])["data"]
    refused = 'source address "127.0.0.1" unauthorized through CIDR restrictions on the secret ID'
    with pytest.raises(hvac.exceptions.InvalidRequest, match=refused):
        target.anonymous("127.0.0.1").auth.approle.login(role_id, secret["secret_id"])
    auth = target.anonymous("127.0.0.2").auth.approle.login(role_id, secret["secret_id"])
    assert auth["auth"]["metadata"]["role_name"] == role


def test_role_id_destroy_and_delete(target: Target) -> None:
    admin, key, role = target.admin, _key_and_policy(target), unique("role")
    admin.auth.approle.create_or_update_approle(role, token_policies=[f"encrypt:{key}"])
    custom = unique("custom-role-id")
    admin.auth.approle.update_role_id(role, custom)
    assert admin.auth.approle.read_role_id(role)["data"]["role_id"] == custom
    secret = admin.auth.approle.generate_secret_id(role)["data"]["secret_id"]
    assert admin.auth.approle.destroy_secret_id(role, secret).status_code == 204
    assert admin.auth.approle.read_secret_id(role, secret).status_code == 204  # gone
    with pytest.raises(hvac.exceptions.InvalidRequest, match=INVALID):
        target.anonymous().auth.approle.login(custom, secret)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="missing secret_id"):
        target.anonymous().auth.approle.login(custom, "")
    admin.auth.approle.delete_role(role)
    with pytest.raises(hvac.exceptions.InvalidPath):
        admin.auth.approle.read_role(role)
    with pytest.raises(hvac.exceptions.InvalidPath, match=f'role "{role}" does not exist'):
        admin.auth.approle.generate_secret_id(role)


def test_secret_ids_by_accessor(target: Target) -> None:
    """LIST role/:name/secret-id shows accessors; secret-id-accessor/lookup and /destroy take
    one, never the secret."""
    admin, key, role = target.admin, _key_and_policy(target), unique("role")
    approle = admin.auth.approle
    approle.create_or_update_approle(role, token_policies=[f"encrypt:{key}"])
    with pytest.raises(hvac.exceptions.InvalidPath):
        approle.list_secret_id_accessors(role)  # none yet: Vault's empty 404
    made = [approle.generate_secret_id(role)["data"] for _ in range(2)]
    accessors = approle.list_secret_id_accessors(role)["data"]["keys"]
    assert sorted(accessors) == sorted(m["secret_id_accessor"] for m in made)
    assert not {m["secret_id"] for m in made} & set(accessors)

    looked = approle.read_secret_id_accessor(role, made[0]["secret_id_accessor"])["data"]
    assert looked == approle.read_secret_id(role, made[0]["secret_id"])["data"]
    unknown = r'failed to find accessor entry for secret_id_accessor: \\?"nope'
    with pytest.raises(hvac.exceptions.InvalidPath, match=unknown):
        approle.read_secret_id_accessor(role, "nope")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="missing secret_id_accessor"):
        admin.adapter.post(f"/v1/auth/approle/role/{role}/secret-id-accessor/lookup", json={})
    with pytest.raises(hvac.exceptions.InvalidRequest, match=f'role "nope-{role}" does not'):
        approle.list_secret_id_accessors("nope-" + role)

    gone = approle.destroy_secret_id_accessor(role, made[0]["secret_id_accessor"])
    assert gone.status_code == 204
    assert approle.list_secret_id_accessors(role)["data"]["keys"] == [made[1]["secret_id_accessor"]]
    role_id = approle.read_role_id(role)["data"]["role_id"]
    with pytest.raises(hvac.exceptions.InvalidRequest, match=INVALID):
        target.anonymous().auth.approle.login(role_id, made[0]["secret_id"])
    assert target.anonymous().auth.approle.login(role_id, made[1]["secret_id"])["auth"]


def test_unknown_accessor_destroy_is_a_400_on_sealflow(server: Server) -> None:
    """OpenBao answers it with a 500; sealflow with a 400 and the same words."""
    admin = _client(server.url, server.token)
    role = unique("role")
    admin.auth.approle.create_or_update_approle(role, token_policies=["encrypt:orders"])
    with pytest.raises(hvac.exceptions.InvalidRequest, match="failed to find accessor entry"):
        admin.auth.approle.destroy_secret_id_accessor(role, "nope")
    r = httpx.get(
        f"{server.url}/v1/auth/approle/role/{role}/secret-id",
        headers={"X-Vault-Token": server.token},
    )
    assert r.status_code == 405  # a GET without list=true, as OpenBao


# sealflow's own rules (no OpenBao counterpart: its policies are not scopes).


def test_managing_roles_needs_admin_and_grants_only_held_scopes(server: Server) -> None:
    data_only = _client(server.url, new_token(server, "encrypt:*"))
    with pytest.raises(hvac.exceptions.Forbidden):
        data_only.auth.approle.create_or_update_approle(unique("r"), token_policies=["admin"])
    admin_only = _client(server.url, new_token(server, "admin"))
    with pytest.raises(hvac.exceptions.Forbidden):
        admin_only.auth.approle.create_or_update_approle(unique("r"), token_policies=["decrypt:*"])
    role = unique("r")
    admin_only.auth.approle.create_or_update_approle(role, token_policies=["admin"])
    narrow = _client(server.url, new_token(server, "admin", "encrypt:orders*"))
    narrow.auth.approle.create_or_update_approle(role, token_policies=["encrypt:orders-eu"])
    with pytest.raises(hvac.exceptions.Forbidden):
        narrow.auth.approle.create_or_update_approle(role, token_policies=["encrypt:*"])
    # Nor can an admin-only token log in to the role's data scopes by other writes.
    with pytest.raises(hvac.exceptions.Forbidden):
        admin_only.auth.approle.generate_secret_id(role)
    with pytest.raises(hvac.exceptions.Forbidden):
        admin_only.auth.approle.create_or_update_approle(role, secret_id_num_uses=5)
    with pytest.raises(hvac.exceptions.Forbidden):
        admin_only.auth.approle.update_role_id(role, unique("mine"))
    assert admin_only.auth.approle.read_role(role)["data"]["token_policies"] == [
        "encrypt:orders-eu"
    ]
    assert narrow.auth.approle.generate_secret_id(role)["data"]["secret_id"]


def test_approle_paths_sealflow_does_not_serve_are_vaults_404(server: Server) -> None:
    headers = {"X-Vault-Token": server.token}
    with httpx.Client(base_url=server.url + "/v1/auth/approle", timeout=30) as c:
        for path in ("/role/x/secret-id-accessor/other", "/tidy/secret-id", "/role/x/policies"):
            r = c.post(path, json={}, headers=headers)
            assert (r.status_code, r.json()) == (
                404,
                {"errors": ["1 error occurred:\n\t* unsupported path\n\n"]},
            ), path
        big = c.post("/login", content=b'{"role_id": "' + b"x" * 8192 + b'"}')
        assert big.status_code == 413
        assert c.get("/login").status_code == 405
