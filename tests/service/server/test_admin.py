"""Admin routes, rotation while requests are in flight, and cross-process visibility."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os

import httpx
import pytest

from tests.service.conftest import Server
from tests.service.oracle import split


def unique(prefix: str) -> str:
    return f"{prefix}-{os.urandom(4).hex()}"


def test_create_show_list_rotate_patch(client: httpx.Client) -> None:
    name = unique("adm")
    r = client.post("/v1/keys", json={"name": name, "algorithm": "chacha20-poly1305"})
    assert r.status_code == 201
    key = r.json()
    assert (key["name"], key["algorithm"]) == (name, "chacha20-poly1305")
    assert (key["latest"], key["min_decryption_version"], key["exportable"]) == (1, 1, False)
    assert [v["version"] for v in key["versions"]] == [1]
    assert "key" not in key
    assert "material" not in json.dumps(key)

    assert client.post("/v1/keys", json={"name": name}).status_code == 409
    assert client.post(f"/v1/keys/{name}/rotate").json()["latest"] == 2
    shown = client.get(f"/v1/keys/{name}").json()
    assert [v["version"] for v in shown["versions"]] == [1, 2]
    assert name in [k["name"] for k in client.get("/v1/keys").json()["keys"]]
    assert client.patch(f"/v1/keys/{name}", json={"min_decryption_version": 2}).status_code == 200
    assert client.patch(f"/v1/keys/{name}", json={"min_decryption_version": 0}).status_code == 400


def test_bad_admin_requests(client: httpx.Client) -> None:
    for body in (
        {"name": "Bad Name"},
        {"name": ""},
        {"name": "a" * 65},
        {"name": "ok", "algorithm": "aes-192-gcm"},
        {"name": "ok", "extra": 1},
    ):
        r = client.post("/v1/keys", json=body)
        assert r.status_code == 400, body
        assert r.json()["error"]["code"] == "bad_request"
    assert client.get("/v1/keys/nope").status_code == 404
    assert client.post("/v1/keys/nope/rotate").json()["error"]["code"] == "key_not_found"


def test_export_only_for_exportable_keys(client: httpx.Client) -> None:
    name = unique("exp")
    client.post("/v1/keys", json={"name": name}).raise_for_status()
    r = client.get(f"/v1/keys/{name}/export")
    assert (r.status_code, r.json()["error"]["code"]) == (403, "not_exportable")
    name = unique("exp")
    client.post("/v1/keys", json={"name": name, "exportable": True}).raise_for_status()
    client.post(f"/v1/keys/{name}/rotate").raise_for_status()
    one = base64.b64decode(client.get(f"/v1/keys/{name}/export?version=1").json()["key"])
    two = base64.b64decode(client.get(f"/v1/keys/{name}/export").json()["key"])
    assert len(one) == len(two) == 32
    assert one != two
    assert client.get(f"/v1/keys/{name}/export?version=3").status_code == 404


def test_patch_makes_a_key_exportable(client: httpx.Client) -> None:
    name = unique("exp")
    client.post("/v1/keys", json={"name": name}).raise_for_status()
    client.post(f"/v1/keys/{name}/rotate").raise_for_status()
    for bad in ("true", 1):  # strict, as the other fields
        assert client.patch(f"/v1/keys/{name}", json={"exportable": bad}).status_code == 400
    unchanged = client.patch(f"/v1/keys/{name}", json={"exportable": False}).json()
    assert unchanged["exportable"] is False
    r = client.patch(f"/v1/keys/{name}", json={"exportable": True})
    assert (r.status_code, r.json()["exportable"], r.json()["latest"]) == (200, True, 2)
    assert client.get(f"/v1/keys/{name}").json()["exportable"] is True
    for version in (1, 2):
        exported = client.get(f"/v1/keys/{name}/export?version={version}").json()
        assert len(base64.b64decode(exported["key"])) == 32
    r = client.patch(f"/v1/keys/{name}", json={"exportable": False})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "bad_request")
    assert "stays so" in r.json()["error"]["message"]


def test_rotation_while_requests_are_in_flight(server: Server, client: httpx.Client) -> None:
    name = unique("rot")
    client.post("/v1/keys", json={"name": name}).raise_for_status()
    data = os.urandom(3000)

    def seal(i: int) -> bytes:
        with server.client() as c:
            if i % 10 == 0:
                c.post(f"/v1/keys/{name}/rotate").raise_for_status()
            mode = "single" if i % 2 else "stream"
            r = c.post(f"/v1/keys/{name}/encrypt", params={"mode": mode}, content=data)
            r.raise_for_status()
            return r.content

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        envelopes = list(pool.map(seal, range(80)))
    versions = {int.from_bytes(split(e)[0][6:10], "big") for e in envelopes}
    assert len(versions) > 1
    latest = client.get(f"/v1/keys/{name}").json()["latest"]
    assert latest == 9
    assert max(versions) <= latest
    for envelope in envelopes:
        assert client.post("/v1/decrypt", content=envelope).content == data


def test_rotation_by_another_process_is_seen_without_restart(
    server: Server, client: httpx.Client
) -> None:
    name = unique("xproc")
    done = server.cli("keys", "create", name, "--algorithm", "aes-128-gcm")
    assert done.returncode == 0, done.stderr
    first = client.post(f"/v1/keys/{name}/encrypt", content=b"x").content
    assert split(first)[0][5] == 1  # aes-128-gcm
    assert json.loads(server.cli("keys", "rotate", name).stdout)["latest"] == 2
    second = client.post(f"/v1/keys/{name}/encrypt", content=b"y").content
    assert int.from_bytes(split(second)[0][6:10], "big") == 2
    assert client.post("/v1/decrypt", content=first).content == b"x"
    shown = json.loads(server.cli("keys", "show", name, "--json").stdout)
    assert [v["version"] for v in shown["versions"]] == [1, 2]


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_an_admin_body_not_declared_as_json_is_refused_saying_so(
    server: Server, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    with server.client() as c:
        r = c.post("/v1/keys", content=json.dumps({"name": unique("ct")}).encode(), headers=headers)
        assert ("content-type" in r.request.headers) is (content_type is not None)
    assert r.status_code == 415
    assert r.json()["error"]["code"] == "unsupported_media_type"
    assert "Content-Type: application/json" in r.json()["error"]["message"]


@pytest.mark.parametrize("value", [True, "2", 2.0, None, [2], {"v": 2}])
def test_min_decryption_version_must_be_a_json_integer(client: httpx.Client, value: object) -> None:
    name = unique("strict")
    client.post("/v1/keys", json={"name": name}).raise_for_status()
    client.post(f"/v1/keys/{name}/rotate").raise_for_status()
    r = client.patch(f"/v1/keys/{name}", json={"min_decryption_version": value})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "bad_request")
    assert client.get(f"/v1/keys/{name}").json()["min_decryption_version"] == 1
    r = client.patch(
        f"/v1/keys/{name}", json={"min_decryption_version": 1, "allow_lowering": "true"}
    )
    assert r.status_code == 400


def test_export_refuses_versions_below_min_decryption_version(client: httpx.Client) -> None:
    name = unique("retired")
    client.post("/v1/keys", json={"name": name, "exportable": True}).raise_for_status()
    client.post(f"/v1/keys/{name}/rotate").raise_for_status()
    client.post(f"/v1/keys/{name}/rotate").raise_for_status()
    client.patch(f"/v1/keys/{name}", json={"min_decryption_version": 2}).raise_for_status()
    r = client.get(f"/v1/keys/{name}/export", params={"version": 1})
    assert (r.status_code, r.json()["error"]["code"]) == (403, "version_retired")
    assert "key" not in r.json()
    assert client.get(f"/v1/keys/{name}/export", params={"version": 2}).json()["version"] == 2
    assert client.get(f"/v1/keys/{name}/export").json()["version"] == 3


def test_lowering_min_decryption_version_is_explicit_and_logged(
    server: Server, client: httpx.Client
) -> None:
    name = unique("lower")
    client.post("/v1/keys", json={"name": name}).raise_for_status()
    client.post(f"/v1/keys/{name}/rotate").raise_for_status()
    client.post(f"/v1/keys/{name}/rotate").raise_for_status()
    client.patch(f"/v1/keys/{name}", json={"min_decryption_version": 3}).raise_for_status()
    for body in (
        {"min_decryption_version": 1},
        {"min_decryption_version": 2, "allow_lowering": False},
    ):
        r = client.patch(f"/v1/keys/{name}", json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (400, "bad_request")
        assert "allow_lowering" in r.json()["error"]["message"]
    assert client.get(f"/v1/keys/{name}").json()["min_decryption_version"] == 3
    r = client.patch(f"/v1/keys/{name}", json={"min_decryption_version": 1, "allow_lowering": True})
    assert r.json()["min_decryption_version"] == 1
    lowered = [
        json.loads(line)
        for line in server.log.read_text().splitlines()
        if "lowered" in line and name in line
    ]
    assert len(lowered) == 1
    assert lowered[0]["level"] == "warning"
    assert (lowered[0]["key"], lowered[0]["old"], lowered[0]["new"]) == (name, 3, 1)


def test_policy_and_deletion_through_the_admin_api(server: Server, client: httpx.Client) -> None:
    name = unique("adm")
    assert client.post("/v1/keys", json={"name": name}).status_code == 201
    sealed = client.post(f"/v1/keys/{name}/encrypt?mode=single", content=b"gone soon").content
    client.post(f"/v1/keys/{name}/rotate").raise_for_status()
    shown = client.get(f"/v1/keys/{name}").json()
    assert (shown["min_encryption_version"], shown["deletion_allowed"]) == (0, False)
    refused = client.delete(f"/v1/keys/{name}")
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "deletion_not_allowed")
    assert client.get(f"/v1/keys/{name}").status_code == 200
    for bad in ({"min_encryption_version": 3}, {"deletion_allowed": "yes"}):
        assert client.patch(f"/v1/keys/{name}", json=bad).status_code == 400
    patched = client.patch(
        f"/v1/keys/{name}", json={"min_encryption_version": 2, "deletion_allowed": True}
    ).json()
    assert (patched["min_encryption_version"], patched["deletion_allowed"]) == (2, True)
    # Native encryption always uses the latest version: the rule changes nothing there.
    assert client.post(f"/v1/keys/{name}/encrypt?mode=single", content=b"x").status_code == 200
    deleted = client.delete(f"/v1/keys/{name}")
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert client.get(f"/v1/keys/{name}").status_code == 404
    opened = client.post(f"/v1/keys/{name}/decrypt", content=sealed)
    assert (opened.status_code, opened.json()["error"]["code"]) == (404, "key_not_found")
    missing = client.delete(f"/v1/keys/{name}")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "key_not_found")


def test_policy_and_deletion_through_the_cli(server: Server) -> None:
    name = unique("cli")
    assert server.cli("keys", "create", name).returncode == 0
    assert server.cli("keys", "rotate", name).returncode == 0
    refused = server.cli("keys", "delete", name)
    assert refused.returncode != 0
    assert b"deletion is not allowed" in refused.stderr
    set_ = server.cli("keys", "policy", name, "--min-encryption-version", "2", "--allow-deletion")
    assert set_.returncode == 0, set_.stderr
    shown = json.loads(set_.stdout)
    assert (shown["min_encryption_version"], shown["deletion_allowed"]) == (2, True)
    done = server.cli("keys", "delete", name)
    assert done.returncode == 0, done.stderr
    assert f"deleted key {name} and its 2 versions".encode() in done.stderr
    assert server.cli("keys", "show", name).returncode != 0
