"""``_derive`` against OpenBao's own outputs (tests/data/openbao/transit_derived.json, made by
a real OpenBao dev server from keys it exported): the same material and context give the same
key, a convergent key the same ciphertext byte for byte, and a derived key's ciphertexts open
under the key derived here."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sealflow import engine
from sealflow.engine import Algorithm
from sealflow.service.keystore import KDF_COUNTER
from sealflow.service.server.transit import _derive

VECTORS = Path(__file__).resolve().parents[2] / "data" / "openbao" / "transit_derived.json"
_TYPES = {
    "aes128-gcm96": Algorithm.AES_128_GCM,
    "aes256-gcm96": Algorithm.AES_256_GCM,
    "chacha20-poly1305": Algorithm.CHACHA20_POLY1305,
}


def _cases(kdf: str) -> list[dict[str, Any]]:
    cases = json.loads(VECTORS.read_text())["cases"]
    return [case for case in cases if case["kdf"] == kdf]


def _payload(ciphertext: str) -> bytes:
    assert ciphertext.startswith("vault:v1:")
    return base64.b64decode(ciphertext[len("vault:v1:") :])


@pytest.mark.parametrize("case", _cases("hkdf_sha256"), ids=lambda c: c["type"])
def test_openbaos_derived_ciphertexts_open_and_convergent_ones_are_made_the_same(
    case: dict[str, Any],
) -> None:
    alg = _TYPES[case["type"]]
    material, context = base64.b64decode(case["key"]), base64.b64decode(case["context"])
    plaintext, aad = base64.b64decode(case["plaintext"]), base64.b64decode(case["associated_data"])
    key = _derive.ContextKey(material, context, alg.spec.key_len, case["convergent"])
    payload = _payload(case["ciphertext"])
    assert engine.open(alg, key.aead, payload[:12], aad, payload[12:]) == plaintext
    if case["convergent"]:
        nonce = key.nonce_for(plaintext)
        assert nonce + engine.seal(alg, key.aead, nonce, aad, plaintext) == payload


@pytest.mark.parametrize("case", _cases("hmac-sha256-counter"), ids=lambda c: c["type"])
def test_openbaos_counter_mode_ciphertexts_open(case: dict[str, Any]) -> None:
    """The keys OpenBao's import makes derived (``kdf`` ``hmac-sha256-counter``)."""
    alg = _TYPES[case["type"]]
    material, context = base64.b64decode(case["key"]), base64.b64decode(case["context"])
    key = _derive.ContextKey(material, context, alg.spec.key_len, False, KDF_COUNTER)
    payload = _payload(case["ciphertext"])
    plaintext = base64.b64decode(case["plaintext"])
    assert engine.open(alg, key.aead, payload[:12], b"", payload[12:]) == plaintext


def test_the_counter_mode_makes_32_bytes_only() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        _derive.derive(bytes(32), b"c", 48, KDF_COUNTER)


@pytest.mark.parametrize("size", [16, 32, 48, 64, 100])
def test_derive_is_rfc5869_hkdf_sha256_without_salt(size: int) -> None:
    material, context = bytes(range(32)), b"tenant"
    oracle = HKDF(hashes.SHA256(), size, salt=None, info=context).derive(material)
    assert _derive.derive(material, context, size) == oracle


def test_a_convergent_key_reads_its_nonce_key_on_from_the_same_output() -> None:
    key = _derive.ContextKey(bytes(32), b"c", 16, convergent=True)
    out = _derive.derive(bytes(32), b"c", 48)
    assert (key.aead, key.nonce_key) == (out[:16], out[16:])
    assert _derive.ContextKey(bytes(32), b"c", 16, convergent=False).nonce_key is None


def test_an_empty_context_derives_nothing() -> None:
    with pytest.raises(_derive.ContextError, match="missing 'context' for key derivation"):
        _derive.derive(bytes(32), b"", 32)
