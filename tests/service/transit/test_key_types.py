"""Transit's key types against a real OpenBao dev server (issue 28, item 1): ``keys/:name``
creates ``hmac`` (with ``key_size``), ``ed25519``, ``ecdsa-p256/384/521`` and
``rsa-2048/3072/4096`` keys, and derived and convergent AEAD keys, read back in OpenBao's shape;
the refusals of bad combinations match OpenBao's status and words; a key of a type that does
not encrypt is refused by every encryption path (Transit's and the native API's), a derived
key by every path that takes no context, and neither gives material to ``export/encryption-key``.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.service.conftest import Server
from tests.service.transit.conftest import Bao, unique
from tests.service.transit.test_utility import both, same_refusal

# The fields whose values the same creation fixes (times and names aside).
_FIXED = (
    "type",
    "derived",
    "exportable",
    "deletion_allowed",
    "latest_version",
    "min_decryption_version",
    "min_encryption_version",
    "min_available_version",
    "supports_encryption",
    "supports_decryption",
    "supports_signing",
    "supports_derivation",
    "key_size",
    "kdf",
    "convergent_encryption",
    "convergent_encryption_version",
    "imported_key",
    "soft_deleted",
    "auto_rotate_period",
    "allow_plaintext_backup",
)

CREATIONS: list[dict[str, Any]] = [
    {"type": "hmac", "key_size": 32},
    {"type": "hmac", "key_size": 512},
    {"type": "ed25519"},
    {"type": "ed25519", "derived": True},
    {"type": "ecdsa-p256"},
    {"type": "ecdsa-p384"},
    {"type": "ecdsa-p521"},
    {"type": "rsa-2048"},
    {"type": "rsa-3072"},
    {"type": "aes256-gcm96", "derived": True},
    {"type": "aes128-gcm96", "derived": True, "convergent_encryption": True},
    {"type": "chacha20-poly1305", "derived": True, "convergent_encryption": True},
]


def _read(server: Server, bao: Bao, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    ours, theirs = both(server, bao, f"keys/{name}", method="GET")
    return ours.json()["data"], theirs.json()["data"]


@pytest.mark.parametrize("body", CREATIONS, ids=lambda b: "-".join(str(v) for v in b.values()))
def test_a_key_of_each_type_reads_as_openbao_shows_it(
    server: Server, bao: Bao, body: dict[str, Any]
) -> None:
    name = unique("kt")
    both(server, bao, f"keys/{name}", body)
    both(server, bao, f"keys/{name}/rotate", {})
    ours, theirs = _read(server, bao, name)
    assert {f: ours.get(f) for f in _FIXED} == {f: theirs.get(f) for f in _FIXED}
    assert ("keys" in ours) == ("keys" in theirs)
    if "keys" not in theirs:
        return
    assert sorted(ours["keys"]) == sorted(theirs["keys"]) == ["1", "2"]
    if not ours["supports_signing"]:
        assert all(isinstance(t, int) for t in ours["keys"].values())
        return
    for version, entry in ours["keys"].items():
        other = theirs["keys"][version]
        assert sorted(entry) == sorted(other)
        assert entry["name"] == other["name"]
        assert entry["creation_time"].endswith("Z")
        if body.get("derived"):  # an ed25519 derived key's public key needs a context
            assert entry["public_key"] == other["public_key"] == ""
        elif body["type"] == "ed25519":
            assert len(base64.b64decode(entry["public_key"])) == 32
        else:
            loaded = serialization.load_pem_public_key(entry["public_key"].encode())
            theirs_loaded = serialization.load_pem_public_key(other["public_key"].encode())
            assert type(loaded) is type(theirs_loaded)
    assert ours["keys"]["1"]["public_key"] != ours["keys"]["2"]["public_key"] or body.get("derived")


@pytest.mark.parametrize(
    "body",
    [
        {"type": "aes256-gcm96", "convergent_encryption": True},
        {"type": "aes256-gcm96", "key_size": 32},
        {"type": "ed25519", "key_size": 64},
        {"type": "hmac", "key_size": 31},
        {"type": "hmac", "key_size": 513},
        {"type": "no-such-type"},
    ],
    ids=lambda b: "-".join(str(v) for v in b.values()),
)
def test_bad_creations_are_refused_as_openbao_refuses_them(
    server: Server, bao: Bao, body: dict[str, Any]
) -> None:
    name = unique("bad")
    same_refusal(server, bao, f"keys/{name}", body)
    ours, _ = both(server, bao, f"keys/{name}", method="GET")
    assert ours.status_code == 404  # nothing written


@pytest.mark.parametrize(
    "body",
    [
        {"type": "hmac"},
        {"type": "hmac", "key_size": 32, "derived": True},
        {"type": "ecdsa-p256", "derived": True},
        {"type": "rsa-2048", "derived": True},
        {"type": "ed25519", "derived": True, "convergent_encryption": True},
    ],
    ids=lambda b: "-".join(str(v) for v in b.values()),
)
def test_creations_openbao_fails_are_refused_in_its_words(
    server: Server, bao: Bao, body: dict[str, Any]
) -> None:
    """OpenBao answers these with an error of its own (not a 400: its key manager's error, a
    500); sealflow gives the same words as a 400, the client's mistake it is, and writes
    nothing."""
    name = unique("bad")
    url = f"{server.url}/v1/transit/keys/{name}"
    ours = httpx.post(url, json=body, headers={"X-Vault-Token": server.token})
    theirs = httpx.post(
        f"{bao.url}/v1/transit/keys/{name}", json=body, headers={"X-Vault-Token": bao.token}
    )
    assert theirs.status_code >= 400, theirs.text
    assert ours.status_code == 400, ours.text
    (word,) = ours.json()["errors"]
    assert word in " ".join(theirs.json()["errors"]), (word, theirs.text)
    assert httpx.get(url, headers={"X-Vault-Token": server.token}).status_code == 404


@pytest.mark.parametrize("kind", ["hmac", "ed25519", "ecdsa-p256"])
def test_a_key_that_does_not_encrypt_is_refused_by_every_encryption_path(
    server: Server, bao: Bao, kind: str
) -> None:
    name = unique("noenc")
    body: dict[str, Any] = {"type": kind, "key_size": 32} if kind == "hmac" else {"type": kind}
    both(server, bao, f"keys/{name}", body)
    plaintext = base64.b64encode(b"x").decode()
    same_refusal(server, bao, f"encrypt/{name}", {"plaintext": plaintext})
    same_refusal(server, bao, f"datakey/plaintext/{name}", {})
    headers = {"X-Vault-Token": server.token}
    batch = httpx.post(
        f"{server.url}/v1/transit/encrypt/{name}",
        json={"batch_input": [{"plaintext": plaintext}]},
        headers=headers,
    )
    assert batch.status_code == 400, batch.text
    if name.islower():  # a native name: the native API refuses it too, as a 400
        native = httpx.post(
            f"{server.url}/v1/keys/{name}/encrypt",
            content=b"x",
            headers={"Authorization": f"Bearer {server.token}"},
        )
        assert native.status_code == 400, native.text
        assert native.json()["error"]["code"] == "wrong_key_type"


def test_a_derived_key_is_refused_without_a_context(server: Server, bao: Bao) -> None:
    name = unique("derived")
    both(server, bao, f"keys/{name}", {"derived": True})
    same_refusal(server, bao, f"encrypt/{name}", {"plaintext": base64.b64encode(b"x").decode()})
    native = httpx.post(
        f"{server.url}/v1/keys/{name}/encrypt",
        content=b"x",
        headers={"Authorization": f"Bearer {server.token}"},
    )
    assert native.status_code == 400, native.text


@pytest.mark.parametrize("kind", ["hmac", "ed25519"])
def test_export_of_an_encryption_key_is_refused_for_keys_that_do_not_encrypt(
    server: Server, bao: Bao, kind: str
) -> None:
    name = unique("exp")
    body: dict[str, Any] = {"type": kind, "exportable": True}
    if kind == "hmac":
        body["key_size"] = 32
    both(server, bao, f"keys/{name}", body)
    same_refusal(server, bao, f"export/encryption-key/{name}", method="GET")


def test_the_native_api_lists_every_type_and_exports_only_aead_material(
    server: Server, bao: Bao
) -> None:
    """``GET /v1/keys/{name}`` shows a Transit-only key's type (its ``algorithm`` null); the
    native export refuses its material (Transit's export routes are the way), 400."""
    name = unique("nat")
    both(server, bao, f"keys/{name}", {"type": "hmac", "key_size": 48, "exportable": True})
    derived = unique("natd")
    both(server, bao, f"keys/{derived}", {"derived": True})
    headers = {"Authorization": f"Bearer {server.token}"}
    shown = httpx.get(f"{server.url}/v1/keys/{name}", headers=headers).json()
    assert (shown["algorithm"], shown["type"], shown["derived"]) == (None, "hmac", False)
    shown = httpx.get(f"{server.url}/v1/keys/{derived}", headers=headers).json()
    assert (shown["algorithm"], shown["type"], shown["derived"]) == (
        "aes-256-gcm",
        "aes256-gcm96",
        True,
    )
    listed = httpx.get(f"{server.url}/v1/keys", headers=headers)
    assert listed.status_code == 200
    assert name in {k["name"] for k in listed.json()["keys"]}
    refused = httpx.get(f"{server.url}/v1/keys/{name}/export", headers=headers)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "wrong_key_type"


def test_a_transit_backup_of_a_key_it_cannot_hold_is_refused_and_byok_export_names_the_type(
    server: Server,
) -> None:
    """``backup/:name`` holds a plain AEAD key only: a derived or hmac key is refused with a
    400 naming it (the keystore backup carries every key); ``byok-export`` of a signing key is
    refused, of a derived key it works (its base material, as OpenBao exports it)."""
    headers = {"X-Vault-Token": server.token}

    def call(method: str, path: str, body: Any = None) -> httpx.Response:
        url = f"{server.url}/v1/transit/{path}"
        return httpx.request(method, url, json=body, headers=headers, timeout=60)

    flags = {"exportable": True, "allow_plaintext_backup": True}
    derived, signing = unique("bkd"), unique("bks")
    assert call("POST", f"keys/{derived}", {"derived": True, **flags}).status_code == 200
    assert call("POST", f"keys/{signing}", {"type": "ed25519", **flags}).status_code == 200
    for name in (derived, signing):
        refused = call("GET", f"backup/{name}")
        assert refused.status_code == 400, refused.text
        assert "is not supported by sealflow" in refused.json()["errors"][0]
    pem = (
        rsa.generate_private_key(65537, 2048)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    destination = unique("dest")
    made = call("POST", f"keys/{destination}/import", {"type": "rsa-2048", "public_key": pem})
    assert made.status_code == 204, made.text
    exported = call("GET", f"byok-export/{destination}/{derived}")
    assert exported.status_code == 200, exported.text
    assert exported.json()["data"]["type"] == "aes256-gcm96"
    refused = call("GET", f"byok-export/{destination}/{signing}")
    assert refused.status_code == 400
    assert refused.json()["errors"] == ["byok-export of a ed25519 key is not supported by sealflow"]
