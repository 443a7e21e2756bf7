"""Transit's BYOK import through hvac 2.4 (its generic ``read`` and ``write_data``: it has no
``import_key``), the same code against a real OpenBao dev server and against sealflow; the same
material imported into both, so each one's ciphertexts open on the other; the bad inputs, each
a 400 in OpenBao's words with nothing written; and the scopes it needs."""

from __future__ import annotations

import base64
import os
from typing import Any

import httpx
import hvac
import hvac.exceptions
import pytest

from tests.service.byok import other_public_pem, wrap, wrap_raw
from tests.service.conftest import Server
from tests.service.server.test_auth import new_token
from tests.service.transit.conftest import unique


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def import_flow(client: hvac.Client, name: str, one: bytes, two: bytes) -> list[str]:
    """Read the wrapping key, wrap locally, import, import a second version, encrypt under
    each: what a Vault user's script does, unchanged whichever server it talks to."""
    pem = client.read("transit/wrapping_key")["data"]["public_key"]
    client.write_data(f"transit/keys/{name}/import", data={"ciphertext": wrap(pem, one)})
    client.write_data(
        f"transit/keys/{name}/import_version",
        data={"ciphertext": wrap(pem, two, "SHA512"), "hash_function": "SHA512"},
    )
    key = client.secrets.transit.read_key(name)["data"]
    assert key["imported_key"] is True
    assert key["latest_version"] == 2
    return [
        client.secrets.transit.encrypt_data(name, b64(b"hello"), key_version=v)["data"][
            "ciphertext"
        ]
        for v in (1, 2)
    ]


def test_the_same_import_on_openbao_and_sealflow_opens_both_ways(
    openbao: hvac.Client, vault: hvac.Client
) -> None:
    name, one, two = unique("byok"), os.urandom(32), os.urandom(32)
    from_bao = import_flow(openbao, name, one, two)
    from_sealflow = import_flow(vault, name, one, two)
    assert [c[:9] for c in from_sealflow] == ["vault:v1:", "vault:v2:"]
    for ciphertext in from_bao:
        opened = vault.secrets.transit.decrypt_data(name, ciphertext)["data"]["plaintext"]
        assert base64.b64decode(opened) == b"hello"
    for ciphertext in from_sealflow:
        opened = openbao.secrets.transit.decrypt_data(name, ciphertext)["data"]["plaintext"]
        assert base64.b64decode(opened) == b"hello"


def test_rotation_follows_allow_rotation(openbao: hvac.Client, vault: hvac.Client) -> None:
    for client in (openbao, vault):
        fixed, free = unique("fixed"), unique("free")
        pem = client.read("transit/wrapping_key")["data"]["public_key"]
        client.write_data(
            f"transit/keys/{fixed}/import", data={"ciphertext": wrap(pem, os.urandom(32))}
        )
        client.write_data(
            f"transit/keys/{free}/import",
            data={"ciphertext": wrap(pem, os.urandom(32)), "allow_rotation": True},
        )
        with pytest.raises(hvac.exceptions.VaultError) as refused:
            client.secrets.transit.rotate_key(fixed)
        assert f"imported key {fixed} does not allow rotation" in str(refused.value)
        client.secrets.transit.rotate_key(free)
        assert client.secrets.transit.read_key(free)["data"]["latest_version"] == 2


def test_allow_plaintext_backup_on_import(openbao: hvac.Client, vault: hvac.Client) -> None:
    """Vault takes ``allow_plaintext_backup`` (and ``exportable``) on import: the imported key
    can then be backed up, on both servers."""
    for client in (openbao, vault):
        name = unique("backed")
        pem = client.read("transit/wrapping_key")["data"]["public_key"]
        client.write_data(
            f"transit/keys/{name}/import",
            data={
                "ciphertext": wrap(pem, os.urandom(32)),
                "exportable": True,
                "allow_plaintext_backup": True,
            },
        )
        key = client.secrets.transit.read_key(name)["data"]
        assert (key["allow_plaintext_backup"], key["exportable"]) == (True, True)
        assert client.secrets.transit.backup_key(name)["data"]["backup"]


def _post(
    server: Server, path: str, body: dict[str, Any], token: str | None = None
) -> httpx.Response:
    headers = {"X-Vault-Token": token or server.token}
    return httpx.post(f"{server.url}/v1/transit/{path}", json=body, headers=headers, timeout=60)


def _key_absent(server: Server, name: str) -> bool:
    r = httpx.get(
        f"{server.url}/v1/transit/keys/{name}", headers={"X-Vault-Token": server.token}, timeout=60
    )
    return r.status_code == 404


def test_bad_imports_are_400s_in_openbaos_words_and_write_nothing(
    server: Server, vault: hvac.Client
) -> None:
    pem = vault.read("transit/wrapping_key")["data"]["public_key"]
    raw = wrap_raw(pem, os.urandom(32))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"ciphertext": wrap(other_public_pem(), os.urandom(32))}, "crypto/rsa: decryption error"),
        ({"ciphertext": b64(raw[:400])}, "provided ciphertext is too short"),
        ({"ciphertext": b64(raw[:-8])}, "kwp: unwrap failed integrity check"),
        (
            {"ciphertext": b64(raw[:-1] + bytes([raw[-1] ^ 1]))},
            "kwp: unwrap failed integrity check",
        ),
        ({"ciphertext": b64(raw), "hash_function": "MD5"}, "unknown hash function: MD5"),
        ({"ciphertext": b64(raw), "hash_function": "SHA1"}, "crypto/rsa: decryption error"),
        (
            {"ciphertext": wrap(pem, os.urandom(16))},
            "invalid key size 16 bytes for key type aes256-gcm96",
        ),
        ({"ciphertext": b64(raw), "type": "rsa-2048"}, "key type rsa-2048 is not supported"),
        (
            {"ciphertext": wrap(pem, os.urandom(16)), "type": "hmac"},
            "invalid key size 16 bytes for key type hmac",
        ),
        (
            {"ciphertext": b64(raw), "auto_rotate_period": "24h"},
            "allow_rotation must be set to true if auto-rotation is enabled",
        ),
    ]
    for body, words in cases:
        name = unique("bad")
        r = _post(server, f"keys/{name}/import", body)
        assert r.status_code == 400, (words, r.text)
        assert words in r.json()["errors"][0], (words, r.text)
        assert _key_absent(server, name)
    made = unique("made")
    vault.secrets.transit.create_key(made)
    r = _post(server, f"keys/{made}/import", {"ciphertext": b64(raw)})
    assert r.status_code == 400
    assert "the import path cannot be used with an existing key" in r.json()["errors"][0]
    r = _post(server, f"keys/{made}/import_version", {"ciphertext": b64(raw)})
    assert r.status_code == 400
    assert r.json()["errors"] == [
        "the import_version endpoint can only be used with an imported key"
    ]
    key = vault.secrets.transit.read_key(made)["data"]
    assert (key["latest_version"], key["imported_key"]) == (1, False)
    imported = unique("imported")
    assert _post(server, f"keys/{imported}/import", {"ciphertext": b64(raw)}).status_code == 204
    for version, words in ((1, "provided type does not support importing key versions"),
                           (7, "no such key version")):  # fmt: skip
        body = {"ciphertext": wrap(pem, os.urandom(32)), "version": version}
        r = _post(server, f"keys/{imported}/import_version", body)
        assert r.status_code == 400
        assert r.json()["errors"] == [words]
    assert vault.secrets.transit.read_key(imported)["data"]["latest_version"] == 1


def test_openbao_refuses_the_same_ciphertexts_in_the_same_words(openbao: hvac.Client) -> None:
    pem = openbao.read("transit/wrapping_key")["data"]["public_key"]
    raw = wrap_raw(pem, os.urandom(32))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"ciphertext": wrap(other_public_pem(), os.urandom(32))}, "crypto/rsa: decryption error"),
        ({"ciphertext": b64(raw[:400])}, "provided ciphertext is too short"),
        ({"ciphertext": b64(raw[:-8])}, "kwp: unwrap failed integrity check"),
        ({"ciphertext": b64(raw[:-1])}, "kwp: wrapped key size must be a multiple of 8 bytes"),
        ({"ciphertext": b64(raw), "hash_function": "MD5"}, "unknown hash function: MD5"),
        (
            {"ciphertext": wrap(pem, os.urandom(16))},
            "error importing key: invalid key size 16 bytes for key type aes256-gcm96",
        ),
    ]
    for body, words in cases:
        name = unique("bad")
        with pytest.raises(hvac.exceptions.VaultError) as refused:
            openbao.write_data(f"transit/keys/{name}/import", data=body)
        assert words in str(refused.value), (words, str(refused.value))


def test_import_needs_the_export_scope_and_admin_alone_is_not_enough(server: Server) -> None:
    name = unique("scoped")
    admin = new_token(server, "admin")
    reader = new_token(server, "encrypt:nothing")
    pem = httpx.get(
        f"{server.url}/v1/transit/wrapping_key", headers={"X-Vault-Token": reader}, timeout=60
    ).json()["data"]["public_key"]
    body = {"ciphertext": wrap(pem, os.urandom(32))}
    assert _post(server, f"keys/{name}/import", body, admin).status_code == 403
    assert _key_absent(server, name)
    allowed = new_token(server, "admin", f"export:{name}")
    assert _post(server, f"keys/{name}/import", body, allowed).status_code == 204
    assert not _key_absent(server, name)


def test_native_import_routes(server: Server) -> None:
    name = unique("native")
    material = os.urandom(32)
    with server.client() as http:
        pem = http.get("/v1/wrapping-key").json()["public_key"]
        r = http.post(f"/v1/keys/{name}/import", json={"ciphertext": wrap(pem, material)})
        assert r.status_code == 201, r.text
        assert (r.json()["imported"], r.json()["latest"]) == (True, 1)
        r = http.post(f"/v1/keys/{name}/import-version", json={"ciphertext": wrap(pem, material)})
        assert r.status_code == 200, r.text
        assert r.json()["latest"] == 2
        r = http.post(f"/v1/keys/{name}/import-version", json={"ciphertext": "AAAA"})
        assert r.status_code == 400
        assert "provided ciphertext is too short" in r.json()["error"]["message"]
        assert http.get(f"/v1/keys/{name}").json()["latest"] == 2
        bad = http.post("/v1/keys/nothing-here/import", json={"ciphertext": wrap(pem, b"x" * 16)})
        assert bad.status_code == 400
        assert "invalid key size 16 bytes" in bad.json()["error"]["message"]
        assert http.get("/v1/keys/nothing-here").status_code == 404
    admin = new_token(server, "admin")
    with server.client(admin) as http:
        r = http.post(f"/v1/keys/{unique('n')}/import", json={"ciphertext": wrap(pem, material)})
        assert r.status_code == 403
        assert http.get("/v1/wrapping-key").json()["public_key"] == pem
