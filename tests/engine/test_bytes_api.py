"""The bytes-returning API (``seal``/``open``, ``ChunkedEncryptor``/``ChunkedDecryptor``
``update``/``finalize``): each result is a new ``bytes`` filled in place, the same bytes the
``_into`` variants write, immutable, and allocated once."""

from __future__ import annotations

import hashlib
import os
import tracemalloc

import pytest

from sealflow import engine
from sealflow.engine import (
    AEAD,
    Algorithm,
    ChunkedDecryptor,
    ChunkedEncryptor,
    DecryptionError,
    _binding,
)

MIB = 1 << 20
# Around the scratch path (8 KiB), a chunk, and past the huge-page advice (4 MiB).
SIZES = [0, 1, 8176, 8177, 16384, 100_000, 4 * MIB + 12345]


def _chunked_into(alg: Algorithm, key: bytes, data: bytes, enc: ChunkedEncryptor) -> bytes:
    out = bytearray(enc.update_size(len(data)))
    n = enc.update_into(data, out)
    tail = bytearray(enc.finalize_size())
    m = enc.finalize_into(tail)
    return bytes(out[:n] + tail[:m])


@pytest.mark.parametrize("alg", list(Algorithm))
@pytest.mark.parametrize("size", SIZES)
def test_single_shot_bytes_equal_the_into_variants(impl: object, alg: Algorithm, size: int) -> None:
    key, nonce, data = os.urandom(alg.spec.key_len), os.urandom(12), os.urandom(size)
    aead = AEAD(alg, key)
    sealed = aead.seal(nonce, b"aad", data)
    into = bytearray(size + 16)
    aead.seal_into(nonce, b"aad", data, into)
    assert type(sealed) is bytes
    assert sealed == into
    opened = aead.open(nonce, b"aad", sealed)
    assert type(opened) is bytes
    assert opened == data


@pytest.mark.parametrize("alg", list(Algorithm))
@pytest.mark.parametrize("size", SIZES)
def test_chunked_bytes_equal_update_into(impl: object, alg: Algorithm, size: int) -> None:
    key, data = os.urandom(alg.spec.key_len), os.urandom(size)
    enc = ChunkedEncryptor(alg, key, b"ctx")
    head, tail = enc.update(data), enc.finalize()
    assert type(head) is bytes
    assert type(tail) is bytes
    assert len(head) + len(tail) == engine.sealed_size(size)
    # The salt is random, so the _into variant is checked by opening both ways.
    via_into = _chunked_into(alg, key, data, ChunkedEncryptor(alg, key, b"ctx"))
    for sealed in (head + tail, via_into):
        dec = ChunkedDecryptor(alg, key, b"ctx")
        body, last = dec.update(sealed), dec.finalize()
        assert type(body) is bytes
        assert type(last) is bytes
        assert hashlib.sha256(body + last).digest() == hashlib.sha256(data).digest()


def test_results_are_immutable_and_independent(impl: object) -> None:
    alg, key, data = Algorithm.CHACHA20_POLY1305, os.urandom(32), os.urandom(200_000)
    enc = ChunkedEncryptor(alg, key)
    first = enc.update(data)
    with pytest.raises(TypeError):
        first[0] = 0  # type: ignore[index]
    copy = bytes(bytearray(first))
    second = enc.update(data)  # a later call writes a new object, never the earlier one
    assert first == copy
    assert first is not second
    assert hash(first) == hash(copy)
    nonce = os.urandom(12)
    a, b = engine.seal(alg, key, nonce, b"", data), engine.seal(alg, key, nonce, b"", data)
    assert a == b
    assert a is not b


def test_decryptor_update_returns_exactly_the_authenticated_chunks(impl: object) -> None:
    """update_size is exact for the opener too (the header is not counted as body), so the
    bytes result is never a sliced copy of a larger buffer."""
    alg, key = Algorithm.AES_256_GCM, os.urandom(32)
    data = os.urandom(5 * 16384 + 7)
    enc = ChunkedEncryptor(alg, key)
    sealed = enc.update(data) + enc.finalize()
    for piece in (1, 56, 1000, 16400, 70_000):
        dec = ChunkedDecryptor(alg, key)
        out = []
        for i in range(0, len(sealed), piece):
            part = sealed[i : i + piece]
            expected = dec.update_size(len(part))
            got = dec.update(part)
            assert len(got) == expected
            out.append(got)
        out.append(dec.finalize())
        assert b"".join(out) == data


def test_failed_chunked_update_raises_and_fails_for_good(impl: object) -> None:
    alg, key = Algorithm.CHACHA20_POLY1305, os.urandom(32)
    enc = ChunkedEncryptor(alg, key)
    sealed = bytearray(enc.update(os.urandom(3 * 16384)) + enc.finalize())
    sealed[56 + 2 * 16400 - 1] ^= 1  # the third chunk's tag
    dec = ChunkedDecryptor(alg, key)
    with pytest.raises(DecryptionError):
        dec.update(bytes(sealed))
    with pytest.raises(DecryptionError):
        dec.finalize()


def test_finalize_twice_is_refused() -> None:
    enc = ChunkedEncryptor(Algorithm.AES_128_GCM, bytes(16))
    enc.finalize()
    with pytest.raises(ValueError, match="finalize"):
        enc.finalize()


@pytest.mark.parametrize("provider", ["native", "cryptography"])
def test_chunked_update_allocates_its_result_once(provider: str) -> None:
    """Peak traced memory of update() stays near one output (a bytearray and then a bytes
    copy of it took two)."""
    engine.set_provider(provider)
    try:
        alg, key, size = Algorithm.CHACHA20_POLY1305, os.urandom(32), 8 * MIB
        data = os.urandom(size)
        ChunkedEncryptor(alg, key).update(data)  # warm up caches and contexts
        tracemalloc.start()
        try:
            enc = ChunkedEncryptor(alg, key)
            result = enc.update(data)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        engine.set_provider(None)
    assert len(result) == engine.sealed_size(size) - 16 - (size % 16384)
    assert peak < 1.25 * len(result)


def test_native_open_of_a_bad_tag_leaves_no_result() -> None:
    """The large-message native path fills its result in place: a bad tag raises, and what
    was written is wiped (sf_open) before the object is dropped."""
    spec, key, nonce = Algorithm.AES_256_GCM.spec, os.urandom(32), os.urandom(12)
    provider = engine.PROVIDERS["native"]
    sealed = bytearray(provider.seal(spec, key, nonce, b"", os.urandom(100_000)))
    sealed[-1] ^= 1
    with pytest.raises(DecryptionError):
        provider.open(spec, key, nonce, b"", bytes(sealed))


def test_new_bytes_is_a_bytes_object_of_the_size_asked() -> None:
    for size in (0, 1, 5 * MIB):
        out, p = _binding.new_bytes(size)
        view = _binding.writable(p, size)
        view[:] = b"\x07" * size
        assert type(out) is bytes
        assert out == b"\x07" * size
