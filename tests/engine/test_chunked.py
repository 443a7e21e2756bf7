"""C2SP chunked encryption: Wycheproof vectors, cryptography.cobblestone in both directions,
an independent ChaCha20-Poly1305 reference, and tampering."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
from cryptography.cobblestone import (
    Cobblestone128Decryptor,
    Cobblestone128Encryptor,
    Cobblestone256Decryptor,
    Cobblestone256Encryptor,
)
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealflow import engine
from sealflow.engine import Algorithm, ChunkedDecryptor, ChunkedEncryptor, DecryptionError
from sealflow.engine._cobble import CobbleOpener, CobbleSealer
from sealflow.engine._framing import FramingOpener, FramingSealer
from tests.vectors import ChunkedCase, c2sp_chunked

CHUNK, SEALED = 16384, 16400
SIZES = [0, 1, 16383, 16384, 16385, 3 * 16384]
VECTOR_FILES = {
    Algorithm.AES_128_GCM: "c2sp_chunked_encryption_aes_128_gcm_test.json",
    Algorithm.AES_256_GCM: "c2sp_chunked_encryption_aes_256_gcm_test.json",
}
COBBLESTONE: dict[Algorithm, tuple[Any, Any]] = {
    Algorithm.AES_128_GCM: (Cobblestone128Encryptor, Cobblestone128Decryptor),
    Algorithm.AES_256_GCM: (Cobblestone256Encryptor, Cobblestone256Decryptor),
}
ALL_CASES = [(alg, c) for alg, f in VECTOR_FILES.items() for c in c2sp_chunked(f)]


def seal_all(alg: Algorithm, key: bytes, ctx: bytes, data: bytes, piece: int = 1 << 30) -> bytes:
    enc = ChunkedEncryptor(alg, key, ctx)
    parts = [enc.update(data[i : i + piece]) for i in range(0, len(data), piece)]
    return b"".join([*parts, enc.finalize()])


def open_all(alg: Algorithm, key: bytes, ctx: bytes, sealed: bytes, piece: int = 1 << 30) -> bytes:
    dec = ChunkedDecryptor(alg, key, ctx)
    parts = [dec.update(sealed[i : i + piece]) for i in range(0, len(sealed), piece)]
    return b"".join([*parts, dec.finalize()])


def case_id(x: object) -> str:
    return x.value if isinstance(x, Algorithm) else str(getattr(x, "tc_id", x))


def test_vector_files_have_35_cases_each() -> None:
    for name in VECTOR_FILES.values():
        assert len(c2sp_chunked(name)) == 35


@pytest.mark.parametrize(
    ("alg", "case"), ALL_CASES, ids=[f"{a.value}-{c.tc_id}" for a, c in ALL_CASES]
)
def test_c2sp_vector_whole(impl: object, alg: Algorithm, case: ChunkedCase) -> None:
    if "InvalidKeySize" in case.flags:
        with pytest.raises(ValueError, match="-byte key"):
            ChunkedDecryptor(alg, case.key, case.ctx)
        return
    if case.valid:
        msg = open_all(alg, case.key, case.ctx, case.ct)
        assert len(msg) == case.msg_length
        assert hashlib.sha512(msg).digest() == case.msg_sha512
        # Encryption round trip (the vectors' salt cannot be injected): the message reseals
        # to a different ciphertext of the same length that cobblestone and we both open.
        resealed = seal_all(alg, case.key, case.ctx, msg)
        assert len(resealed) == len(case.ct)
        assert resealed != case.ct
        dec = COBBLESTONE[alg][1](case.key, case.ctx)
        assert dec.update(resealed) + dec.finalize() == msg
    else:
        with pytest.raises(DecryptionError):
            open_all(alg, case.key, case.ctx, case.ct)


@pytest.mark.parametrize(
    ("alg", "case"),
    [(a, c) for a, c in ALL_CASES if not c.valid and "InvalidKeySize" not in c.flags],
    ids=case_id,
)
@pytest.mark.parametrize("piece", [1, 1000, 16400, 65536])
def test_c2sp_vector_streaming_partial_plaintext(
    impl: object, alg: Algorithm, case: ChunkedCase, piece: int
) -> None:
    if piece == 1 and len(case.ct) > 100_000:
        piece = 997  # byte-at-a-time over MiBs adds minutes and no coverage
    dec = ChunkedDecryptor(alg, case.key, case.ctx)
    produced = bytearray()
    failed = False
    for i in range(0, len(case.ct), piece):
        try:
            produced += dec.update(case.ct[i : i + piece])
        except DecryptionError:
            failed = True
            break
    if not failed:
        with pytest.raises(DecryptionError):
            dec.finalize()
    # Never more than the authenticated prefix, and exactly a prefix of it.
    assert len(produced) <= case.msg_length
    if len(produced) == case.msg_length:
        assert hashlib.sha512(produced).digest() == case.msg_sha512
    # A failed decryptor keeps failing instead of ending cleanly.
    with pytest.raises(DecryptionError):
        dec.update(b"more")
    with pytest.raises(DecryptionError):
        dec.update(b"")
    with pytest.raises(DecryptionError):
        dec.finalize()


@pytest.mark.parametrize("alg", list(COBBLESTONE))
@pytest.mark.parametrize("size", SIZES)
def test_cobblestone_opens_ours_and_we_open_cobblestones(
    impl: object, alg: Algorithm, size: int
) -> None:
    key, ctx, data = os.urandom(alg.spec.key_len), os.urandom(9), os.urandom(size)
    ours = seal_all(alg, key, ctx, data, piece=4099)
    enc_cls, dec_cls = COBBLESTONE[alg]
    dec = dec_cls(key, ctx)
    assert dec.update(ours) + dec.finalize() == data
    enc = enc_cls(key, ctx)
    theirs = enc.update(data) + enc.finalize()
    assert open_all(alg, key, ctx, theirs, piece=5003) == data
    assert len(ours) == len(theirs) == engine.sealed_size(size)
    assert engine.opened_size(len(theirs)) == size


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    alg=st.sampled_from(list(COBBLESTONE)),
    size=st.integers(0, 4 << 20),
    piece=st.integers(1 << 10, 1 << 20),
    ctx=st.binary(max_size=64),
)
def test_cobblestone_differential_random_sizes(
    alg: Algorithm, size: int, piece: int, ctx: bytes
) -> None:
    key, data = os.urandom(alg.spec.key_len), os.urandom(size)
    enc_cls, dec_cls = COBBLESTONE[alg]
    dec = dec_cls(key, ctx)
    assert dec.update(seal_all(alg, key, ctx, data, piece)) + dec.finalize() == data
    enc = enc_cls(key, ctx)
    assert open_all(alg, key, ctx, enc.update(data) + enc.finalize(), piece) == data


def chacha_reference_seal(key: bytes, ctx: bytes, salt: bytes, data: bytes) -> bytes:
    """C2SP chunked encryption built independently from cryptography's HKDFExpand and AEAD."""
    info = b"c2sp.org/chunked-encryption@v1+AEAD_CHACHA20_POLY1305\x00" + salt + ctx
    okm = HKDFExpand(hashes.SHA512(), 32 + 12 + 32, info).derive(key)
    aead, base = ChaCha20Poly1305(okm[:32]), int.from_bytes(okm[32:44], "big")
    chunks = [data[i : i + CHUNK] for i in range(0, len(data) - len(data) % CHUNK, CHUNK)]
    chunks.append(data[len(data) - len(data) % CHUNK :])
    body = b"".join(
        aead.encrypt((base ^ n).to_bytes(12, "big"), c, None) for n, c in enumerate(chunks)
    )
    return salt + okm[44:] + body


@pytest.mark.parametrize("size", [*SIZES, 100_000])
def test_chacha20_poly1305_against_independent_reference(impl: object, size: int) -> None:
    alg = Algorithm.CHACHA20_POLY1305
    key, ctx, data = os.urandom(32), b"ctx\x00bytes", os.urandom(size)
    ours = seal_all(alg, key, ctx, data, piece=7001)
    reference = chacha_reference_seal(key, ctx, ours[:24], data)
    assert ours == reference
    other = chacha_reference_seal(key, ctx, os.urandom(24), data)
    assert open_all(alg, key, ctx, other, piece=3 if size < 20000 else 4093) == data


def test_chacha20_poly1305_long_runs_against_independent_reference(impl: object) -> None:
    """A run of chunks of 4 MiB or more is fed to OpenSSL in slices by the native chunk loop
    (sealflow_native.c, SF_CHACHA_SLICED_RUN): whole-message calls on both sides of it."""
    alg = Algorithm.CHACHA20_POLY1305
    key, ctx = os.urandom(32), b"long"
    for size in (4 * 1024 * 1024 - 1, 5 * 1024 * 1024 + 123):
        data = os.urandom(size)
        ours = seal_all(alg, key, ctx, data)
        assert ours == chacha_reference_seal(key, ctx, ours[:24], data)
        other = chacha_reference_seal(key, ctx, os.urandom(24), data)
        assert open_all(alg, key, ctx, other) == data
        bad = bytearray(other)
        bad[56 + 100 * SEALED + 5] ^= 1  # chunk 100, inside the first update's run
        with pytest.raises(DecryptionError):
            open_all(alg, key, ctx, bytes(bad))


@pytest.mark.parametrize("alg", list(Algorithm))
def test_tampering_anywhere_fails(impl: object, alg: Algorithm) -> None:
    key, ctx, data = os.urandom(alg.spec.key_len), b"context", os.urandom(2 * CHUNK + 100)
    sealed = seal_all(alg, key, ctx, data)
    header, chunks = 56, [56, 56 + SEALED, 56 + 2 * SEALED]
    positions = [0, 23, 24, 55, *[c + o for c in chunks for o in (0, 100)], len(sealed) - 1]
    for pos in positions:
        bad = bytearray(sealed)
        bad[pos] ^= 0x01
        with pytest.raises(DecryptionError):
            open_all(alg, key, ctx, bytes(bad))
    c0, c1, c2 = (sealed[c : c + SEALED] for c in chunks)
    variants = {
        "wrong key": (os.urandom(alg.spec.key_len), ctx, sealed),
        "wrong context": (key, b"context!", sealed),
        "reordered": (key, ctx, sealed[:header] + c1 + c0 + c2),
        "duplicated": (key, ctx, sealed[:header] + c0 + c0 + c2),
        "truncated final": (key, ctx, sealed[: chunks[2]]),
        "truncated in tag": (key, ctx, sealed[:-1]),
        "trailing data": (key, ctx, sealed + b"\x00"),
        "short header": (key, ctx, sealed[:40]),
        "empty": (key, ctx, b""),
    }
    for name, (k, c, ct) in variants.items():
        with pytest.raises(DecryptionError):
            open_all(alg, k, c, ct)
        assert name


def test_inputs_accept_bytes_bytearray_memoryview(impl: object) -> None:
    alg, key, data = Algorithm.AES_256_GCM, os.urandom(32), os.urandom(40000)
    for wrap in (bytes, bytearray, memoryview):
        enc = ChunkedEncryptor(alg, wrap(key), wrap(b"ctx"))
        sealed = enc.update(wrap(data)) + enc.finalize()
        dec = ChunkedDecryptor(alg, wrap(key), wrap(b"ctx"))
        assert dec.update(wrap(sealed)) + dec.finalize() == data


def test_update_into_writes_exactly_what_update_size_says(impl: object) -> None:
    alg, key = Algorithm.CHACHA20_POLY1305, os.urandom(32)
    enc = ChunkedEncryptor(alg, key, b"")
    out = bytearray()
    for n in (1, 16383, 5, 40000, 0, 16384):
        buf = bytearray(enc.update_size(n))
        assert enc.update_into(os.urandom(n), buf) == len(buf)
        out += buf
    buf = bytearray(enc.finalize_size())
    assert enc.finalize_into(buf) == len(buf)
    with pytest.raises(ValueError, match="finalize"):
        enc.update(b"x")
    assert len(out + buf) == engine.sealed_size(1 + 16383 + 5 + 40000 + 16384)


def test_counter_limit_is_enforced() -> None:
    # sealflow's own framing (cryptography.cobblestone, used for AES when the
    # cryptography provider does chunks, keeps its counter out of reach).
    engine.set_provider("native")
    try:
        enc = ChunkedEncryptor(Algorithm.AES_128_GCM, bytes(16), b"")
        enc2 = ChunkedEncryptor(Algorithm.AES_128_GCM, bytes(16), b"")
    finally:
        engine.set_provider(None)
    codec, codec2 = enc._codec, enc2._codec
    assert isinstance(codec, FramingSealer)
    assert isinstance(codec2, FramingSealer)
    codec._counter = (1 << 38) - 1  # as if 2**38 - 1 chunks had been sealed
    assert len(enc.update(bytes(CHUNK))) == 56 + SEALED  # chunk number 2**38 - 1 is the last
    with pytest.raises(ValueError, match="counter limit"):
        enc.finalize()
    codec2._counter = (1 << 38) - 1
    assert len(enc2.finalize()) == 56 + 16  # the last allowed chunk number still seals


@pytest.mark.parametrize("alg", list(Algorithm))
def test_the_codec_table_picks_cobblestone_for_aes_under_cryptography_else_framing(
    impl: tuple[str, engine.ContextStrategy], alg: Algorithm
) -> None:
    provider = impl[0]
    key = os.urandom(alg.spec.key_len)
    enc, dec = ChunkedEncryptor(alg, key, b"ctx"), ChunkedDecryptor(alg, key, b"ctx")
    # The public classes are what callers get: the codec is a part, not a subclass.
    assert type(enc) is ChunkedEncryptor
    assert type(dec) is ChunkedDecryptor
    if provider == "cryptography" and alg in COBBLESTONE:
        assert type(enc._codec) is CobbleSealer
        assert type(dec._codec) is CobbleOpener
    else:
        assert type(enc._codec) is FramingSealer
        assert type(dec._codec) is FramingOpener
        # The framing loop calls the chunk functions of the provider that was forced.
        assert enc._codec._provider is engine.PROVIDERS[provider]
        assert dec._codec._provider is engine.PROVIDERS[provider]


@pytest.mark.parametrize("alg", list(Algorithm))
def test_the_codec_follows_the_calibrated_chunks_provider(alg: Algorithm) -> None:
    engine.set_provider(None)
    chosen = engine.provider_choice()[alg]["chunks"]
    key = os.urandom(alg.spec.key_len)
    enc, dec = ChunkedEncryptor(alg, key), ChunkedDecryptor(alg, key)
    assert type(enc) is ChunkedEncryptor
    assert type(dec) is ChunkedDecryptor
    if chosen == "cryptography" and alg in COBBLESTONE:
        assert (type(enc._codec), type(dec._codec)) == (CobbleSealer, CobbleOpener)
    else:
        assert (type(enc._codec), type(dec._codec)) == (FramingSealer, FramingOpener)
