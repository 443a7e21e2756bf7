"""Transit's keyless utilities against a real OpenBao dev server: ``hash[/:algorithm]`` (the
same sums for every algorithm and format), ``random[/:source][/:bytes]`` (the same refusals,
outputs of the asked length and format) and ``LIST keys`` with ``after`` and ``limit`` (the
same pages of the same names). Each call goes to both servers; status and words must match."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import hvac
import pytest

from tests.service.conftest import Server
from tests.service.server.test_auth import new_token
from tests.service.transit.conftest import Bao, unique

ALGORITHMS = [f"sha{family}-{bits}" for family in (2, 3) for bits in (224, 256, 384, 512)]
DATA = b"sealflow \x00\xff hashes like OpenBao"


def _call(
    url: str, token: str, method: str, path: str, body: Any = None, params: Any = None
) -> httpx.Response:
    headers = {"X-Vault-Token": token}
    return httpx.request(
        method, f"{url}/v1/{path}", json=body, params=params, headers=headers, timeout=30
    )


def both(
    server: Server,
    bao: Bao,
    path: str,
    body: Any = None,
    method: str = "POST",
    params: Any = None,
    bao_mount: str = "transit",
) -> tuple[httpx.Response, httpx.Response]:
    """The same call to sealflow (mount ``transit``) and to OpenBao (mount ``bao_mount``)."""
    ours = _call(server.url, server.token, method, f"transit/{path}", body, params)
    theirs = _call(bao.url, bao.token, method, f"{bao_mount}/{path}", body, params)
    assert ours.status_code == theirs.status_code, (path, body, ours.text, theirs.text)
    return ours, theirs


def same_refusal(server: Server, bao: Bao, path: str, body: Any = None, **kw: Any) -> str:
    ours, theirs = both(server, bao, path, body, **kw)
    assert ours.status_code >= 400, ours.text
    assert ours.json()["errors"] == theirs.json()["errors"], (path, body)
    return str(ours.json()["errors"])


@pytest.mark.parametrize("form", [None, "hex", "base64"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_hash_sums_match_openbao_for_every_algorithm_and_format(
    server: Server, bao: Bao, algorithm: str, form: str | None
) -> None:
    body: dict[str, Any] = {"input": base64.b64encode(DATA).decode()}
    if form is not None:
        body["format"] = form
    in_url, _ = both(server, bao, f"hash/{algorithm}", body)
    in_body, theirs = both(server, bao, "hash", {**body, "algorithm": algorithm})
    total = theirs.json()["data"]["sum"]
    assert in_url.json()["data"]["sum"] == in_body.json()["data"]["sum"] == total
    digest = hashlib.new(algorithm.replace("sha2-", "sha").replace("-", "_"), DATA).digest()
    want = base64.b64encode(digest).decode() if form == "base64" else digest.hex()
    assert total == want


def test_a_large_input_hashes_as_openbao(server: Server, bao: Bao) -> None:
    """A 3 MiB input (hashed off the event loop): the same sum."""
    data = bytes(range(256)) * (3 * 4096)
    body = {"input": base64.b64encode(data).decode(), "format": "base64"}
    ours, theirs = both(server, bao, "hash/sha3-384", body)
    assert ours.json()["data"]["sum"] == theirs.json()["data"]["sum"]
    assert base64.b64decode(ours.json()["data"]["sum"]) == hashlib.sha3_384(data).digest()


@pytest.mark.parametrize(
    "body",
    [
        {},  # the default, sha2-256 in hex
        {"input": ""},  # an empty input is hashed
        {"input": None},  # a null is an empty string in OpenBao
        {"input": "aGk=", "format": "base64", "algorithm": "sha2-256"},
        {"input": "aGk=\n"},  # Go skips line breaks
    ],
)
def test_hash_defaults_and_empty_values_as_openbao(server: Server, bao: Bao, body: Any) -> None:
    ours, theirs = both(server, bao, "hash", body or {"input": "aGk="})
    assert ours.json()["data"] == theirs.json()["data"]
    assert ours.json()["warnings"] == theirs.json()["warnings"]


def test_hash_warns_of_ignored_and_replaced_fields_as_openbao(server: Server, bao: Bao) -> None:
    body = {"input": "aGk=", "urlalgorithm": "sha2-512", "plaintext": "x", "context": "y"}
    ours, theirs = both(server, bao, "hash/sha3-224", body)
    assert ours.json()["data"] == theirs.json()["data"]
    assert ours.json()["warnings"] == theirs.json()["warnings"]
    assert len(ours.json()["warnings"]) == 2


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("hash", {}),  # input missing (an empty body)
        ("hash", {"format": "hex"}),
        ("hash", {"input": "not base64!"}),
        ("hash", {"input": "aGk"}),  # unpadded
        ("hash", {"input": "aGk=", "format": "raw"}),
        ("hash", {"input": "aGk=", "format": ""}),
        ("hash", {"input": "aGk=", "format": None}),
        ("hash", {"input": "aGk=", "algorithm": "md5"}),
        ("hash", {"input": "aGk=", "algorithm": ""}),
        ("hash", {"input": "aGk=", "algorithm": None}),  # a null is "" in OpenBao
        ("hash", {"input": 123}),  # a number is its text
        ("hash", {"input": True}),
        ("hash", {"input": ["aGk="]}),
        ("hash", {"input": "aGk=", "format": 5}),
        ("random", {"bytes": "abc"}),
        ("random", {"bytes": 1.5}),
        ("random", {"bytes": 2.0}),
        ("random", {"bytes": "0x1_0000000"}),
        ("random", {"bytes": [1]}),
        ("random", {"format": {"a": 1}}),
        ("hash/", {"input": "aGk="}),
        ("random/", {}),
        ("random/platform/", {"bytes": 4}),
        ("hash/sha1", {"input": "aGk="}),
        ("hash/sha2-256/x", {"input": "aGk="}),
        ("hash/SHA2-256", {"input": "aGk="}),
        ("hash", {"input": "!!!", "format": "raw", "algorithm": "md5"}),  # base64 first
        ("hash", {"input": "aGk=", "format": "raw", "algorithm": "md5"}),  # then format
    ],
)
def test_hash_refusals_in_openbaos_words(
    server: Server, bao: Bao, path: str, body: dict[str, Any]
) -> None:
    same_refusal(server, bao, path, body)


def test_hash_routes_refuse_other_methods_as_openbao(server: Server, bao: Bao) -> None:
    for method in ("GET", "DELETE", "LIST"):
        same_refusal(server, bao, "hash", method=method)
        same_refusal(server, bao, "random/16", method=method)
        same_refusal(server, bao, "random", method=method)
        same_refusal(server, bao, "hash/sha2-256", method=method)
        same_refusal(server, bao, "hash/", method=method)
        same_refusal(server, bao, "random/platform/", method=method)


def _decoded(text: str, form: str) -> bytes:
    return bytes.fromhex(text) if form == "hex" else base64.b64decode(text, validate=True)


@pytest.mark.parametrize(
    ("path", "body", "size", "form"),
    [
        ("random", {}, 32, "base64"),
        ("random", {"bytes": 7, "format": "hex"}, 7, "hex"),
        ("random", {"bytes": "9"}, 9, "base64"),
        ("random", {"bytes": "0x1f"}, 31, "base64"),
        ("random", {"bytes": "010"}, 8, "base64"),  # Go's octal
        ("random", {"bytes": True}, 1, "base64"),
        ("random/16", {}, 16, "base64"),
        ("random/16", {"bytes": 3}, 16, "base64"),  # the URL's count wins
        ("random/platform", {"bytes": 5}, 5, "base64"),
        ("random/all/12", {"format": "hex"}, 12, "hex"),
        ("random/seal/1", {}, 1, "base64"),
        ("random/-5", {"bytes": 6}, 6, "base64"),  # no source: the body's count
        ("random", {"source": "nowhere", "bytes": 2}, 2, "base64"),  # the path's source wins
        ("random/8", {"urlbytes": "9"}, 8, "base64"),
        ("random/seal/4", {"zz": 1, "extra": 2, "source": "x", "format": "hex"}, 4, "hex"),
        ("random/131072", {}, 131072, "base64"),
    ],
)
def test_random_bytes_of_the_asked_length_and_format(
    server: Server, bao: Bao, path: str, body: dict[str, Any], size: int, form: str
) -> None:
    ours, theirs = both(server, bao, path, body)
    assert ours.status_code == 200
    for answer in (ours, theirs):
        assert len(_decoded(answer.json()["data"]["random_bytes"], form)) == size
    assert ours.json()["warnings"] == theirs.json()["warnings"]  # seal's is OpenBao's too
    # Random: enough draws that all of them being equal has odds below 2**-120
    # (two draws of one byte are equal one time in 256).
    draws = [ours.json()["data"]["random_bytes"]]
    for _ in range(max(1, -(-16 // size))):
        again = _call(server.url, server.token, "POST", f"transit/{path}", body)
        draws.append(again.json()["data"]["random_bytes"])
    assert len(set(draws)) > 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("random", {"bytes": 0}),
        ("random", {"bytes": -1}),
        ("random", {"bytes": None}),
        ("random", {"bytes": ""}),
        ("random", {"bytes": 131073}),
        ("random/131073", {}),
        ("random/platform/131073", {}),
        ("random/0", {}),
        ("random/abc", {}),
        ("random/99999999999999999999", {}),
        ("random/platform/abc", {}),
        ("random/platform/1/2", {}),
        ("random/platform/+", {}),
        ("random/nowhere/8", {}),
        ("random/nowhere/0", {}),  # the count is checked before the source
        ("random", {"format": "raw"}),
        ("random", {"format": ""}),
        ("random", {"format": 'a"b\n\u00e9'}),  # Go's %q
        ("random/nowhere/8", {"format": "raw"}),  # the format before the source
    ],
)
def test_random_refusals_in_openbaos_words(
    server: Server, bao: Bao, path: str, body: dict[str, Any]
) -> None:
    same_refusal(server, bao, path, body)


def test_any_valid_token_may_hash_and_draw_random_bytes(server: Server) -> None:
    token = new_token(server, "encrypt:nothing-*", label="utility")
    client = hvac.Client(url=server.url, token=token)
    hashed = client.secrets.transit.hash_data("aGk=", algorithm="sha2-512", output_format="hex")
    assert hashed["data"]["sum"] == hashlib.sha512(b"hi").hexdigest()
    drawn = client.secrets.transit.generate_random_bytes(n_bytes=10, output_format="hex")
    assert len(bytes.fromhex(drawn["data"]["random_bytes"])) == 10
    with server.client() as c:
        paths = c.get("/openapi.json").json()["paths"]
    for path in (
        "hash",
        "hash/{algorithm}",
        "random",
        "random/{source}",
        "random/{source}/{bytes}",
    ):
        assert set(paths[f"/v1/transit/{path}"]) == {"post", "put"}
    assert {p["name"] for p in paths["/v1/transit/keys"]["get"]["parameters"]} >= {"after", "limit"}
    for path in ("transit/hash", "transit/random"):
        refused = _call(server.url, "not-a-token", "POST", path, {"input": "aGk="})
        assert refused.status_code == 403
        assert refused.json()["errors"] == ["permission denied"]


def test_list_keys_pages_as_openbao(make_server: Any, bao: Bao) -> None:
    """The same names in a fresh sealflow and a fresh OpenBao mount: the same pages."""
    srv = make_server()
    mount = unique("lst")
    headers = {"X-Vault-Token": bao.token}
    enabled = httpx.post(
        f"{bao.url}/v1/sys/mounts/{mount}", json={"type": "transit"}, headers=headers
    )
    assert enabled.status_code == 204, enabled.text
    # "default": the key a new sealflow server makes
    for name in ("b", "a", "c-1", "c", "d.x", "B", "e_2", "default"):
        ours, _ = both(srv, bao, f"keys/{name}", {}, bao_mount=mount)
        assert ours.status_code == 200
    cases: list[dict[str, str]] = [
        {},
        {"limit": "2"},
        {"limit": "0"},
        {"limit": "-3"},
        {"limit": "7"},
        {"limit": "100"},
        {"after": "b"},
        {"after": "b", "limit": "2"},
        {"after": "bb", "limit": "1"},
        {"after": "A"},
        {"after": "c"},
        {"after": ""},
        {"after": "e_2"},  # nothing after the last: 404
        {"after": "zzz", "limit": "1"},
        {"limit": "+1"},
        {"limit": "abc"},
        {"limit": "1.5"},
        {"limit": "0x2"},  # Go's ParseInt with base 0
        {"limit": "99999999999999999999"},
    ]
    for params in cases:
        ours, theirs = both(srv, bao, "keys", method="LIST", params=params, bao_mount=mount)
        assert ours.json().get("errors") == theirs.json().get("errors"), params
        assert ours.json().get("data") == theirs.json().get("data"), params
        listed, _ = both(
            srv, bao, "keys", method="GET", params={"list": "true", **params}, bao_mount=mount
        )
        assert listed.json().get("data") == ours.json().get("data")
    client = hvac.Client(url=srv.url, token=srv.token)
    listed = client.secrets.transit.list_keys()["data"]["keys"]
    assert listed == ["B", "a", "b", "c", "c-1", "d.x", "default", "e_2"]


def test_audited_by_operation_without_input_or_output(make_server: Any, tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    srv = make_server(audit_file=audit)
    client = hvac.Client(url=srv.url, token=srv.token)
    secret = b"a distinctive input 7f3a"
    encoded = base64.b64encode(secret).decode()
    total = client.secrets.transit.hash_data(encoded, output_format="hex")["data"]["sum"]
    drawn = client.secrets.transit.generate_random_bytes(n_bytes=24)["data"]["random_bytes"]
    client.secrets.transit.create_key(unique("au"))
    client.secrets.transit.list_keys()
    srv.stop()  # the trail flushed and closed
    text = audit.read_text()
    records = [json.loads(line) for line in text.splitlines()]
    seen = {(r["type"], r.get("operation"), r.get("status"), r.get("key")) for r in records}
    assert ("request", "hash", 200, None) in seen
    assert ("request", "random", 200, None) in seen
    assert ("request", "key_list", 200, None) in seen
    for value in (encoded, secret.decode(), total, drawn, binascii.hexlify(secret).decode()):
        assert value not in text


def test_config_keys_reads_as_openbao_and_upsert_stays_off(server: Server, bao: Bao) -> None:
    """``config/keys``: the same shape; ``disable_upsert`` true is accepted as OpenBao accepts
    it; false is refused (sealflow never creates a key on encrypt) and an encrypt to a missing
    key stays a 400, with no key made."""
    ours, theirs = both(server, bao, "config/keys", {"disable_upsert": True})
    assert ours.json()["data"] == theirs.json()["data"] == {"disable_upsert": True}
    ours, theirs = both(server, bao, "config/keys", method="GET")
    assert ours.json()["data"] == theirs.json()["data"]
    refused = _call(server.url, server.token, "POST", "transit/config/keys", {"disable_upsert": 0})
    assert refused.status_code == 400
    assert "never creates a key on encrypt" in refused.json()["errors"][0]
    name = unique("upsert")
    plaintext = {"plaintext": base64.b64encode(b"x").decode()}
    missing = _call(server.url, server.token, "POST", f"transit/encrypt/{name}", plaintext)
    assert missing.json()["errors"] == ["encryption key not found"]
    gone = _call(server.url, server.token, "GET", f"transit/keys/{name}")
    assert gone.status_code == 404
    encrypt_only = new_token(server, "encrypt:*")
    denied = _call(server.url, encrypt_only, "GET", "transit/config/keys")
    assert denied.status_code == 403
    reset = _call(bao.url, bao.token, "POST", "transit/config/keys", {"disable_upsert": False})
    assert reset.status_code == 200  # OpenBao as it was, for the tests after this one
