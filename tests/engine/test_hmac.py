"""HMAC of one message, of a stream and of batches of records, against Python's ``hmac``.

One implementation each (the native batch call; ``cryptography`` for a stream), so no provider
or strategy fixture: the context strategies are the AEAD contexts', which HMAC does not use.
"""

from __future__ import annotations

import hmac as stdlib_hmac
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sealflow import engine
from sealflow.engine import Digest, HmacStream, Records
from tests.vectors import HmacCase, rfc4231

# Python's hashlib names of each digest.
HASHLIB = {
    Digest.SHA2_224: "sha224",
    Digest.SHA2_256: "sha256",
    Digest.SHA2_384: "sha384",
    Digest.SHA2_512: "sha512",
    Digest.SHA3_224: "sha3_224",
    Digest.SHA3_256: "sha3_256",
    Digest.SHA3_384: "sha3_384",
    Digest.SHA3_512: "sha3_512",
}
# Around every SHA-2 and SHA-3 block size (64, 128, 72..144), and past it (hashed first).
KEYS = [b"", b"k", bytes(range(32)), bytes(range(64)), bytes(range(65)), bytes(range(144))]
KEYS.append(bytes(200))


def expected(digest: Digest, key: bytes, message: bytes) -> bytes:
    return stdlib_hmac.digest(key, message, HASHLIB[digest])


def framed(records: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(r)) + r for r in records)


@pytest.mark.parametrize("case", list(rfc4231()), ids=lambda c: c.id)
def test_rfc4231_vectors(case: HmacCase) -> None:
    assert engine.hmac(case.digest, case.key, case.message) == case.tag
    assert engine.hmac_many(case.digest, case.key, [case.message, case.message]) == case.tag * 2
    stream = HmacStream(case.digest, case.key)
    stream.update(case.message[:3])
    stream.update(case.message[3:])
    assert stream.finalize() == case.tag


def test_rfc4231_covers_every_sha2_digest() -> None:
    assert {c.digest for c in rfc4231()} == {"sha2-224", "sha2-256", "sha2-384", "sha2-512"}


@pytest.mark.parametrize("digest", list(Digest))
@pytest.mark.parametrize("key", KEYS, ids=len)
def test_every_digest_and_key_length_matches_python(digest: Digest, key: bytes) -> None:
    records = [b"", b"a", bytes(100), bytes(range(256)) * 5]
    out = engine.hmac_many(digest, key, records)
    assert out == b"".join(expected(digest, key, r) for r in records)
    assert digest.size == len(expected(digest, key, b""))


@given(
    digest=st.sampled_from(list(Digest)),
    key=st.binary(max_size=200),
    records=st.lists(st.binary(max_size=300), max_size=40),
    in_framed=st.booleans(),
    out_framed=st.booleans(),
)
def test_batches_match_python_record_by_record(
    digest: Digest, key: bytes, records: list[bytes], in_framed: bool, out_framed: bool
) -> None:
    batch = Records.from_framed(framed(records)) if in_framed else records
    out = engine.hmac_many(digest, key, batch, framed=out_framed)
    tags = [expected(digest, key, r) for r in records]
    assert bytes(out) == (framed(tags) if out_framed else b"".join(tags))


def test_inputs_of_every_buffer_type() -> None:
    key, message = bytearray(b"key"), bytearray(b"message")
    tag = expected(Digest.SHA2_256, b"key", b"message")
    assert engine.hmac("sha2-256", memoryview(key), memoryview(message)) == tag
    assert engine.hmac("sha2-256", key, message) == tag
    wide = memoryview(bytes(8)).cast("I")  # 2 items, 8 bytes: all of them are the message
    assert engine.hmac("sha2-256", key, wide) == expected(Digest.SHA2_256, b"key", bytes(8))


def test_an_empty_batch_has_no_tags() -> None:
    assert engine.hmac_many("sha2-256", b"k", []) == b""
    assert engine.hmac_many("sha2-256", b"k", Records.from_framed(b""), framed=True) == b""


def test_different_keys_give_different_tags() -> None:
    assert engine.hmac("sha2-256", b"a", b"m") != engine.hmac("sha2-256", b"b", b"m")


def test_an_unknown_digest_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown digest"):
        engine.hmac("md5", b"k", b"m")
    with pytest.raises(ValueError, match="unknown digest"):
        HmacStream("sha1", b"k")


def test_a_string_key_or_message_is_refused() -> None:
    with pytest.raises(TypeError):
        engine.hmac("sha2-256", "key", b"m")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        engine.hmac_many("sha2-256", b"k", "not records")  # type: ignore[arg-type]


def test_the_self_test_checks_the_native_hmac(monkeypatch: pytest.MonkeyPatch) -> None:
    from sealflow.engine import _selftest

    engine.self_test()
    monkeypatch.setitem(_selftest._HMAC_SHA2, Digest.SHA2_384, bytes(48))
    with pytest.raises(engine.SelfTestError, match="native HMAC sha2-384"):
        engine.self_test()
