"""The one-shot API's contract: argument checks before any cipher call, input types, failures."""

from __future__ import annotations

import os

import pytest

from sealflow import engine
from sealflow.engine import AEAD, Algorithm, DecryptionError

ALGS = list(Algorithm)


def key_for(alg: Algorithm) -> bytes:
    return os.urandom(alg.spec.key_len)


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 8176, 8177, 100_000])
def test_round_trip_all_sizes(impl: object, alg: Algorithm, size: int) -> None:
    key, nonce, data = key_for(alg), os.urandom(12), os.urandom(size)
    sealed = engine.seal(alg, key, nonce, b"aad", data)
    assert len(sealed) == size + 16
    assert engine.open(alg, key, nonce, b"aad", sealed) == data
    assert engine.open(alg.value, key, nonce, b"aad", sealed) == data  # plain strings work too


@pytest.mark.parametrize("alg", ALGS)
def test_every_single_bit_flip_and_wrong_input_fails(impl: object, alg: Algorithm) -> None:
    key, nonce, data = key_for(alg), os.urandom(12), os.urandom(33)
    sealed = engine.seal(alg, key, nonce, b"aad", data)
    for i in range(len(sealed) * 8):
        bad = bytearray(sealed)
        bad[i // 8] ^= 1 << (i % 8)
        with pytest.raises(DecryptionError):
            engine.open(alg, key, nonce, b"aad", bad)
    for k, n, a, s in [
        (key_for(alg), nonce, b"aad", sealed),
        (key, os.urandom(12), b"aad", sealed),
        (key, nonce, b"aae", sealed),
        (key, nonce, None, sealed),
        (key, nonce, b"aad", sealed[:-1]),
        (key, nonce, b"aad", sealed + b"\x00"),
    ]:
        with pytest.raises(DecryptionError) as info:
            engine.open(alg, k, n, a, s)
        assert str(info.value) == "decryption failed"  # one message for every cause


def test_none_aad_equals_empty_aad(impl: object) -> None:
    key, nonce = os.urandom(32), os.urandom(12)
    assert engine.seal("aes-256-gcm", key, nonce, None, b"x") == engine.seal(
        "aes-256-gcm", key, nonce, b"", b"x"
    )


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_bytes_like_inputs(impl: object, wrap: type) -> None:
    alg, key, nonce, data = Algorithm.CHACHA20_POLY1305, os.urandom(32), os.urandom(12), b"hi" * 9
    expected = engine.seal(alg, key, nonce, b"a", data)
    assert engine.seal(alg, wrap(key), wrap(nonce), wrap(b"a"), wrap(data)) == expected
    assert engine.open(alg, wrap(key), wrap(nonce), wrap(b"a"), wrap(expected)) == data


def test_non_byte_memoryview_is_read_as_bytes(impl: object) -> None:
    import array

    key, nonce = os.urandom(16), os.urandom(12)
    words = array.array("I", [1, 2, 3])
    sealed = engine.seal("aes-128-gcm", key, nonce, b"", memoryview(words))
    assert engine.open("aes-128-gcm", key, nonce, b"", sealed) == words.tobytes()


@pytest.mark.parametrize("nonce_len", [0, 1, 8, 11, 13, 16, 24])
def test_bad_nonce_length_is_value_error_before_any_cipher_call(
    impl: object, nonce_len: int
) -> None:
    before = engine.context_stats()
    with pytest.raises(ValueError, match="nonce must be 12 bytes"):
        engine.seal("aes-256-gcm", bytes(32), bytes(nonce_len), b"", b"data")
    with pytest.raises(ValueError, match="nonce must be 12 bytes"):
        engine.open("aes-256-gcm", bytes(32), bytes(nonce_len), b"", bytes(32))
    assert engine.context_stats() == before


@pytest.mark.parametrize("short", [0, 1, 8, 15])
def test_short_tag_is_value_error_before_any_cipher_call(impl: object, short: int) -> None:
    # OpenSSL alone would accept a 1-byte tag; we only take whole 16-byte tags.
    before = engine.context_stats()
    with pytest.raises(ValueError, match="shorter than the 16-byte tag"):
        engine.open("chacha20-poly1305", bytes(32), bytes(12), b"", bytes(short))
    assert engine.context_stats() == before


def test_bad_keys_and_algorithms() -> None:
    with pytest.raises(ValueError, match="16-byte key"):
        engine.seal("aes-128-gcm", bytes(32), bytes(12), b"", b"")
    with pytest.raises(ValueError, match="32-byte key"):
        AEAD(Algorithm.CHACHA20_POLY1305, bytes(16))
    with pytest.raises(ValueError, match="unknown algorithm"):
        engine.seal("aes-192-gcm", bytes(24), bytes(12), b"", b"")
    with pytest.raises(TypeError, match="bytes-like"):
        engine.seal("aes-128-gcm", bytes(16), bytes(12), b"", "text")  # type: ignore[arg-type]


def test_into_variants_and_in_place(impl: object) -> None:
    a = AEAD("aes-256-gcm", os.urandom(32))
    nonce, data = os.urandom(12), os.urandom(5000)
    buf = bytearray(data) + bytearray(16)
    assert a.seal_into(nonce, b"x", memoryview(buf)[:5000], buf) == 5016
    assert bytes(buf) == a.seal(nonce, b"x", data)
    assert a.open_into(nonce, b"x", buf, buf) == 5000
    assert bytes(buf[:5000]) == data
    with pytest.raises(ValueError, match="at least 5016"):
        a.seal_into(nonce, b"x", data, bytearray(5015))
    with pytest.raises(TypeError, match="writable"):
        a.seal_into(nonce, b"x", data, memoryview(bytes(5016)))


def test_failed_open_into_wipes_the_output(impl: object) -> None:
    a = AEAD("chacha20-poly1305", os.urandom(32))
    nonce = os.urandom(12)
    sealed = bytearray(a.seal(nonce, b"", b"secret plaintext" * 1000))
    sealed[-1] ^= 1
    out = bytearray(len(sealed) - 16)
    with pytest.raises(DecryptionError):
        a.open_into(nonce, b"", sealed, out)
    assert out == bytes(len(out))
