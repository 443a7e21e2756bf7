"""Single-shot AEAD against Wycheproof, NIST GCM and RFC 8439 vectors, on every provider and
context strategy."""

from __future__ import annotations

import hashlib

import pytest

from sealflow import engine
from tests.vectors import WYCHEPROOF, AeadCase, nist_gcm, rfc8439, wycheproof_aead

AES_BY_KEY_LEN = {16: engine.Algorithm.AES_128_GCM, 32: engine.Algorithm.AES_256_GCM}
CHACHA = engine.Algorithm.CHACHA20_POLY1305


def check_case(alg: engine.Algorithm, case: AeadCase) -> str | None:
    """Run one vector both ways; return a description of any mismatch."""
    sealed = case.ct + case.tag
    if case.valid:
        if engine.seal(alg, case.key, case.iv, case.aad, case.msg) != sealed:
            return f"{case.source}: seal mismatch"
        if engine.open(alg, case.key, case.iv, case.aad, sealed) != case.msg:
            return f"{case.source}: open mismatch"
        return None
    try:
        engine.open(alg, case.key, case.iv, case.aad, sealed)
    except engine.DecryptionError:
        return None
    return f"{case.source}: invalid case opened"


def run_all(cases: list[tuple[engine.Algorithm, AeadCase]]) -> None:
    assert cases
    failures = [f for alg, case in cases if (f := check_case(alg, case))]
    assert failures == []


def test_wycheproof_aes_gcm_12_byte_iv(impl: object) -> None:
    cases = [
        (AES_BY_KEY_LEN[len(c.key)], c)
        for c in wycheproof_aead("aes_gcm_test.json")
        if len(c.iv) == 12 and len(c.key) in AES_BY_KEY_LEN
    ]
    assert len(cases) > 100
    run_all(cases)


def test_wycheproof_chacha20_poly1305_12_byte_iv(impl: object) -> None:
    cases = [(CHACHA, c) for c in wycheproof_aead("chacha20_poly1305_test.json") if len(c.iv) == 12]
    assert len(cases) > 300
    run_all(cases)


def test_wycheproof_aes_192_keys_are_rejected(impl: object) -> None:
    # sealflow offers AES-128-GCM and AES-256-GCM only: a 24-byte key fits neither.
    keys = [c.key for c in wycheproof_aead("aes_gcm_test.json") if len(c.key) == 24]
    assert keys
    for key in keys:
        for alg in AES_BY_KEY_LEN.values():
            with pytest.raises(ValueError, match="-byte key"):
                engine.seal(alg, key, bytes(12), b"", b"x")


@pytest.mark.parametrize("name", ["aes_gcm_test.json", "chacha20_poly1305_test.json"])
def test_wycheproof_other_iv_sizes_rejected_before_any_cipher_call(impl: object, name: str) -> None:
    cases = [c for c in wycheproof_aead(name) if len(c.iv) != 12 and len(c.key) != 24]
    assert cases
    before = engine.context_stats()
    for case in cases:
        alg = CHACHA if name.startswith("chacha") else AES_BY_KEY_LEN[len(case.key)]
        with pytest.raises(ValueError, match="nonce must be 12 bytes"):
            engine.seal(alg, case.key, case.iv, case.aad, case.msg)
        with pytest.raises(ValueError, match="nonce must be 12 bytes"):
            engine.open(alg, case.key, case.iv, case.aad, case.ct + case.tag)
    # No context was created, re-keyed or reused: no cipher call happened.
    assert engine.context_stats() == before


@pytest.mark.parametrize(
    "path",
    ["gcmEncryptExtIV128.rsp", "gcmEncryptExtIV256.rsp", "gcmDecrypt128.rsp", "gcmDecrypt256.rsp"],
)
def test_nist_gcm(impl: object, path: str) -> None:
    cases = [(AES_BY_KEY_LEN[len(c.key)], c) for c in nist_gcm(path)]
    assert len(cases) >= 100
    if "Decrypt" in path:
        assert any(not c.valid for _, c in cases)
        assert any(c.valid for _, c in cases)
    run_all(cases)


def test_rfc8439_chacha20_poly1305(impl: object) -> None:
    cases = [(CHACHA, c) for c in rfc8439()]
    rfc = [c for _, c in cases if c.source == "boringssl.txt#1"]
    assert rfc
    assert rfc[0].tag.hex() == "1ae10b594f09e26a7e902ecbd0600691"
    run_all(cases)


# The copied Wycheproof files, as published at commit dac1dd4 (tests/data/README.md).
PUBLISHED_SHA256 = {
    "aes_gcm_test.json": "985e5ecc172e181eaf49e89508b9470dcf478002eb7e8559c707eb42dc97dfe7",
    "chacha20_poly1305_test.json": (
        "fe61d25f90e1bde4461d00eafe61049e5f29bd999f36b766df9cda90906ad53d"
    ),
    "c2sp_chunked_encryption_aes_128_gcm_test.json": (
        "2e0a512c47bfae6efd0b59644ab72f3dd7e80e4f74d6642c2c10427a02b095db"
    ),
    "c2sp_chunked_encryption_aes_256_gcm_test.json": (
        "0f8e35568d59649fb55fb0e5602dc678dc8910d6822beef4945aee0b5994ef05"
    ),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_SHA256))
def test_vector_files_are_unmodified_copies(name: str) -> None:
    digest = hashlib.sha256((WYCHEPROOF / name).read_bytes()).hexdigest()
    assert digest == PUBLISHED_SHA256[name]


def test_vector_files_ship_with_their_licence() -> None:
    assert "Apache License" in (WYCHEPROOF / "LICENSE").read_text()
