"""OpenBao's ``byok-export`` between sealflow and a real OpenBao dev server, both ways, through
hvac's generic ``read``/``write_data``: the destination engine's wrapping key imported as an
``rsa-4096`` ``public_key`` key, the source's versions wrapped for it, imported there with
``import`` and ``import_version``, and the source's Transit ciphertexts decrypted there. And the
refusals, in OpenBao's words (400s where OpenBao answers 500), and the scope it needs."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import hvac
import hvac.exceptions
import pytest

from tests.service.byok import other_public_pem
from tests.service.conftest import Server
from tests.service.server.test_auth import new_token
from tests.service.transit.conftest import Bao, unique


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _keyed(client: hvac.Client, versions: int) -> tuple[str, dict[int, str]]:
    """An exportable key with ``versions`` versions, and a ciphertext made under each."""
    name = unique("src")
    client.secrets.transit.create_key(name, exportable=True)
    for _ in range(versions - 1):
        client.secrets.transit.rotate_key(name)
    made = {
        v: client.secrets.transit.encrypt_data(name, b64(f"v{v}".encode()), key_version=v)["data"][
            "ciphertext"
        ]
        for v in range(1, versions + 1)
    }
    return name, made


def _destination(into: hvac.Client, wrapping_of: hvac.Client) -> str:
    """``wrapping_of``'s wrapping key imported into ``into`` as a public-key-only key."""
    pem = wrapping_of.read("transit/wrapping_key")["data"]["public_key"]
    name = unique("dst")
    into.write_data(f"transit/keys/{name}/import", data={"type": "rsa-4096", "public_key": pem})
    return name


def _move(source: hvac.Client, target: hvac.Client, name: str) -> dict[str, Any]:
    """byok-export every version of ``name`` from ``source`` and import them into ``target``."""
    destination = _destination(source, target)
    answer: dict[str, Any] = source.read(f"transit/byok-export/{destination}/{name}")
    keys = answer["data"]["keys"]
    numbers = sorted(keys, key=int)
    target.write_data(f"transit/keys/{name}/import", data={"ciphertext": keys[numbers[0]]})
    for number in numbers[1:]:
        target.write_data(f"transit/keys/{name}/import_version", data={"ciphertext": keys[number]})
    return answer


def _opens(client: hvac.Client, name: str, made: dict[int, str]) -> None:
    for v, ciphertext in made.items():
        opened = client.secrets.transit.decrypt_data(name, ciphertext)["data"]["plaintext"]
        assert base64.b64decode(opened) == f"v{v}".encode()


def test_a_sealflow_key_byok_exported_into_openbao_decrypts_there(
    vault: hvac.Client, openbao: hvac.Client
) -> None:
    name, made = _keyed(vault, 3)
    answer = _move(vault, openbao, name)
    assert answer["data"]["name"] == name
    assert answer["data"]["type"] == "aes256-gcm96"
    assert sorted(answer["data"]["keys"]) == ["1", "2", "3"]
    _opens(openbao, name, made)
    assert openbao.secrets.transit.read_key(name)["data"]["latest_version"] == 3


def test_an_openbao_key_byok_exported_into_sealflow_has_the_same_shape(
    vault: hvac.Client, openbao: hvac.Client
) -> None:
    name, made = _keyed(openbao, 2)
    from_bao = _move(openbao, vault, name)
    _opens(vault, name, made)
    again, _ = _keyed(vault, 2)
    from_sealflow = vault.read(f"transit/byok-export/{_destination(vault, openbao)}/{again}")
    assert from_sealflow["data"].keys() == from_bao["data"].keys()
    assert from_sealflow["data"]["keys"].keys() == from_bao["data"]["keys"].keys()


def test_a_public_key_reads_and_lists_as_on_openbao(
    vault: hvac.Client, openbao: hvac.Client
) -> None:
    pem = other_public_pem()
    shown = []
    for client in (openbao, vault):
        name = unique("pub")
        client.write_data(
            f"transit/keys/{name}/import", data={"type": "rsa-4096", "public_key": pem}
        )
        key = client.secrets.transit.read_key(name)["data"]
        assert name in client.secrets.transit.list_keys()["data"]["keys"]
        shown.append(key)
        # Deletion follows deletion_allowed, as for every key.
        with pytest.raises(hvac.exceptions.VaultError, match="deletion is not allowed"):
            client.secrets.transit.delete_key(name)
        client.secrets.transit.update_key_configuration(name, deletion_allowed=True)
        client.secrets.transit.delete_key(name)
        with pytest.raises(hvac.exceptions.InvalidPath):
            client.secrets.transit.read_key(name)
    bao, ours = shown
    assert ours.keys() == bao.keys()
    assert ours["keys"]["1"].keys() == bao["keys"]["1"].keys()
    assert ours["keys"]["1"]["public_key"] == bao["keys"]["1"]["public_key"] == pem
    for field in ("type", "imported_key", "latest_version", "exportable", "deletion_allowed"):
        assert ours[field] == bao[field], field
    assert ours["keys"]["1"]["name"] == "rsa-4096"


def _call(url: str, token: str, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(
        method, f"{url}/v1/transit/{path}", json=body, headers={"X-Vault-Token": token}, timeout=60
    )


def test_refusals_in_openbaos_words(
    server: Server, bao: Bao, vault: hvac.Client, openbao: hvac.Client
) -> None:
    sides = ((server.url, server.token, vault), (bao.url, bao.token, openbao))
    for url, token, client in sides:
        ours = url == server.url
        public = _destination(client, vault)
        plain = unique("plain")
        client.secrets.transit.create_key(plain)
        source, _ = _keyed(client, 2)
        cases: list[tuple[str, str, Any, int, str]] = [
            ("GET", f"byok-export/{public}/{plain}", None, 400, "key is not exportable"),
            (
                "GET",
                f"byok-export/{plain}/{source}",
                None,
                400 if ours else 500,
                "key wrapping (requring message signing) is not supported for key type"
                " aes256-gcm96",
            ),
            (
                "GET",
                f"byok-export/{unique('none')}/{source}",
                None,
                400 if ours else 500,
                "no such destination key to export to",
            ),
            (
                "GET",
                f"byok-export/{public}/{unique('none')}",
                None,
                400 if ours else 500,
                "no such source key for export",
            ),
            ("GET", f"byok-export/{public}/{source}/7", None, 400, "version does not exist"),
            ("GET", f"byok-export/{public}/{source}/x", None, 400, "invalid key version"),
            (
                "GET",
                f"byok-export/{public}/{source}?hash=MD5",
                None,
                400 if ours else 500,
                "unknown hash function: MD5",
            ),
            (
                "POST",
                f"keys/{public}/rotate",
                None,
                400 if ours else 500,
                f"imported key {public} does not allow rotation within Vault",
            ),
            (
                "POST",
                f"decrypt/{public}",
                {"ciphertext": "vault:v1:aGVsbG8="},
                400 if ours else 500,
                "cannot decrypt ciphertext, key version does not have a private counterpart",
            ),
            (
                "GET",
                f"export/encryption-key/{public}",
                None,
                400,
                "private key material is not exportable",
            ),
            (
                "POST",
                f"keys/{unique('rsa')}/import",
                {"type": "rsa-2048", "public_key": other_public_pem()},
                400 if ours else 500,
                "invalid key size: expected 256 bytes, got 512 bytes",
            ),
            (
                "POST",
                f"keys/{unique('rsa')}/import",
                {"type": "rsa-4096", "public_key": "garbage"},
                400 if ours else 500,
                "error parsing public key: not in PEM format",
            ),
            (
                "POST",
                f"keys/{unique('rsa')}/import",
                {"type": "aes256-gcm96", "public_key": other_public_pem()},
                400 if ours else 500,
                "provided type does not support public_key import",
            ),
        ]
        for method, path, body, status, words in cases:
            r = _call(url, token, method, path, body)
            assert r.status_code == status, (path, r.text)
            assert words in r.json()["errors"][0], (path, r.text)
    # Encrypt: OpenBao encrypts with the RSA public key; sealflow does no RSA, and says so.
    public = _destination(vault, openbao)
    refused = [
        f"key {public} is a public key (rsa-4096): sealflow uses it only as a byok-export"
        " destination"
    ]
    for path, body in (
        (f"encrypt/{public}", {"plaintext": "aGk="}),
        (f"encrypt/{public}", {"batch_input": [{"plaintext": "aGk="}]}),
        (f"datakey/plaintext/{public}", {}),
    ):
        r = _call(server.url, server.token, "POST", path, body)
        assert r.status_code == 400, (path, r.text)
        assert r.json()["errors"] == refused, path
    r = _call(server.url, server.token, "POST", f"rewrap/{public}", {"ciphertext": "vault:v1:aGk="})
    assert r.status_code == 400
    assert "does not have a private counterpart" in r.json()["errors"][0]


def test_byok_export_needs_the_export_scope_not_admin(server: Server, vault: hvac.Client) -> None:
    source, _ = _keyed(vault, 1)
    destination = _destination(vault, vault)
    path = f"byok-export/{destination}/{source}"
    admin = new_token(server, "admin")
    assert _call(server.url, admin, "GET", path).status_code == 403
    exporter = new_token(server, "export:*")
    assert _call(server.url, exporter, "GET", path).status_code == 403  # and admin, as export
    both = new_token(server, "admin", f"export:{source}")
    r = _call(server.url, both, "GET", path)
    assert r.status_code == 200, r.text
    assert list(r.json()["data"]["keys"]) == ["1"]


def test_the_native_byok_export_imports_into_openbao(
    server: Server, vault: hvac.Client, openbao: hvac.Client
) -> None:
    name, made = _keyed(vault, 2)
    destination = _destination(vault, openbao)
    url = f"{server.url}/v1/keys/{name}/byok-export/{destination}"

    def get(token: str, **params: Any) -> httpx.Response:
        return httpx.get(url, params=params, headers={"Authorization": f"Bearer {token}"})

    assert get(new_token(server, "admin")).status_code == 403
    r = get(server.token, hash="sha512")
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["name"], body["algorithm"], sorted(body["keys"])) == (
        name,
        "aes-256-gcm",
        ["1", "2"],
    )
    keys = body["keys"]
    openbao.write_data(
        f"transit/keys/{name}/import", data={"ciphertext": keys["1"], "hash_function": "SHA512"}
    )
    openbao.write_data(
        f"transit/keys/{name}/import_version",
        data={"ciphertext": keys["2"], "hash_function": "SHA512"},
    )
    _opens(openbao, name, made)
    assert sorted(get(server.token, version=2).json()["keys"]) == ["2"]
    elsewhere = f"{server.url}/v1/keys/{name}/byok-export/{unique('none')}"
    r = httpx.get(elsewhere, headers={"Authorization": f"Bearer {server.token}"})
    assert r.status_code == 404
    plain = unique("plain")
    vault.secrets.transit.create_key(plain)
    r = httpx.get(
        f"{server.url}/v1/keys/{plain}/byok-export/{destination}",
        headers={"Authorization": f"Bearer {server.token}"},
    )
    assert r.status_code == 403


def test_a_public_key_is_only_ever_a_destination(server: Server, vault: hvac.Client) -> None:
    public = _destination(vault, vault)
    pem = vault.secrets.transit.read_key(public)["data"]["keys"]["1"]["public_key"]
    # A create under its name answers it unchanged, as Transit answers a key that exists.
    r = _call(server.url, server.token, "POST", f"keys/{public}", {"type": "aes256-gcm96"})
    assert r.status_code == 200
    assert (r.json()["data"]["type"], r.json()["data"]["keys"]["1"]["public_key"]) == (
        "rsa-4096",
        pem,
    )
    native = httpx.post(
        f"{server.url}/v1/keys",
        json={"name": public, "algorithm": "aes-256-gcm"},
        headers={"Authorization": f"Bearer {server.token}"},
    )
    assert native.status_code == 409
    made = unique("made")
    vault.secrets.transit.create_key(made)
    cases: list[tuple[str, dict[str, Any], str]] = [
        (
            f"keys/{public}/import_version",
            {"public_key": pem},
            "public_key import_version is not supported by sealflow",
        ),
        (f"keys/{public}/config", {"exportable": True}, "exportable is not supported"),
        (
            f"keys/{public}/import_version",
            {"ciphertext": "AAAA"},
            f"key {public} is a public key (rsa-4096)",
        ),
        (
            f"keys/{unique('rsa')}/import",
            {"type": "rsa-4096", "public_key": pem, "exportable": True},
            "exportable is not supported by sealflow",
        ),
        (
            f"keys/{made}/import",
            {"type": "rsa-4096", "public_key": pem},
            "the import path cannot be used with an existing key",
        ),
        (
            f"keys/{public}/import",
            {"type": "rsa-4096", "public_key": pem},
            "the import path cannot be used with an existing key",
        ),
    ]
    for path, body, words in cases:
        r = _call(server.url, server.token, "POST", path, body)
        assert r.status_code == 400, (path, r.text)
        assert words in r.json()["errors"][0], (path, r.text)
    key = vault.secrets.transit.read_key(public)["data"]
    assert (key["type"], key["exportable"], key["latest_version"]) == ("rsa-4096", False, 1)
    assert vault.secrets.transit.read_key(made)["data"]["type"] == "aes256-gcm96"
