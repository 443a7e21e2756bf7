"""hvac 2.4, unchanged, against a real ``sealflow serve``: the calls Vault users make."""

from __future__ import annotations

import base64
import functools
import json
import secrets
import subprocess
import time
from collections.abc import Callable

import httpx
import hvac
import hvac.exceptions
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tests.service.conftest import Server
from tests.service.server.test_auth import new_token
from tests.service.transit.conftest import unique

TOO_HIGH = "requested version for encryption is higher than the latest key version"
TOO_OLD = "ciphertext or signature version is disallowed by policy (too old)"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_create_encrypt_decrypt_with_associated_data(vault: hvac.Client) -> None:
    name = unique("hv")
    vault.secrets.transit.create_key(name, key_type="chacha20-poly1305")
    aad = b64(b"order 17")
    sealed = vault.secrets.transit.encrypt_data(name, b64(b"hello"), associated_data=aad)
    ciphertext = sealed["data"]["ciphertext"]
    assert ciphertext.startswith("vault:v1:")
    assert sealed["data"]["key_version"] == 1
    opened = vault.secrets.transit.decrypt_data(name, ciphertext, associated_data=aad)
    assert base64.b64decode(opened["data"]["plaintext"]) == b"hello"
    with pytest.raises(hvac.exceptions.InvalidRequest, match="message authentication failed"):
        vault.secrets.transit.decrypt_data(name, ciphertext)  # AAD missing


def test_key_read_and_list(vault: hvac.Client) -> None:
    name = unique("hv")
    vault.secrets.transit.create_key(name, exportable=True)
    data = vault.secrets.transit.read_key(name)["data"]
    assert (data["name"], data["type"], data["exportable"]) == (name, "aes256-gcm96", True)
    assert (data["latest_version"], data["min_decryption_version"]) == (1, 1)
    assert list(data["keys"]) == ["1"]
    assert isinstance(data["keys"]["1"], int)
    assert name in vault.secrets.transit.list_keys()["data"]["keys"]
    with pytest.raises(hvac.exceptions.InvalidPath):
        vault.secrets.transit.read_key(unique("absent"))


def test_batch_of_1000_with_one_bad_item(vault: hvac.Client) -> None:
    name = unique("hv")
    vault.secrets.transit.create_key(name)
    batch = [{"plaintext": b64(b"item %d" % i), "reference": str(i)} for i in range(1000)]
    batch[500]["plaintext"] = "not base64!"
    with pytest.raises(hvac.exceptions.InvalidRequest) as caught:
        vault.secrets.transit.encrypt_data(name, batch_input=batch)
    answer = caught.value.json
    assert "errors" not in answer
    results = answer["data"]["batch_results"]
    assert [r["reference"] for r in results] == [str(i) for i in range(1000)]
    assert results[500] == {"error": "illegal base64 data at input byte 3", "reference": "500"}
    good = [r for r in results if "error" not in r]
    assert len(good) == 999
    assert all(r["key_version"] == 1 for r in good)

    to_open = [{"ciphertext": r["ciphertext"], "reference": r["reference"]} for r in good]
    opened = vault.secrets.transit.decrypt_data(name, batch_input=to_open)
    plain = [base64.b64decode(r["plaintext"]) for r in opened["data"]["batch_results"]]
    assert plain == [b"item %d" % i for i in range(1000) if i != 500]


def test_partial_failure_response_code(server: Server) -> None:
    name = unique("hv")
    headers = {"X-Vault-Token": server.token}
    with httpx.Client(base_url=server.url + "/v1/transit", headers=headers) as http:
        http.post(f"/keys/{name}").raise_for_status()
        body = {
            "batch_input": [{"plaintext": "aGk="}, {"plaintext": "!"}],
            "partial_failure_response_code": "207",
        }
        assert http.post(f"/encrypt/{name}", json=body).status_code == 207
        body["batch_input"] = [{"plaintext": "!"}]  # nothing succeeded: 400 whatever was asked
        assert http.post(f"/encrypt/{name}", json=body).status_code == 400
        empty = http.post(f"/encrypt/{name}", json={"batch_input": []})
        assert (empty.status_code, empty.json()) == (
            400,
            {"errors": ["missing batch input to process"]},
        )
        assert empty.headers["content-type"] == "application/json"


def test_rotate_rewrap_and_min_decryption_version(vault: hvac.Client) -> None:
    transit = vault.secrets.transit
    name = unique("hv")
    transit.create_key(name)
    old = transit.encrypt_data(name, b64(b"secret"))["data"]["ciphertext"]
    assert transit.rotate_key(name)["data"]["latest_version"] == 2
    new = transit.rewrap_data(name, old)["data"]
    assert new["ciphertext"].startswith("vault:v2:")
    assert new["key_version"] == 2
    transit.update_key_configuration(name, min_decryption_version=2)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="too old"):
        transit.decrypt_data(name, old)
    opened = transit.decrypt_data(name, new["ciphertext"])["data"]["plaintext"]
    assert base64.b64decode(opened) == b"secret"
    assert list(transit.read_key(name)["data"]["keys"]) == ["2"]
    with pytest.raises(hvac.exceptions.InvalidRequest, match="version is too new"):
        transit.decrypt_data(name, new["ciphertext"].replace("vault:v2:", "vault:v3:"))
    with pytest.raises(hvac.exceptions.InvalidRequest, match="cannot set min decryption"):
        transit.update_key_configuration(name, min_decryption_version=5)


def test_v0_is_read_as_version_1(vault: hvac.Client) -> None:
    name = unique("hv")
    vault.secrets.transit.create_key(name)
    sealed = vault.secrets.transit.encrypt_data(name, b64(b"zero"))["data"]["ciphertext"]
    v0 = sealed.replace("vault:v1:", "vault:v0:")
    opened = vault.secrets.transit.decrypt_data(name, v0)["data"]["plaintext"]
    assert base64.b64decode(opened) == b"zero"


def test_export_only_for_exportable_keys(vault: hvac.Client) -> None:
    name = unique("hv")
    vault.secrets.transit.create_key(name)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="not exportable"):
        vault.secrets.transit.export_key(name, "encryption-key")
    name = unique("hv")
    vault.secrets.transit.create_key(name, exportable=True)
    vault.secrets.transit.rotate_key(name)
    keys = vault.secrets.transit.export_key(name, "encryption-key")["data"]["keys"]
    assert sorted(keys) == ["1", "2"]
    latest = vault.secrets.transit.export_key(name, "encryption-key", "latest")
    assert latest["data"]["keys"] == {"2": keys["2"]}


def test_a_key_made_exportable_opens_its_old_ciphertexts(vault: hvac.Client) -> None:
    """config exportable false -> true: every version's material exports and opens what that
    version sealed before the flip, with ``cryptography`` alone; true -> false is ignored."""
    transit = vault.secrets.transit
    name = unique("hv")
    transit.create_key(name)
    sealed = {1: transit.encrypt_data(name, b64(b"one"), associated_data=b64(b"ad"))}
    transit.rotate_key(name)
    sealed[2] = transit.encrypt_data(name, b64(b"two"), associated_data=b64(b"ad"))
    made = transit.update_key_configuration(name, exportable=True)["data"]
    assert (made["exportable"], made["latest_version"]) == (True, 2)
    assert transit.read_key(name)["data"]["exportable"] is True
    keys = transit.export_key(name, "encryption-key")["data"]["keys"]
    assert sorted(keys) == ["1", "2"]
    for version, plaintext in ((1, b"one"), (2, b"two")):
        text = sealed[version]["data"]["ciphertext"]
        assert text.startswith(f"vault:v{version}:")
        raw = base64.b64decode(text.split(":", 2)[2])
        aead = AESGCM(base64.b64decode(keys[str(version)]))
        assert aead.decrypt(raw[:12], raw[12:], b"ad") == plaintext
    # A version made after the flip exports too; false never takes the flag back (Transit).
    transit.rotate_key(name)
    kept = transit.update_key_configuration(name, exportable=False)["data"]
    assert kept["exportable"] is True
    assert sorted(transit.export_key(name, "encryption-key")["data"]["keys"]) == ["1", "2", "3"]


@pytest.mark.parametrize(("bits", "size"), [(None, 32), (128, 16), (256, 32), (512, 64)])
def test_data_keys(vault: hvac.Client, bits: int | None, size: int) -> None:
    transit = vault.secrets.transit
    name = unique("dk")
    transit.create_key(name, key_type="chacha20-poly1305")
    transit.rotate_key(name)
    extra = {} if bits is None else {"bits": bits}
    plain = transit.generate_data_key(name, key_type="plaintext", **extra)["data"]
    assert sorted(plain) == ["ciphertext", "key_version", "plaintext"]
    assert plain["key_version"] == 2
    assert plain["ciphertext"].startswith("vault:v2:")
    data_key = base64.b64decode(plain["plaintext"])
    assert len(data_key) == size
    # The ciphertext is the data key sealed like any plaintext: decrypt gives it back.
    opened = transit.decrypt_data(name, plain["ciphertext"])["data"]["plaintext"]
    assert base64.b64decode(opened) == data_key
    # hvac's generate_data_key has no key_version: the route through hvac's adapter.
    wrapped = vault.adapter.post(
        f"/v1/transit/datakey/wrapped/{name}", json={"key_version": 1, **extra}
    )["data"]
    assert sorted(wrapped) == ["ciphertext", "key_version"]
    assert wrapped["key_version"] == 1
    assert wrapped["ciphertext"].startswith("vault:v1:")
    unwrapped = base64.b64decode(
        transit.decrypt_data(name, wrapped["ciphertext"])["data"]["plaintext"]
    )
    assert len(unwrapped) == size
    assert unwrapped != data_key


def test_data_key_errors(server: Server, vault: hvac.Client) -> None:
    name = unique("dk")
    vault.secrets.transit.create_key(name)
    headers = {"X-Vault-Token": server.token}
    refusals = [
        ("datakey/other/" + name, {}, "Invalid path, must be 'plaintext' or 'wrapped'"),
        ("datakey/wrapped/" + unique("absent"), {}, "encryption key not found"),
        ("datakey/wrapped/" + name, {"bits": 64}, "invalid bit length"),
        ("datakey/wrapped/" + name, {"context": "!!"}, "failed to base64-decode context"),
        ("datakey/plaintext/" + name, {"key_version": 2}, TOO_HIGH),
    ]  # fmt: skip
    with httpx.Client(base_url=server.url + "/v1/transit", headers=headers) as http:
        for path, body, message in refusals:
            answer = http.post(path, json=body)
            assert (answer.status_code, answer.json()) == (400, {"errors": [message]}), path
        lenient = http.put(f"datakey/wrapped/{name}", json={"bits": "128", "key_version": "1"})
        assert lenient.status_code == 200
    encrypt_only = new_token(server, "encrypt:" + name)
    decrypt_only = new_token(server, "decrypt:" + name)
    allowed = hvac.Client(url=server.url, token=encrypt_only, strict_http=True)
    assert allowed.secrets.transit.generate_data_key(name, key_type="wrapped")["data"]["ciphertext"]
    refused = hvac.Client(url=server.url, token=decrypt_only, strict_http=True)
    with pytest.raises(hvac.exceptions.Forbidden, match="permission denied"):
        refused.secrets.transit.generate_data_key(name, key_type="wrapped")


def test_list_method(server: Server) -> None:
    """hvac's default client lists keys with Vault's LIST method, which httptools lacks."""
    name = unique("listed")
    plain = hvac.Client(url=server.url, token=server.token)  # strict_http=False: LIST
    plain.secrets.transit.create_key(name)
    assert name in plain.secrets.transit.list_keys()["data"]["keys"]
    command = ["curl", "-sS", "-X", "LIST", "-H", f"X-Vault-Token: {server.token}"]
    command += ["-w", "\n%{http_code}", f"{server.url}/v1/transit/keys"]
    listed = subprocess.run(command, capture_output=True, text=True, check=True).stdout  # noqa: S603
    body, status = listed.rsplit("\n", 1)
    assert status == "200"
    assert name in json.loads(body)["data"]["keys"]
    # LIST elsewhere: no such path, as in Vault.
    with pytest.raises(hvac.exceptions.InvalidPath, match="unsupported path"):
        plain.adapter.list(f"/v1/transit/encrypt/{name}")


def test_scopes(server: Server) -> None:
    name = unique("scoped")
    admin = hvac.Client(url=server.url, token=server.token, strict_http=True)
    admin.secrets.transit.create_key(name)
    encrypt_only = new_token(server, "encrypt:scoped-*")
    client = hvac.Client(url=server.url, token=encrypt_only, strict_http=True)
    sealed = client.secrets.transit.encrypt_data(name, "aGk=")["data"]["ciphertext"]
    assert client.secrets.transit.read_key(name)["data"]["latest_version"] == 1
    transit = client.secrets.transit
    refused: list[Callable[[], object]] = [
        functools.partial(transit.decrypt_data, name, sealed),
        functools.partial(transit.rewrap_data, name, sealed),
        functools.partial(transit.rotate_key, name),
        transit.list_keys,
        functools.partial(transit.encrypt_data, "other", "aGk="),
    ]
    for call in refused:
        with pytest.raises(hvac.exceptions.Forbidden, match="permission denied"):
            call()


def test_tokens_and_authentication(server: Server, vault: hvac.Client) -> None:
    assert vault.is_authenticated()
    assert not hvac.Client(url=server.url, token=secrets.token_urlsafe(32)).is_authenticated()
    data = vault.auth.token.lookup_self()["data"]
    assert (data["ttl"], data["renewable"], data["type"]) == (0, False, "service")
    assert "admin" in data["policies"]
    bearer = httpx.get(
        f"{server.url}/v1/transit/keys?list=true",
        headers={"Authorization": f"Bearer {server.token}"},
    )
    assert bearer.status_code == 200
    missing = httpx.post(f"{server.url}/v1/transit/encrypt/x", json={"plaintext": ""})
    assert (missing.status_code, missing.json()) == (403, {"errors": ["permission denied"]})
    assert missing.headers["content-type"] == "application/json"


def test_sys_health(server: Server, vault: hvac.Client) -> None:
    health = vault.sys.read_health_status(method="GET")
    assert (health["initialized"], health["sealed"], health["standby"]) == (True, False, False)
    assert isinstance(health["server_time_utc"], int)
    head = httpx.head(f"{server.url}/v1/sys/health")
    assert (head.status_code, head.content) == (200, b"")
    custom = httpx.get(f"{server.url}/v1/sys/health?activecode=204")
    assert custom.status_code == 204


def test_lenient_typing(server: Server) -> None:
    name = unique("lenient")
    headers = {"X-Vault-Token": server.token}
    with httpx.Client(base_url=server.url + "/v1/transit", headers=headers) as http:
        # aes128-gcm96 is Transit's, though hvac's own list of types leaves it out.
        created = http.put(f"/keys/{name}", json={"exportable": "true", "type": "aes128-gcm96"})
        assert created.json()["data"]["exportable"] is True
        assert created.json()["data"]["type"] == "aes128-gcm96"
        rotated = http.post(f"/keys/{name}/rotate", content=b"null")  # `write -f`
        assert rotated.json()["data"]["latest_version"] == 2
        body: dict[str, object] = {"plaintext": "aGk=", "key_version": "1"}
        assert http.post(f"/encrypt/{name}", json=body).json()["data"]["key_version"] == 1
        body = {"plaintext": None, "batch_input": [{"plaintext": "aGk=", "key_version": "2"}]}
        result = http.post(f"/encrypt/{name}", json=body).json()["data"]["batch_results"]
        assert result[0]["key_version"] == 2
        refused = http.put(f"/keys/-{name}", json={})
        assert refused.status_code == 400
        assert "key names are 1 to 64 ASCII characters" in refused.json()["errors"][0]


def test_usage_and_auto_rotate_period_in_key_metadata(vault: hvac.Client) -> None:
    name = unique("hv")
    transit = vault.secrets.transit
    transit.create_key(name, auto_rotate_period="24h")
    for _ in range(3):
        transit.encrypt_data(name, b64(b"counted"))
    transit.encrypt_data(name, b64(b""), batch_input=[{"plaintext": b64(b"x")}] * 4)
    data = transit.read_key(name)["data"]
    assert data["auto_rotate_period"] == 86400
    usage = data["sealflow_usage"]
    assert usage["max_encryptions"] == 2**32
    # Counted from a reserved block: never fewer than the 7 sealings made.
    assert usage["versions"]["1"]["encryptions"] >= 7
    assert usage["encryptions_left"] == 2**32 - usage["versions"]["1"]["encryptions"]
    assert usage["next_rotation"] == data["keys"]["1"] + 86400
    transit.update_key_configuration(name, auto_rotate_period="0")
    assert transit.read_key(name)["data"]["auto_rotate_period"] == 0
    with pytest.raises(hvac.exceptions.InvalidRequest, match="at least an hour"):
        transit.update_key_configuration(name, auto_rotate_period="30m")


TOO_LOW = "requested version for encryption is less than the minimum encryption key version"


def test_min_encryption_version(server: Server, vault: hvac.Client) -> None:
    transit = vault.secrets.transit
    name = unique("hv")
    transit.create_key(name)
    transit.rotate_key(name)
    transit.rotate_key(name)
    data = transit.update_key_configuration(name, min_encryption_version=2)["data"]
    assert (data["min_encryption_version"], data["min_decryption_version"]) == (2, 1)
    assert transit.read_key(name)["data"]["min_encryption_version"] == 2
    with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
        transit.encrypt_data(name, b64(b"x"), key_version=1)
    assert refused.value.errors == [TOO_LOW]
    assert transit.encrypt_data(name, b64(b"x"))["data"]["key_version"] == 3
    assert transit.encrypt_data(name, b64(b"x"), key_version=2)["data"]["key_version"] == 2
    batch = [{"plaintext": b64(b"a"), "key_version": 1}, {"plaintext": b64(b"b")}]
    with pytest.raises(hvac.exceptions.InvalidRequest) as partly:
        transit.encrypt_data(name, batch_input=batch)
    results = partly.value.json["data"]["batch_results"]
    assert results[0] == {"error": TOO_LOW, "reference": ""}
    assert results[1]["key_version"] == 3
    old = transit.encrypt_data(name, b64(b"x"), key_version=2)["data"]["ciphertext"]
    with pytest.raises(hvac.exceptions.InvalidRequest, match=TOO_LOW):
        transit.rewrap_data(name, old, key_version=1)
    # Decryption of older versions is min_decryption_version's business, not this rule's.
    assert transit.decrypt_data(name, old)["data"]["plaintext"] == b64(b"x")
    with pytest.raises(hvac.exceptions.InvalidRequest) as made:
        vault.adapter.post(f"/v1/transit/datakey/plaintext/{name}", json={"key_version": 1})
    assert made.value.errors == [TOO_LOW]
    # Transit's words for a rule out of range, and for the pair.
    refusals = {
        "cannot set min encryption version of 4, latest key version is 3": {
            "min_encryption_version": 4
        },
        "min encryption version cannot be negative": {"min_encryption_version": -1},
        "cannot set min encryption/decryption values; min encryption version of 2 must be"
        " greater than or equal to min decryption version of 3": {"min_decryption_version": 3},
    }
    for message, fields in refusals.items():
        with pytest.raises(hvac.exceptions.InvalidRequest) as bad:
            # Through the adapter: hvac checks some of these itself, Vault's clients in Go not.
            vault.adapter.post(f"/v1/transit/keys/{name}/config", json=fields)
        assert bad.value.errors == [message]
    after = transit.read_key(name)["data"]
    assert (after["min_encryption_version"], after["min_decryption_version"]) == (2, 1)
    # (hvac itself refuses the two equal, which Transit allows: the adapter for that.)
    both = transit.update_key_configuration(
        name, min_decryption_version=2, min_encryption_version=3
    )["data"]
    assert (both["min_encryption_version"], both["min_decryption_version"]) == (3, 2)
    equal = {"min_decryption_version": 3, "min_encryption_version": 3}
    assert (
        vault.adapter.post(f"/v1/transit/keys/{name}/config", json=equal)["data"][
            "min_decryption_version"
        ]
        == 3
    )
    # The admin CLI shows it too.
    shown = server.cli("keys", "show", name, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["min_encryption_version"] == 3


def test_delete_key_only_when_allowed(server: Server, vault: hvac.Client) -> None:
    transit = vault.secrets.transit
    name = unique("hv")
    transit.create_key(name)
    old = transit.encrypt_data(name, b64(b"before"))["data"]["ciphertext"]
    with server.client() as native:
        envelope = native.post(f"/v1/keys/{name}/encrypt?mode=single", content=b"before")
        assert envelope.status_code == 200
    scoped = new_token(server, f"encrypt:{name}", f"decrypt:{name}")
    user = hvac.Client(url=server.url, token=scoped, strict_http=True).secrets.transit
    with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
        transit.delete_key(name)
    assert refused.value.errors == [
        f"error deleting policy {name}: deletion is not allowed for this key"
    ]
    absent = unique("absent")
    with pytest.raises(hvac.exceptions.InvalidRequest) as missing:
        transit.delete_key(absent)
    assert missing.value.errors == [
        f"error deleting policy {absent}: could not delete key; not found"
    ]
    assert transit.read_key(name)["data"]["deletion_allowed"] is False
    data = transit.update_key_configuration(name, deletion_allowed=True)["data"]
    assert data["deletion_allowed"] is True
    with pytest.raises(hvac.exceptions.Forbidden):
        user.delete_key(name)  # an admin act
    assert transit.delete_key(name).status_code == 204
    with pytest.raises(hvac.exceptions.InvalidPath):
        transit.read_key(name)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="encryption key not found"):
        transit.decrypt_data(name, old)
    with server.client() as native:
        gone = native.post(f"/v1/keys/{name}/decrypt", content=envelope.content)
        assert (gone.status_code, gone.json()["error"]["code"]) == (404, "key_not_found")
    # A new key of the same name: the scoped token works on it, and what the old key sealed
    # fails to authenticate under it, on either API (never opened with the new material).
    transit.create_key(name)
    assert transit.read_key(name)["data"]["deletion_allowed"] is False
    sealed = user.encrypt_data(name, b64(b"after"))["data"]["ciphertext"]
    assert user.decrypt_data(name, sealed)["data"]["plaintext"] == b64(b"after")
    with pytest.raises(hvac.exceptions.InvalidRequest) as stale:
        user.decrypt_data(name, old)
    assert stale.value.errors == ["cipher: message authentication failed"]
    with server.client() as native:
        stale_native = native.post(f"/v1/keys/{name}/decrypt", content=envelope.content)
        assert stale_native.status_code == 400
        assert stale_native.json()["error"]["code"] == "decryption_failed"
    time.sleep(0.3)  # log lines go out in batches
    logged = [json.loads(line) for line in server.log.read_text().splitlines() if "{" in line[:1]]
    deleted = [e for e in logged if f"key '{name}' deleted with its" in e.get("msg", "")]
    assert len(deleted) == 1, deleted
    assert (deleted[0]["logger"], deleted[0]["level"]) == ("sealflow.keystore", "warning")


def test_vault_key_names_through_transit_only(server: Server, vault: hvac.Client) -> None:
    transit = vault.secrets.transit
    name = f"Orders_{secrets.token_hex(3)}"
    transit.create_key(name)
    sealed = transit.encrypt_data(name, b64(b"vault name"))["data"]["ciphertext"]
    assert transit.decrypt_data(name, sealed)["data"]["plaintext"] == b64(b"vault name")
    assert transit.read_key(name)["data"]["name"] == name
    assert name in transit.list_keys()["data"]["keys"]
    scoped = new_token(server, "encrypt:Orders_*", "decrypt:Orders_*")
    user = hvac.Client(url=server.url, token=scoped, strict_http=True).secrets.transit
    assert user.decrypt_data(name, sealed)["data"]["plaintext"] == b64(b"vault name")
    listed = server.cli("keys", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert name in [k["name"] for k in json.loads(listed.stdout)]
    with server.client() as native:
        for path in (f"/v1/keys/{name}/encrypt?mode=single", f"/v1/keys/{name}/decrypt"):
            refused = native.post(path, content=b"x")
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert error["code"] == "bad_request"
            assert "Transit API only" in error["message"]
        shown = native.get(f"/v1/keys/{name}")  # the admin API shows it
        assert (shown.status_code, shown.json()["name"]) == (200, name)
