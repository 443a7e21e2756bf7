"""seal_many/open_many: batches of records, checked against ``cryptography`` one record at a time.

Every test runs over both providers and every context strategy (the ``impl`` fixture).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealflow import engine
from sealflow.engine import Algorithm, DecryptionError, Records, RecordStatus
from tests.conftest import PROVIDERS, STRATEGIES

ALGS = list(Algorithm)
FIXED = 12 + 16


@contextmanager
def using(provider: str, strategy: engine.ContextStrategy) -> Iterator[None]:
    """The impl fixture's settings for one hypothesis example (a fixture runs once per test)."""
    before = engine.get_context_strategy()
    engine.set_provider(provider)
    engine.set_context_strategy(strategy)
    try:
        yield
    finally:
        engine.set_provider(None)
        engine.set_context_strategy(before)


def oracle(alg: Algorithm, key: bytes) -> AESGCM | ChaCha20Poly1305:
    return ChaCha20Poly1305(key) if alg is Algorithm.CHACHA20_POLY1305 else AESGCM(key)


def framed(records: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(r)) + r for r in records)


def as_input(records: list[bytes], shape: str) -> Records | list[bytes]:
    if shape == "list":
        return records
    if shape == "lengths":
        return Records.from_lengths(b"".join(records), [len(r) for r in records])
    return Records.from_framed(framed(records))


SHAPES = ["list", "lengths", "framed"]


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("out_framed", [False, True])
def test_each_sealed_record_opens_with_cryptography(
    impl: object, alg: Algorithm, shape: str, out_framed: bool
) -> None:
    key, prefix, aad = os.urandom(alg.spec.key_len), b"SFL1\x02prefix", b"user aad"
    records = [os.urandom(n) for n in (0, 1, 15, 16, 100, 1024, 5000)]
    sealed = engine.seal_many(
        alg, key, aad, as_input(records, shape), prefix=prefix, framed=out_framed
    )
    assert len(sealed) == len(records)
    g = oracle(alg, key)
    for record, plain in zip(sealed, records, strict=True):
        assert record[: len(prefix)] == prefix
        body = record[len(prefix) :]
        assert g.decrypt(body[:12], body[12:], prefix + aad) == plain
        # The same envelope the service's single-shot path opens: AAD = prefix || user AAD.
        assert engine.open(alg, key, body[:12], prefix + aad, body[12:]) == plain
    expected = b"".join((struct.pack(">I", len(r)) if out_framed else b"") + r for r in sealed)
    assert bytes(sealed.data) == expected
    assert sealed.offsets[len(records)] == len(sealed.data)


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("shape", SHAPES)
def test_records_sealed_by_cryptography_open(impl: object, alg: Algorithm, shape: str) -> None:
    key, prefix, aad = os.urandom(alg.spec.key_len), b"P" * 20, b"a"
    g = oracle(alg, key)
    plains = [os.urandom(n) for n in (0, 3, 64, 4096, 20000)]
    records = []
    for p in plains:
        nonce = os.urandom(12)
        records.append(prefix + nonce + g.encrypt(nonce, p, prefix + aad))
    opened = engine.open_many(alg, key, aad, as_input(records, shape), prefix=prefix)
    assert opened.status == bytes(len(records))
    assert list(opened) == plains
    assert bytes(opened.data) == b"".join(plains)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    alg=st.sampled_from(ALGS),
    provider=st.sampled_from(PROVIDERS),
    strategy=st.sampled_from(STRATEGIES),
    sizes=st.lists(st.integers(0, 300) | st.sampled_from([4095, 4096, 9000]), max_size=40),
    prefix=st.binary(max_size=80),
    aad=st.binary(max_size=40),
    shape=st.sampled_from(SHAPES),
)
def test_round_trip_property(
    alg: Algorithm,
    provider: str,
    strategy: engine.ContextStrategy,
    sizes: list[int],
    prefix: bytes,
    aad: bytes,
    shape: str,
) -> None:
    with using(provider, strategy):
        round_trip(alg, sizes, prefix, aad, shape)


def round_trip(alg: Algorithm, sizes: list[int], prefix: bytes, aad: bytes, shape: str) -> None:
    key = os.urandom(alg.spec.key_len)
    plains = [os.urandom(n) for n in sizes]
    sealed = engine.seal_many(alg, key, aad, as_input(plains, shape), prefix=prefix)
    assert [len(r) for r in sealed] == [len(prefix) + FIXED + n for n in sizes]
    opened = engine.open_many(alg, key, aad, as_input(list(sealed), shape), prefix=prefix)
    assert opened.indices(RecordStatus.OK) == list(range(len(sizes)))
    assert list(opened) == plains
    g = oracle(alg, key)
    for record, plain in zip(sealed, plains, strict=True):
        body = record[len(prefix) :]
        assert g.decrypt(body[:12], body[12:], prefix + aad) == plain


@pytest.mark.parametrize("alg", ALGS)
def test_zero_records(impl: object, alg: Algorithm) -> None:
    key = os.urandom(alg.spec.key_len)
    empty: list[Records | list[bytes]] = [
        [],
        Records.from_framed(b""),
        Records.from_lengths(b"", []),
    ]
    for records in empty:
        sealed = engine.seal_many(alg, key, b"", records, prefix=b"p", framed=True)
        assert (len(sealed), list(sealed), bytes(sealed.data)) == (0, [], b"")
        opened = engine.open_many(alg, key, b"", records, prefix=b"p")
        assert (len(opened), list(opened), opened.status) == (0, [], b"")


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("victim", [0, 3, 6])
def test_a_tampered_record_fails_alone_and_releases_nothing(
    impl: object, alg: Algorithm, victim: int
) -> None:
    key, prefix = os.urandom(alg.spec.key_len), b"pre"
    plains = [os.urandom(50 + i) for i in range(7)]
    records = [bytearray(r) for r in engine.seal_many(alg, key, b"x", plains, prefix=prefix)]
    records[victim][len(prefix) + 12 + 5] ^= 0x01  # one ciphertext bit
    opened = engine.open_many(alg, key, b"x", records, prefix=prefix)
    assert opened.indices(RecordStatus.FAILED) == [victim]
    start, end = opened.offsets[victim], opened.offsets[victim + 1]
    assert end - start == len(plains[victim])
    assert bytes(opened.data[start:end]) == bytes(end - start)  # wiped, not released
    with pytest.raises(DecryptionError):
        opened[victim]
    assert [opened[i] for i in range(7) if i != victim] == plains[:victim] + plains[victim + 1 :]


@pytest.mark.parametrize("alg", ALGS)
def test_wrong_aad_key_or_tag_fail_every_record(impl: object, alg: Algorithm) -> None:
    key = os.urandom(alg.spec.key_len)
    sealed = list(engine.seal_many(alg, key, b"aad", [b"a", b"bb", b""]))
    for k, aad, records in [
        (key, b"aae", sealed),
        (os.urandom(alg.spec.key_len), b"aad", sealed),
        (key, b"aad", [r[:-1] + bytes([r[-1] ^ 0x80]) for r in sealed]),
    ]:
        opened = engine.open_many(alg, k, aad, records)
        assert opened.status == bytes([RecordStatus.FAILED]) * 3
        assert bytes(opened.data) == bytes(len(opened.data))


@pytest.mark.parametrize("alg", ALGS)
def test_short_records_and_other_prefixes_are_statuses_not_crashes(
    impl: object, alg: Algorithm
) -> None:
    key, prefix = os.urandom(alg.spec.key_len), b"PFX"
    good = engine.seal_many(alg, key, b"", [b"plain"], prefix=prefix)[0]
    records = [
        b"",  # shorter than the prefix
        b"PF",
        b"PFX",  # prefix only
        b"PFX" + bytes(27),  # one byte short of nonce and tag
        b"QFX" + good[3:],  # another prefix: maybe another key version's record
        good,
        good[:-1],
        b"PFX" + bytes(28),  # empty plaintext, wrong tag
    ]
    opened = engine.open_many(alg, key, b"", records, prefix=prefix)
    S = RecordStatus
    assert list(opened.status) == [
        S.OTHER_PREFIX,
        S.OTHER_PREFIX,
        S.FAILED,
        S.FAILED,
        S.OTHER_PREFIX,
        S.OK,
        S.FAILED,
        S.FAILED,
    ]
    assert opened[5] == b"plain"
    assert bytes(opened.data) == bytes(5) + b"plain" + bytes(4)  # other prefix: zeros too


@pytest.mark.parametrize("alg", ALGS)
def test_records_not_ok_are_zeros_in_an_output_that_is_not_zeroed_first(
    impl: object, alg: Algorithm
) -> None:
    """open_many's output is allocated without zeroing (every byte is written): a record that
    fails or has another prefix must read as zeros even where the memory held other bytes."""
    key, prefix = os.urandom(alg.spec.key_len), b"PFX"
    plains = [os.urandom(1000) for _ in range(60)]
    records = list(engine.seal_many(alg, key, b"", plains, prefix=prefix))
    for i in range(0, 60, 3):
        records[i] = b"QFX" + records[i][3:]  # another prefix
    for i in range(1, 60, 3):
        records[i] = records[i][:-1] + bytes([records[i][-1] ^ 1])  # a bad tag
    for _ in range(3):
        junk = bytearray(b"\xa5") * (60 * 1000)  # freed just before: likely the output's memory
        del junk
        opened = engine.open_many(alg, key, b"", records, prefix=prefix)
        for i in range(60):
            region = bytes(opened.data[opened.offsets[i] : opened.offsets[i + 1]])
            if i % 3 == 2:
                assert opened.status[i] == RecordStatus.OK
                assert region == plains[i]
            else:
                assert opened.status[i] != RecordStatus.OK
                assert region == bytes(1000)


@pytest.mark.parametrize("alg", ALGS)
def test_nonces_are_distinct_across_records_and_batches(impl: object, alg: Algorithm) -> None:
    key = os.urandom(alg.spec.key_len)
    # More records than the C side draws nonces for in one RAND_bytes call (1024).
    batches = [engine.seal_many(alg, key, b"", [b""] * 2500) for _ in range(2)]
    nonces = [r[:12] for batch in batches for r in batch]
    assert len(set(nonces)) == len(nonces) == 5000


def test_one_context_per_batch_under_each_strategy(impl: tuple[str, object]) -> None:
    """A batch is one operation: the native side prepares its context once, not per record."""
    provider, strategy = impl
    key = os.urandom(32)
    engine.seal_many("aes-256-gcm", key, b"", [b"warm"])
    before = engine.context_stats()
    engine.seal_many("aes-256-gcm", key, b"", [b"r"] * 100)
    engine.open_many("aes-256-gcm", key, b"", engine.seal_many("aes-256-gcm", key, b"", [b"r"]))
    after = engine.context_stats()
    events = sum(after[k] - before[k] for k in after if k[0] == provider)
    # Three batches; EAGER frees after each (created + freed), the others reuse.
    assert events == (6 if (provider, strategy) == ("native", engine.ContextStrategy.EAGER) else 3)


def test_wider_memoryview_items_count_their_bytes(impl: object) -> None:
    import array

    key = os.urandom(16)
    words = array.array("I", [1, 2, 3])
    sealed = engine.seal_many("aes-128-gcm", key, b"", [memoryview(words), b"ab"])
    opened = engine.open_many("aes-128-gcm", key, b"", sealed)
    assert list(opened) == [words.tobytes(), b"ab"]


def test_large_list_batches_are_copied_into_one_buffer_of_any_item_types(impl: object) -> None:
    """From 4 MiB a list batch is copied item by item into a buffer of its own (not
    b"".join): the same records come out, for every bytes-like item, wider memoryviews too."""
    import array

    key = os.urandom(32)
    plains = [os.urandom(1000 + i % 7) for i in range(4500)]  # about 4.3 MiB
    items: list[bytes | bytearray | memoryview] = [
        (bytes, bytearray, memoryview)[i % 3](p) for i, p in enumerate(plains)
    ]
    batch = Records.from_list(items)
    assert type(batch.data) is bytearray  # gathered, not joined
    assert bytes(batch.data) == b"".join(plains)
    opened = engine.open_many(
        "aes-256-gcm", key, b"", engine.seal_many("aes-256-gcm", key, b"", items)
    )
    assert list(opened) == plains
    words = array.array("I", range(300_000))  # 1.2 MB whose len() counts 300,000 items
    wide: list[bytes | memoryview] = [memoryview(words), *plains]  # over 4 MiB by len()
    joined = Records.from_list(wide)
    assert bytes(joined.data) == words.tobytes() + b"".join(plains)
    assert list(joined.lengths) == [len(words.tobytes()), *map(len, plains)]


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_bytes_like_inputs(impl: object, wrap: type) -> None:
    alg, key, plains = "chacha20-poly1305", os.urandom(32), [b"one", b"", b"three"]
    sealed = engine.seal_many(
        alg, wrap(key), wrap(b"a"), Records.from_framed(wrap(framed(plains))), prefix=wrap(b"p")
    )
    again = engine.seal_many(alg, key, b"a", [wrap(p) for p in plains], prefix=b"p", framed=True)
    for batch in (list(sealed), Records.from_framed(wrap(bytes(again.data)))):
        opened = engine.open_many(alg, wrap(key), wrap(b"a"), batch, prefix=wrap(b"p"))
        assert list(opened) == plains


def bad_calls() -> list[tuple[str, object]]:
    key = os.urandom(32)
    return [
        ("needs a 32-byte key", lambda: engine.seal_many("aes-256-gcm", key[:16], b"", [b"x"])),
        ("needs a 32-byte key", lambda: engine.open_many("aes-256-gcm", key + b"!", b"", [b"x"])),
        ("unknown algorithm", lambda: engine.seal_many("aes-192-gcm", key, b"", [b"x"])),
        ("framing is truncated", lambda: Records.from_framed(b"\x00\x00\x00\x05abcd")),
        ("framing is truncated", lambda: Records.from_framed(b"\x00\x00\x00\x01a\x00\x00")),
        ("framing is truncated", lambda: Records.from_framed(b"\xff\xff\xff\xff" + bytes(8))),
        ("do not add up", lambda: Records.from_lengths(b"abc", [2, 2])),
        ("do not add up", lambda: Records.from_lengths(b"abcd", [2, 1])),
        ("do not add up", lambda: Records.from_lengths(b"", [2**32 - 1] * 3)),
        ("between 0 and 2\\*\\*32", lambda: Records.from_lengths(b"ab", [3, -1])),
        ("between 0 and 2\\*\\*32", lambda: Records.from_lengths(b"", [2**32])),
    ]


@pytest.mark.parametrize(("message", "call"), bad_calls())
def test_bad_inputs_are_value_errors_before_any_cipher_call(
    impl: object, message: str, call: object
) -> None:
    assert callable(call)
    before = engine.context_stats()
    with pytest.raises(ValueError, match=message):
        call()
    assert engine.context_stats() == before


def test_framing_of_more_records_than_one_native_pass_holds() -> None:
    """The C side reads a batch's lengths 65,536 records a call: a batch of more is read whole,
    a last record cut short is left for later, and one over the limit is refused wherever it
    is, past the first call's records too."""
    lengths = [i % 4 for i in range(70_000)]
    body = framed([bytes(n) for n in lengths])
    assert Records.from_framed(body).lengths.tolist() == lengths
    batch, used = Records.from_stream(body + b"\x00\x00\x00\x09abc", 9)
    assert (batch.lengths.tolist(), used, len(batch.data)) == (lengths, len(body), len(body))
    assert Records.complete_frames(body + b"\x00\x00", 9) == (len(lengths), len(body))
    with pytest.raises(ValueError, match="more than 8 bytes"):
        Records.from_stream(body + b"\x00\x00\x00\x09", 8)
    for cut in (body + b"\x00", body[:-1]):
        with pytest.raises(ValueError, match="framing is truncated"):
            Records.from_framed(cut)
    sealed = engine.seal_many("aes-256-gcm", bytes(32), b"", batch, prefix=b"p", framed=True)
    assert [len(r) for r in sealed] == [1 + FIXED + n for n in lengths]


@pytest.mark.parametrize(
    "records", [b"abc", bytearray(b"abc"), memoryview(b"abc"), "abc", [b"a", "b"], [1, 2]]
)
def test_records_that_are_not_a_list_of_buffers_are_type_errors(
    impl: object, records: object
) -> None:
    with pytest.raises(TypeError, match="bytes-like"):
        engine.seal_many("aes-128-gcm", os.urandom(16), b"", records)  # type: ignore[arg-type]
