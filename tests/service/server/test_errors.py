"""One path from an exception to an HTTP error: status, JSON body and headers, for the data
routes (plain ASGI) and FastAPI's routes alike."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable

import httpx
import pytest

from tests.service.conftest import Server

MakeServer = Callable[..., Server]


def error(r: httpx.Response) -> tuple[int, str]:
    assert r.headers["content-type"] == "application/json"
    return r.status_code, str(r.json()["error"]["code"])


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/decrypt"),
        ("PUT", "/v1/keys/default/encrypt"),
        ("GET", "/v1/keys/default/decrypt"),
        ("DELETE", "/v1/keys/default/encrypt"),
    ],
)
def test_a_data_route_with_another_method_is_405_with_allow(
    client: httpx.Client, method: str, path: str
) -> None:
    r = client.request(method, path)
    assert error(r) == (405, "method_not_allowed")
    assert r.headers["allow"] == "POST"


def test_an_admin_route_with_another_method_is_405_with_allow(client: httpx.Client) -> None:
    r = client.put("/v1/keys")
    assert error(r) == (405, "method_not_allowed")
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}


def test_unknown_key_and_unknown_version_say_which(server: Server, client: httpx.Client) -> None:
    r = client.post("/v1/keys/no-such-key/encrypt", content=b"x")
    assert error(r) == (404, "key_not_found")
    assert r.json()["error"]["message"] == "no key named 'no-such-key'"
    # An envelope naming a version the key does not have.
    sealed = client.post("/v1/keys/default/encrypt?mode=single", content=b"x").content
    n = sealed[10]
    forged = sealed[:6] + (999).to_bytes(4, "big") + sealed[10 : 11 + n] + sealed[11 + n :]
    r = client.post("/v1/decrypt", content=forged)
    assert error(r) == (404, "key_not_found")
    assert r.json()["error"]["message"] == "key 'default' has no version 999"


def test_a_keystore_failure_on_the_data_path_is_json_503(make_server: MakeServer) -> None:
    srv = make_server()
    with srv.client() as c:
        name = f"broken-{os.urandom(3).hex()}"
        c.post("/v1/keys", json={"name": name}).raise_for_status()
        # The wrapped material no longer unwraps (nobody used it yet, so nothing is cached).
        db = sqlite3.connect(srv.data_dir / "keystore.db")
        with db:
            db.execute("UPDATE key_versions SET wrapped = ? WHERE name = ?", (b"\0" * 60, name))
        db.close()
        for path in (f"/v1/keys/{name}/encrypt", f"/v1/keys/{name}/encrypt?mode=single"):
            r = c.post(path, content=b"data")
            assert error(r) == (503, "keystore_unavailable"), r.text
            assert r.json()["error"]["message"] == "the keystore is unavailable"
        # The same error from a FastAPI route, and the server keeps serving other keys.
        assert c.post("/v1/keys/default/encrypt", content=b"data").status_code == 200
    srv.stop()
    assert any(e["status"] == 503 for e in srv.access())
    log = srv.log.read_text()
    # Logged by the keystore, once, however many requests met it.
    assert log.count(f"key '{name}' version 1 fails its integrity check") == 1


def test_openapi_lists_the_statuses_routes_return_and_never_422(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    assert "422" not in json.dumps(schema)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            statuses = set(operation["responses"])
            if path.startswith(("/v1/transit/", "/v1/sys/", "/v1/auth/")):  # Vault's statuses
                assert {"429", "503"} <= statuses, (method, path)
                if "security" in operation:
                    assert {"400", "403"} <= statuses, (method, path)
            elif path.startswith("/v1/"):
                assert {"400", "401", "403", "404", "413"} <= statuses, (method, path)
            data_route = path.endswith(("/encrypt", "/decrypt", "/hmac", "/verify"))
            if path.startswith("/v1/keys") and not data_route:
                assert "409" in statuses, (method, path)


def test_which_refusals_close_the_connection(server: Server) -> None:
    # docs/API.md: a refusal decided from the head closes the connection when a body was
    # announced (it is left unread), and keeps it otherwise.
    with httpx.Client(base_url=server.url, headers={"authorization": "Bearer wrong"}) as c:
        assert c.get("/v1/keys").headers.get("connection") != "close"
        assert c.post("/v1/keys", json={"name": "x"}).headers["connection"] == "close"
        assert c.post("/v1/keys/default/encrypt", content=b"x").headers["connection"] == "close"
        assert c.get("/v1/decrypt").headers.get("connection") != "close"
        assert c.post("/v1/decrypt", content=b"").headers.get("connection") != "close"


def test_created_at_always_has_microseconds(client: httpx.Client) -> None:
    for version in client.get("/v1/keys/default").json()["versions"]:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", version["created_at"])
