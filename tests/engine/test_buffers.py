"""AEADBuffer and BufferPool: exact preallocation, doubling growth, in-place AEAD, zeroing."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from sealflow.engine import AEADBuffer, BufferPool, DecryptionError


def test_size_hint_preallocates_exactly_and_never_grows() -> None:
    pool = BufferPool()
    buf = pool.acquire(1 << 20)
    assert buf.capacity == 1 << 20
    piece = os.urandom(1024)
    for _ in range(1024):
        buf.feed(piece)
    assert len(buf) == 1 << 20
    assert buf.growths == 0
    assert buf.capacity == 1 << 20
    assert bytes(buf.view()) == piece * 1024


def test_without_hint_growth_doubles_not_per_piece() -> None:
    buf = AEADBuffer(4096)
    piece = b"\xab" * 1024
    for _ in range(1024):  # 1 MiB in 1 KiB pieces (the JDK-8298865 trap)
        buf.feed(piece)
    assert len(buf) == 1 << 20
    assert buf.growths == 8  # 4 KiB -> 8 -> ... -> 1 MiB: log2(256) reallocations, not 1024
    assert buf.capacity == 1 << 20
    assert bytes(buf.view()) == piece * 1024


def test_feeding_small_pieces_allocates_about_the_message_once() -> None:
    pool = BufferPool()
    pool.acquire(1 << 20).release()  # warm: the pool now holds a 1 MiB buffer
    piece = os.urandom(1024)
    tracemalloc.start()
    try:
        buf = pool.acquire(1 << 20)
        for _ in range(1024):
            buf.feed(piece)
        _, peak = tracemalloc.get_traced_memory()
        buf.release()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024  # reused from the pool: no per-piece (or even per-message) copy


@pytest.mark.parametrize("alg", ["aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"])
def test_seal_and_open_in_place(impl: object, alg: str) -> None:
    key = os.urandom(16 if alg == "aes-128-gcm" else 32)
    nonce, header, data = os.urandom(12), b"HEADER", os.urandom(70000)
    buf = AEADBuffer(len(header) + len(data) + 16)
    buf.feed(header)
    buf.feed(data)
    buf.seal(alg, key, nonce, b"aad", start=len(header))
    assert len(buf) == len(header) + len(data) + 16
    assert buf.growths == 0
    sealed = bytes(buf.view())
    assert sealed[:6] == header
    assert sealed[6:] != data + bytes(16)
    plain = buf.open(alg, key, nonce, b"aad", start=len(header))
    assert bytes(plain) == data
    plain.release()


def test_failed_open_wipes_and_exposes_nothing(impl: object) -> None:
    key, nonce = os.urandom(32), os.urandom(12)
    buf = AEADBuffer(0)
    buf.feed(b"secret" * 1000)
    buf.seal("aes-256-gcm", key, nonce, None)
    buf.view()[-1:] = b"\x00" if buf.view()[-1] else b"\x01"
    with pytest.raises(DecryptionError):
        buf.open("aes-256-gcm", key, nonce, None)
    assert bytes(buf.view()[:6000]) == bytes(6000)


def test_release_zeroes_and_pool_reuses() -> None:
    pool = BufferPool(max_buffers=2)
    buf = pool.acquire(100)
    buf.feed(b"plaintext" * 10)
    raw = buf._buf
    buf.release()
    assert raw == bytes(len(raw))
    again = pool.acquire(60)
    assert again is buf
    assert len(again) == 0
    assert pool.reuses == 1
    # A buffer much larger than the request is not handed out (it would waste memory).
    again.release()
    assert pool.acquire(10) is not buf


def test_pool_bounds_what_it_keeps() -> None:
    pool = BufferPool(max_buffers=2, max_bytes=1000)
    bufs = [pool.acquire(400) for _ in range(4)]
    for b in bufs:
        b.release()
    assert pool.pooled == 2
    assert pool.pooled_bytes == 800
