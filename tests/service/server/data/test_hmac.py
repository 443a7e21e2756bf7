"""HMAC on the native API: ``POST /v1/keys/{name}/hmac`` (a body, or ``mode=records``) and
``/verify``, against a real server; every tag checked against Python's ``hmac`` under the
key version's HMAC key, computed here from the exported material (``hmac_key``), and against
the Transit API's ``hmac/:name`` of the same key (docs/API.md, "HMAC")."""

from __future__ import annotations

import base64
import hmac
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import jsonschema_rs
import pytest

from sealflow.service.audit import SCHEMA
from sealflow.service.keystore import hmac_key, make_key_type
from tests.service.conftest import Server, exported_key, start_server
from tests.service.server.data.test_records import framed, unframe
from tests.service.server.test_audit_trail import records, verify
from tests.service.server.test_auth import code, new_token
from tests.service.server.test_client_address import access

MakeServer = Callable[..., Server]
KEY = "t-aes256"
HASHLIB = {
    "sha2-224": "sha224",
    "sha2-256": "sha256",
    "sha2-384": "sha384",
    "sha2-512": "sha512",
    "sha3-224": "sha3_224",
    "sha3-256": "sha3_256",
    "sha3-384": "sha3_384",
    "sha3-512": "sha3_512",
}


@pytest.fixture(scope="module")
def mac_client(server: Server) -> Iterator[httpx.Client]:
    """A token with ``hmac`` and ``verify`` on the test keys, and nothing else."""
    with server.client(new_token(server, "hmac:t-*", "verify:t-*", label="hmac-tests")) as c:
        yield c


@pytest.fixture(scope="module")
def secret(server: Server) -> bytes:
    """The latest version's HMAC key of KEY, from its exported material."""
    with server.client() as admin:
        version = admin.get(f"/v1/keys/{KEY}").json()["latest"]
        material = exported_key(admin, KEY, version)
    return hmac_key(make_key_type("aes256-gcm96"), material)


def cli_export(server: Server, name: str, version: int) -> bytes:
    """A version's material by ``sealflow keys export`` (the native route exports AEAD keys
    only)."""
    done = server.cli("keys", "export", name, "--version", str(version))
    assert done.returncode == 0, done.stderr
    return base64.b64decode(json.loads(done.stdout)["key"])


def expected(secret: bytes, data: bytes, algorithm: str = "sha2-256") -> bytes:
    return hmac.digest(secret, data, HASHLIB[algorithm])


@pytest.mark.parametrize("algorithm", list(HASHLIB))
def test_hmac_of_a_body_is_pythons(mac_client: httpx.Client, secret: bytes, algorithm: str) -> None:
    body = b"alice@example.com"
    r = mac_client.post(f"/v1/keys/{KEY}/hmac?algorithm={algorithm}", content=body)
    assert r.status_code == 200, r.text
    assert r.content == expected(secret, body, algorithm)
    assert r.headers["content-type"] == "application/octet-stream"
    assert int(r.headers["sealflow-key-version"]) >= 1


def test_the_default_digest_is_sha2_256(mac_client: httpx.Client, secret: bytes) -> None:
    r = mac_client.post(f"/v1/keys/{KEY}/hmac", content=b"")
    assert r.content == expected(secret, b"")


def test_a_body_in_many_pieces_has_the_tag_of_the_whole(
    mac_client: httpx.Client, secret: bytes
) -> None:
    pieces = [os.urandom(100_000) for _ in range(30)]  # chunked, about 3 MB
    r = mac_client.post(f"/v1/keys/{KEY}/hmac?algorithm=sha2-512", content=iter(pieces))
    assert r.status_code == 200, r.text
    assert r.content == expected(secret, b"".join(pieces), "sha2-512")


def test_verify_answers_valid_for_the_tag_and_invalid_for_a_tampered_one(
    mac_client: httpx.Client, secret: bytes
) -> None:
    body = b"order-17"
    tag = expected(secret, body)
    url = f"/v1/keys/{KEY}/verify"
    good = mac_client.post(
        url, content=body, headers={"sealflow-hmac": base64.b64encode(tag).decode()}
    )
    assert good.status_code == 200, good.text
    assert good.json() == {"valid": True}
    tampered = bytes([tag[0] ^ 1]) + tag[1:]
    for bad_tag, bad_body in ((tampered, body), (tag, b"order-18"), (tag[:-1], body)):
        headers = {"sealflow-hmac": base64.b64encode(bad_tag).decode()}
        r = mac_client.post(url, content=bad_body, headers=headers)
        assert r.status_code == 200, r.text
        assert r.json() == {"valid": False}


@pytest.mark.parametrize("pieces", [1, 40], ids=["whole", "streamed"])
def test_verify_answers_json_on_either_path(
    mac_client: httpx.Client, secret: bytes, pieces: int
) -> None:
    body = os.urandom(40_000)
    tag = base64.b64encode(expected(secret, body)).decode()
    size = len(body) // pieces
    # One piece with a length: the fast answer; an iterator: chunked, the ASGI path.
    content = body if pieces == 1 else iter([body[i : i + size] for i in range(0, len(body), size)])
    r = mac_client.post(f"/v1/keys/{KEY}/verify", content=content, headers={"sealflow-hmac": tag})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"valid": True}
    assert int(r.headers["sealflow-key-version"]) >= 1


def test_verify_takes_transit_tags_and_their_version(
    mac_client: httpx.Client, secret: bytes
) -> None:
    version = int(
        mac_client.post(f"/v1/keys/{KEY}/hmac", content=b"x").headers["sealflow-key-version"]
    )
    text = f"vault:v{version}:" + base64.b64encode(expected(secret, b"x", "sha3-256")).decode()
    r = mac_client.post(
        f"/v1/keys/{KEY}/verify?algorithm=sha3-256", content=b"x", headers={"sealflow-hmac": text}
    )
    assert r.json() == {"valid": True}
    assert r.headers["sealflow-key-version"] == str(version)
    gone = f"vault:v{version + 100}:" + text.split(":")[2]
    r = mac_client.post(f"/v1/keys/{KEY}/verify", content=b"x", headers={"sealflow-hmac": gone})
    assert r.status_code == 404, r.text


@pytest.mark.parametrize(
    "headers",
    [{}, {"sealflow-hmac": "not base64!"}],
    ids=["missing", "not-base64"],
)
def test_verify_without_a_readable_tag_is_400(
    mac_client: httpx.Client, headers: dict[str, str]
) -> None:
    r = mac_client.post(f"/v1/keys/{KEY}/verify", content=b"x", headers=headers)
    assert r.status_code == 400
    assert code(r) == "bad_request"


def test_records_get_one_framed_tag_each(mac_client: httpx.Client, secret: bytes) -> None:
    records = [b"", b"a", os.urandom(100), os.urandom(5000)] + [os.urandom(100)] * 3000
    r = mac_client.post(f"/v1/keys/{KEY}/hmac?mode=records", content=framed(records))
    assert r.status_code == 200, r.text
    assert unframe(r.content) == [expected(secret, rec) for rec in records]
    assert int(r.headers["sealflow-key-version"]) >= 1


@pytest.mark.parametrize("duplex", [False, True])
def test_a_large_batch_streams_through_several_engine_calls(
    mac_client: httpx.Client, secret: bytes, duplex: bool
) -> None:
    records = [os.urandom(100) for _ in range(20_000)]  # about 2 MB: many 256 KiB batches
    body = framed(records)
    pieces = [body[i : i + 65_536] for i in range(0, len(body), 65_536)]
    headers = {"sealflow-duplex": "1"} if duplex else {}
    r = mac_client.post(
        f"/v1/keys/{KEY}/hmac?mode=records&algorithm=sha3-256",
        content=iter(pieces),
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert unframe(r.content) == [expected(secret, rec, "sha3-256") for rec in records]
    assert int(r.headers["sealflow-key-version"]) >= 1


def test_a_batch_that_ends_inside_a_record_is_400(mac_client: httpx.Client) -> None:
    r = mac_client.post(f"/v1/keys/{KEY}/hmac?mode=records", content=b"\0\0\0\x05abc")
    assert r.status_code == 400
    assert code(r) == "bad_request"


def test_without_the_hmac_scope_every_route_is_403(server: Server) -> None:
    """``hmac`` makes HMACs, ``verify`` checks them (the path's scope, as on Transit)."""
    data = new_token(server, "encrypt:t-*", "decrypt:t-*", label="no-hmac")
    hmac_only = new_token(server, "hmac:t-*", label="hmac-only")
    verify_only = new_token(server, "verify:t-*", label="verify-only")
    refusals = [(data, p) for p in ("hmac", "hmac?mode=records", "verify")]
    refusals += [(hmac_only, "verify"), (verify_only, "hmac"), (verify_only, "hmac?mode=records")]
    for token, path in refusals:
        with server.client(token) as c:
            r = c.post(f"/v1/keys/{KEY}/{path}", content=b"", headers={"sealflow-hmac": "AA"})
            assert r.status_code == 403, (path, r.text)
            assert code(r) == "forbidden"
    narrow = new_token(server, "hmac:orders", label="hmac-narrow")
    with server.client(narrow) as other:
        r = other.post(f"/v1/keys/{KEY}/hmac", content=b"x")
        assert r.status_code == 403


@pytest.mark.parametrize(
    ("query", "headers", "status", "error"),
    [
        ("?algorithm=md5", {}, 400, "bad_request"),
        ("?algorithm=sha2-256&algorithm=sha2-512", {}, 400, "bad_request"),
        ("?mode=single", {}, 400, "bad_request"),
        ("?version=0", {}, 400, "bad_request"),
        ("?version=99", {}, 404, "key_not_found"),
        ("?colour=red", {}, 400, "bad_request"),
        ("", {"x-aad": "YWJj"}, 400, "bad_request"),
    ],
)
def test_refusals_from_the_head(
    mac_client: httpx.Client, query: str, headers: dict[str, str], status: int, error: str
) -> None:
    r = mac_client.post(f"/v1/keys/{KEY}/hmac{query}", content=b"x", headers=headers)
    assert r.status_code == status, r.text
    assert code(r) == error


def test_an_unknown_key_is_404(mac_client: httpx.Client) -> None:
    r = mac_client.post("/v1/keys/t-nonesuch/hmac", content=b"x")
    assert r.status_code == 404
    assert code(r) == "key_not_found"


def test_the_access_log_names_key_version_and_mode(
    server: Server, mac_client: httpx.Client
) -> None:
    rid = "hmac-records-log-1"
    r = mac_client.post(
        f"/v1/keys/{KEY}/hmac?mode=records",
        content=framed([b"a", b"b"]),
        headers={"x-request-id": rid},
    )
    assert r.status_code == 200
    (line,) = access(server, [rid])
    assert line["route"] == "/v1/keys/{name}/hmac"
    assert line["key"] == KEY
    assert line["mode"] == "records"
    assert line["records"] == 2
    assert line["version"] == int(r.headers["sealflow-key-version"])


def test_audit_records_name_the_operation_key_version_and_records(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    srv = start_server(tmp_path / "data", audit_file=audit)
    try:
        token = new_token(srv, "hmac:default", "verify:default", label="blind-index")
        with srv.client(token) as c:
            one = c.post("/v1/keys/default/hmac", content=b"alice")
            tag = base64.b64encode(one.content).decode()
            c.post("/v1/keys/default/verify", content=b"alice", headers={"sealflow-hmac": tag})
            c.post("/v1/keys/default/hmac?mode=records", content=framed([b"a", b"b", b"c"]))
        with srv.client(new_token(srv, "encrypt:default", label="no-hmac")) as other:
            assert other.post("/v1/keys/default/hmac", content=b"x").status_code == 403
    finally:
        srv.stop()
    done = verify(audit, srv)
    assert done.returncode == 0, done.stderr
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    found = [r for r in records(audit) if r.get("route", "").startswith("/v1/keys/{name}/")]
    for record in found:
        validator.validate(record)
    got = [(r["operation"], r.get("mode"), r.get("records"), r["status"]) for r in found]
    assert got == [
        ("hmac", None, None, 200),
        ("verify", None, None, 200),
        ("hmac", "records", 3, 200),
        ("hmac", None, None, 403),
    ]
    assert all(r["key"] == "default" for r in found)
    assert [r.get("version") for r in found[:3]] == [1, 1, 1]
    assert "alice" not in audit.read_text()


@pytest.mark.parametrize("kind", ["hmac", "aes128-gcm96", "chacha20-poly1305", "ed25519"])
def test_the_native_tag_is_transits_for_every_key_type(make_server: MakeServer, kind: str) -> None:
    # A server of its own: keys of every type stay out of the session server's key list,
    # which other tests read whole.
    server = make_server()
    name = f"native-hmac-{kind.replace('-', '')}"
    body: dict[str, object] = {"type": kind, "exportable": True}
    if kind == "hmac":
        body["key_size"] = 48
    with server.client() as root:  # the root token holds hmac:* (and admin, export)
        created = root.post(f"/v1/transit/keys/{name}", json=body)
        assert created.status_code in (200, 204), created.text
        root.post(f"/v1/transit/keys/{name}/rotate").raise_for_status()
        for version in (1, 2):
            value = os.urandom(64)
            url = f"/v1/keys/{name}/hmac?algorithm=sha2-384&version={version}"
            native = root.post(url, content=value)
            assert native.status_code == 200, native.text
            assert native.headers["sealflow-key-version"] == str(version)
            transit = root.post(
                f"/v1/transit/hmac/{name}/sha2-384",
                json={"input": base64.b64encode(value).decode(), "key_version": version},
            )
            assert transit.status_code == 200, transit.text
            text = transit.json()["data"]["hmac"]
            assert text == f"vault:v{version}:" + base64.b64encode(native.content).decode()
            material = cli_export(server, name, version)
            secret = hmac_key(make_key_type(kind, 48 if kind == "hmac" else 0), material)
            assert native.content == expected(secret, value, "sha2-384")
            # Transit's text verifies natively, under the version it names.
            check = root.post(
                f"/v1/keys/{name}/verify?algorithm=sha2-384",
                content=value,
                headers={"sealflow-hmac": text},
            )
            assert check.json() == {"valid": True}


def test_versions_follow_transits_rules(server: Server) -> None:
    name = "t-native-hmac-versions"
    with server.client() as root:
        root.post("/v1/keys", json={"name": name, "algorithm": "aes-256-gcm"}).raise_for_status()
        for _ in range(2):
            root.post(f"/v1/keys/{name}/rotate").raise_for_status()
        tag = root.post(f"/v1/keys/{name}/hmac?version=1", content=b"v")
        assert tag.status_code == 200
        config = {"min_decryption_version": 2, "min_encryption_version": 2}
        root.post(f"/v1/transit/keys/{name}/config", json=config).raise_for_status()
        # Made with a version below min_encryption_version: no; the latest always.
        assert root.post(f"/v1/keys/{name}/hmac?version=1", content=b"v").status_code == 400
        assert root.post(f"/v1/keys/{name}/hmac?version=3", content=b"v").status_code == 200
        # Verified below min_decryption_version: no (and never another version).
        header = {"sealflow-hmac": base64.b64encode(tag.content).decode()}
        r = root.post(f"/v1/keys/{name}/verify?version=1", content=b"v", headers=header)
        assert r.status_code == 403
        assert code(r) == "version_retired"
        r = root.post(f"/v1/keys/{name}/verify?version=2", content=b"v", headers=header)
        assert r.json() == {"valid": False}


def test_a_key_made_again_under_a_deleted_keys_name_has_its_own_hmac_keys(
    server: Server,
) -> None:
    name = "t-native-hmac-again"
    with server.client() as root:
        tags, secrets = [], []
        for _ in range(2):
            body = {"name": name, "algorithm": "aes-256-gcm", "exportable": True}
            root.post("/v1/keys", json=body).raise_for_status()
            r = root.post(f"/v1/keys/{name}/hmac", content=b"same value")
            assert r.status_code == 200, r.text
            tags.append(r.content)
            material = exported_key(root, name, 1)
            secrets.append(hmac_key(make_key_type("aes256-gcm96"), material))
            allowed = root.patch(f"/v1/keys/{name}", json={"deletion_allowed": True})
            assert allowed.status_code == 200, allowed.text
            assert root.delete(f"/v1/keys/{name}").status_code == 204
        assert tags[0] != tags[1]
        assert tags == [expected(secret, b"same value") for secret in secrets]
