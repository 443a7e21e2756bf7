"""Transit's ``hmac`` and ``verify`` (HMACs) against a real OpenBao dev server (issue 28, item
2): the same hmac key material imported into both (BYOK) gives identical HMACs for every
algorithm, single and batched, and each side verifies the other's; the refusals match
OpenBao's status and words; every key type has per-version HMAC keys; the scopes are the
path's (``hmac``, ``verify``), checked before the body is read."""

from __future__ import annotations

import base64
import hmac
import os
import socket
from typing import Any

import httpx
import hvac
import pytest

from tests.service.byok import wrap
from tests.service.conftest import Server
from tests.service.server.test_auth import new_token
from tests.service.transit.conftest import Bao, unique
from tests.service.transit.test_utility import both, same_refusal

ALGORITHMS = ["sha1"] + [f"sha{f}-{b}" for f in (2, 3) for b in (224, 256, 384, 512)]
DATA = [b"", b"a", b"blind index \x00\xff" * 50, os.urandom(3000)]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def shared_hmac_key(openbao: hvac.Client, vault: hvac.Client, size: int = 64) -> str:
    """One hmac key of the same material on both servers, imported through BYOK."""
    name, material = unique("hk"), os.urandom(size)
    for client in (openbao, vault):
        pem = client.read("transit/wrapping_key")["data"]["public_key"]
        client.write_data(
            f"transit/keys/{name}/import", data={"ciphertext": wrap(pem, material), "type": "hmac"}
        )
    return name


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_hmacs_are_identical_under_shared_material_and_verify_across(
    openbao: hvac.Client, vault: hvac.Client, algorithm: str
) -> None:
    name = shared_hmac_key(openbao, vault)
    assert vault.secrets.transit.read_key(name)["data"]["key_size"] == 64
    for data in DATA:
        made = [_hmac(c, name, data, algorithm) for c in (openbao, vault)]
        assert made[0] == made[1]
        assert made[0].startswith("vault:v1:")
        for client, other in ((openbao, made[1]), (vault, made[0])):
            assert _verify(client, name, data, other, algorithm) is True
        tampered = made[0][:-4] + ("AAA=" if not made[0].endswith("AAA=") else "BBB=")
        assert _verify(vault, name, data, tampered, algorithm) is False


def _hmac(client: hvac.Client, name: str, data: bytes, algorithm: str) -> str:
    """hvac's generate_hmac where it takes the algorithm (sha2 only), else its adapter."""
    if algorithm.startswith("sha2-"):
        answer = client.secrets.transit.generate_hmac(name, b64(data), algorithm=algorithm)
    else:
        answer = client.write_data(f"transit/hmac/{name}/{algorithm}", data={"input": b64(data)})
    return str(answer["data"]["hmac"])


def _verify(client: hvac.Client, name: str, data: bytes, made: str, algorithm: str) -> bool:
    if algorithm.startswith("sha2-"):
        answer = client.secrets.transit.verify_signed_data(
            name, b64(data), hmac=made, hash_algorithm=algorithm
        )
    else:
        body = {"input": b64(data), "hmac": made}
        answer = client.write_data(f"transit/verify/{name}/{algorithm}", data=body)
    return bool(answer["data"]["valid"])


def test_batches_match_openbao_item_for_item(server: Server, bao: Bao) -> None:
    name = unique("hb")
    material = os.urandom(32)
    for url, token in ((server.url, server.token), (bao.url, bao.token)):
        client = hvac.Client(url=url, token=token)
        pem = client.read("transit/wrapping_key")["data"]["public_key"]
        client.write_data(
            f"transit/keys/{name}/import", data={"ciphertext": wrap(pem, material), "type": "hmac"}
        )
    batch: list[dict[str, Any]] = [
        {"input": b64(b"one"), "reference": "r1"},
        {"input": b64(b"two")},
        {"input": "not base64!", "reference": "bad"},
        {"reference": "missing"},
    ]
    ours, theirs = both(server, bao, f"hmac/{name}/sha2-512", {"batch_input": batch})
    assert ours.json()["data"] == theirs.json()["data"]
    results = ours.json()["data"]["batch_results"]
    want = hmac.digest(material, b"one", "sha512")
    assert results[0]["hmac"] == "vault:v1:" + b64(want)
    checks = [
        {"input": b64(b"one"), "hmac": results[0]["hmac"], "reference": "ok"},
        {"input": b64(b"two"), "hmac": results[0]["hmac"], "reference": "wrong"},
        {"input": b64(b"one"), "hmac": "v1:abc"},
        {"input": b64(b"one"), "hmac": "vault:v1"},
        {"input": b64(b"one"), "hmac": "vault:vx:AAAA"},
        {"input": b64(b"one"), "hmac": "vault:v1:***"},
        {"input": b64(b"one"), "hmac": "vault:v9:AAAA"},
        {"input": "%%%", "hmac": "vault:v1:AAAA"},
    ]
    ours, theirs = both(server, bao, f"verify/{name}/sha2-512", {"batch_input": checks})
    assert ours.json()["data"] == theirs.json()["data"]
    assert ours.json()["data"]["batch_results"][0]["valid"] is True
    assert "valid" not in ours.json()["data"]["batch_results"][1]


def test_every_key_type_hmacs_per_version(server: Server, bao: Bao) -> None:
    """An AES, ChaCha, ed25519 and ECDSA key HMACs too, each version under its own HMAC key:
    rotate, and the new version's HMAC differs; the old one still verifies until
    min_decryption_version passes it, then it is refused in OpenBao's words."""
    vault = hvac.Client(url=server.url, token=server.token)
    for kind in ("aes256-gcm96", "chacha20-poly1305", "ed25519", "ecdsa-p256"):
        name = unique("hv")
        vault.secrets.transit.create_key(name, key_type=kind)
        one = vault.secrets.transit.generate_hmac(name, b64(b"x"))["data"]["hmac"]
        vault.secrets.transit.rotate_key(name)
        two = vault.secrets.transit.generate_hmac(name, b64(b"x"))["data"]["hmac"]
        assert one.startswith("vault:v1:")
        assert two.startswith("vault:v2:")
        assert one[9:] != two[9:]
        again = vault.secrets.transit.generate_hmac(name, b64(b"x"), key_version=1)
        assert again["data"]["hmac"] == one
        for made in (one, two):
            valid = vault.secrets.transit.verify_signed_data(name, b64(b"x"), hmac=made)
            assert valid["data"]["valid"] is True
        vault.secrets.transit.update_key_configuration(name, min_decryption_version=2)
        with pytest.raises(hvac.exceptions.InvalidRequest, match="version is too old"):
            vault.secrets.transit.verify_signed_data(name, b64(b"x"), hmac=one)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("hmac/{name}", {}),
        ("hmac/{name}", {"input": "%%"}),
        ("hmac/{name}/sha2-999", {"input": "AA=="}),
        ("hmac/{name}", {"input": "AA==", "key_version": 5}),
        ("hmac/{name}", {"batch_input": []}),
        ("hmac/missing-key-xyz", {"input": "AA=="}),
        ("verify/{name}", {"input": "AA=="}),
        ("verify/{name}", {"input": "AA==", "hmac": "vault:v1:AA==", "signature": "x"}),
        ("verify/{name}", {"batch_input": [{"hmac": "vault:v1:AA=="}, {"signature": "x"}]}),
        ("verify/{name}", {"batch_input": [{"hmac": "vault:v1:AA=="}, {"input": "AA=="}]}),
        ("verify/{name}", {"batch_input": [{"input": "AA=="}]}),
        ("verify/{name}", {"input": "AA==", "hmac": "nope"}),
        ("verify/{name}", {"input": "AA==", "hmac": "vault:v3:AA=="}),
        ("verify/{name}/sha2-999", {"input": "AA==", "hmac": "vault:v1:AA=="}),
        ("verify/missing-key-xyz", {"input": "AA==", "hmac": "vault:v1:AA=="}),
    ],
)
def test_refusals_match_openbao(server: Server, bao: Bao, path: str, body: dict[str, Any]) -> None:
    name = unique("hr")
    both(server, bao, f"keys/{name}", {"type": "hmac", "key_size": 32})
    same_refusal(server, bao, path.format(name=name), body)


def test_the_scopes_are_the_paths_and_checked_before_the_body(server: Server) -> None:
    name = unique("hs")
    vault = hvac.Client(url=server.url, token=server.token)
    vault.write_data(f"transit/keys/{name}", data={"type": "hmac", "key_size": 32})
    made = vault.secrets.transit.generate_hmac(name, b64(b"x"))["data"]["hmac"]
    hmac_only = new_token(server, f"hmac:{name}")
    verify_only = new_token(server, f"verify:{name}")
    data_only = new_token(server, f"encrypt:{name}", f"decrypt:{name}")

    def post(token: str, path: str, body: Any) -> httpx.Response:
        headers = {"X-Vault-Token": token}
        return httpx.post(f"{server.url}/v1/transit/{path}", json=body, headers=headers)

    check = {"input": b64(b"x"), "hmac": made}
    assert post(hmac_only, f"hmac/{name}", {"input": b64(b"x")}).json()["data"]["hmac"] == made
    assert post(verify_only, f"verify/{name}", check).json()["data"]["valid"] is True
    for token, path in ((verify_only, "hmac"), (hmac_only, "verify"), (data_only, "hmac")):
        refused = post(token, f"{path}/{name}", check)
        assert refused.status_code == 403, refused.text
    # Refused from the head: a body of 1 MB announced, never sent, is never waited for.
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(
            f"POST /v1/transit/hmac/{name} HTTP/1.1\r\nHost: x\r\nX-Vault-Token: {verify_only}"
            "\r\nContent-Length: 1000000\r\n\r\n{".encode()
        )
        reply = b""
        while chunk := sock.recv(65536):  # closed after the answer
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 403 ")


def test_the_hmac_key_exports_as_openbao_exports_it(
    openbao: hvac.Client, vault: hvac.Client, server: Server, bao: Bao
) -> None:
    """``export/hmac-key``: an hmac key's material on both (imported the same, exportable);
    an AES key's HMAC key here is the one its HMACs are made with; the refusals match."""
    name, material = unique("hx"), os.urandom(48)
    for client in (openbao, vault):
        pem = client.read("transit/wrapping_key")["data"]["public_key"]
        body = {"ciphertext": wrap(pem, material), "type": "hmac", "exportable": True}
        client.write_data(f"transit/keys/{name}/import", data=body)
    ours, theirs = both(server, bao, f"export/hmac-key/{name}", method="GET")
    assert ours.json()["data"] == theirs.json()["data"]
    assert ours.json()["data"]["keys"] == {"1": b64(material)}
    aes = unique("hxa")
    vault.secrets.transit.create_key(aes, exportable=True)
    exported = vault.secrets.transit.export_key(aes, key_type="hmac-key", version="latest")
    secret = base64.b64decode(exported["data"]["keys"]["1"])
    made = vault.secrets.transit.generate_hmac(aes, b64(b"row 7"))["data"]["hmac"]
    assert made == "vault:v1:" + b64(hmac.digest(secret, b"row 7", "sha256"))
    closed = unique("hxc")
    both(server, bao, f"keys/{closed}", {"type": "hmac", "key_size": 32})
    same_refusal(server, bao, f"export/hmac-key/{closed}", method="GET")
    same_refusal(server, bao, f"export/hmac-key/{name}/7", method="GET")
