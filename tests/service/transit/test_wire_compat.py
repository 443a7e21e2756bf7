"""Transit ciphertext is plain AEAD: what sealflow writes opens with ``cryptography`` alone
under the exported key, and what is built locally in that layout opens on sealflow."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator

import httpx
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from tests.service.conftest import Server, exported_key
from tests.service.transit.conftest import unique

AEADS: dict[str, type[AESGCM] | type[ChaCha20Poly1305]] = {
    "aes128-gcm96": AESGCM,
    "aes256-gcm96": AESGCM,
    "chacha20-poly1305": ChaCha20Poly1305,
}


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    headers = {"X-Vault-Token": server.token}
    with httpx.Client(base_url=server.url + "/v1/transit", headers=headers, timeout=60) as c:
        yield c


@pytest.mark.parametrize("kind", sorted(AEADS))
def test_both_ways(kind: str, server: Server, http: httpx.Client) -> None:
    name = unique("wire")
    http.post(f"/keys/{name}", json={"type": kind, "exportable": True}).raise_for_status()
    aad = b"tenant 9"
    body = {"plaintext": base64.b64encode(b"hello").decode()}
    body["associated_data"] = base64.b64encode(aad).decode()
    ciphertext = http.post(f"/encrypt/{name}", json=body).json()["data"]["ciphertext"]

    # The key from Transit's export route and from the native one are the same bytes.
    exported = http.get(f"/export/encryption-key/{name}/1").json()["data"]["keys"]["1"]
    with server.client() as native:
        assert base64.b64decode(exported) == exported_key(native, name, 1)
    aead = AEADS[kind](base64.b64decode(exported))

    blob = base64.b64decode(ciphertext.removeprefix("vault:v1:"))
    assert aead.decrypt(blob[:12], blob[12:], aad) == b"hello"

    nonce = os.urandom(12)
    local = "vault:v1:" + base64.b64encode(nonce + aead.encrypt(nonce, b"made here", aad)).decode()
    answer = http.post(
        f"/decrypt/{name}",
        json={"ciphertext": local, "associated_data": base64.b64encode(aad).decode()},
    )
    assert base64.b64decode(answer.json()["data"]["plaintext"]) == b"made here"
