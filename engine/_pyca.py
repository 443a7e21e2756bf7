"""The provider over ``cryptography``'s AEAD classes (its bundled OpenSSL has VAES AES-GCM).

Each thread caches one keyed AEAD object per algorithm, the Python analogue of a
cached native context: LAZY and HYBRID keep it while the key stays the same
(a keyed object cannot be re-keyed, so a new key always means a new object),
EAGER builds a new object for every operation.
"""

from __future__ import annotations

import binascii
import hmac
import os
import threading
import weakref
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from . import _strategy
from ._binding import cleanse, writable
from ._errors import DecryptionError
from ._records import Records, TextLayout
from ._types import (
    CHUNK_LEN,
    NONCE_LEN,
    SEALED_CHUNK_LEN,
    TAG_LEN,
    AlgorithmSpec,
    BytesLike,
    RecordStatus,
)

_Aead = AESGCM | ChaCha20Poly1305
_CLASSES: tuple[type[AESGCM] | type[ChaCha20Poly1305], ...] = (AESGCM, AESGCM, ChaCha20Poly1305)
_EAGER = 2
EVENTS = ("created", "reused")

_totals_lock = threading.Lock()
_retired = [0, 0]  # events of threads that have ended


class _ThreadState:
    __slots__ = ("__weakref__", "counts", "keys", "objects")

    def __init__(self) -> None:
        self.keys: list[bytes | None] = [None, None, None]
        self.objects: list[_Aead | None] = [None, None, None]
        self.counts = [0, 0]
        with _totals_lock:
            _live.add(self)
        weakref.finalize(self, _retire, self.counts)


def _retire(counts: list[int]) -> None:
    with _totals_lock:
        _retired[0] += counts[0]
        _retired[1] += counts[1]


_live: weakref.WeakSet[_ThreadState] = weakref.WeakSet()
_local = threading.local()


def _state() -> _ThreadState:
    try:
        state: _ThreadState = _local.state
    except AttributeError:
        state = _local.state = _ThreadState()
    return state


def _aead(spec: AlgorithmSpec, key: BytesLike) -> _Aead:
    c = _state()
    i = spec.index
    cached = c.keys[i]
    # `is` first: a reused engine.AEAD passes the very bytes object that was cached.
    if (
        _strategy.current != _EAGER
        and cached is not None
        and (cached is key or hmac.compare_digest(cached, key))
    ):
        c.counts[1] += 1
        obj = c.objects[i]
        assert obj is not None
        return obj
    obj = _CLASSES[i](key)
    c.counts[0] += 1
    if _strategy.current == _EAGER:
        c.keys[i] = c.objects[i] = None
    else:
        c.keys[i], c.objects[i] = key if type(key) is bytes else bytes(key), obj
    return obj


def _chunk_nonce(base: int, counter: int) -> bytes:
    return (base ^ counter).to_bytes(12, "big")


class CryptographyProvider:
    """AEAD through ``cryptography``'s ``encrypt_into``/``decrypt_into``."""

    name = "cryptography"

    def seal(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        nonce: BytesLike,
        aad: BytesLike,
        data: BytesLike,
    ) -> bytes:
        return _aead(spec, key).encrypt(nonce, data, aad)

    def open(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        nonce: BytesLike,
        aad: BytesLike,
        sealed: BytesLike,
    ) -> bytes:
        try:
            return _aead(spec, key).decrypt(nonce, sealed, aad)
        except InvalidTag:
            raise DecryptionError() from None

    def seal_into(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        nonce: BytesLike,
        aad: BytesLike,
        data: BytesLike,
        out: bytearray | memoryview,
    ) -> None:
        _aead(spec, key).encrypt_into(nonce, data, aad, out)

    def open_into(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        nonce: BytesLike,
        aad: BytesLike,
        sealed: BytesLike,
        out: bytearray | memoryview,
    ) -> None:
        try:
            _aead(spec, key).decrypt_into(nonce, sealed, aad, out)
        except InvalidTag:
            cleanse(out)
            raise DecryptionError() from None

    def chunks_seal_into(
        self,
        spec: AlgorithmSpec,
        key: bytes,
        base_nonce: bytes,
        counter: int,
        data: BytesLike,
        final: bool,
        out: bytearray | memoryview,
    ) -> None:
        aead = _aead(spec, key)
        src, dst = memoryview(data), memoryview(out)
        base = int.from_bytes(base_nonce, "big")
        n = len(src)
        full = n // CHUNK_LEN
        o = 0
        for i in range(full):
            s = i * CHUNK_LEN
            aead.encrypt_into(
                _chunk_nonce(base, counter + i),
                src[s : s + CHUNK_LEN],
                None,
                dst[o : o + SEALED_CHUNK_LEN],
            )
            o += SEALED_CHUNK_LEN
        if final:
            rest = n - full * CHUNK_LEN
            aead.encrypt_into(
                _chunk_nonce(base, counter + full),
                src[full * CHUNK_LEN :],
                None,
                dst[o : o + rest + TAG_LEN],
            )

    def chunks_open_into(
        self,
        spec: AlgorithmSpec,
        key: bytes,
        base_nonce: bytes,
        counter: int,
        sealed: BytesLike,
        final: bool,
        out: bytearray | memoryview,
    ) -> None:
        aead = _aead(spec, key)
        src, dst = memoryview(sealed), memoryview(out)
        base = int.from_bytes(base_nonce, "big")
        n = len(src)
        full = n // SEALED_CHUNK_LEN
        o = 0
        try:
            for i in range(full):
                s = i * SEALED_CHUNK_LEN
                aead.decrypt_into(
                    _chunk_nonce(base, counter + i),
                    src[s : s + SEALED_CHUNK_LEN],
                    None,
                    dst[o : o + CHUNK_LEN],
                )
                o += CHUNK_LEN
            if final:
                rest = n - full * SEALED_CHUNK_LEN
                aead.decrypt_into(
                    _chunk_nonce(base, counter + full),
                    src[full * SEALED_CHUNK_LEN :],
                    None,
                    dst[o : o + rest - TAG_LEN],
                )
                o += rest - TAG_LEN
        except InvalidTag:
            cleanse(dst, min(o + CHUNK_LEN, len(dst)))
            raise DecryptionError() from None

    def seal_many(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        aad: BytesLike,
        prefix_len: int,
        records: Records,
        framed: bool,
        out: bytearray,
        offsets: bytearray,
    ) -> None:
        encrypt_into = _aead(spec, key).encrypt_into
        src, dst, starts = memoryview(records.data), memoryview(out), memoryview(offsets).cast("Q")
        prefix = bytes(aad[:prefix_len])
        skip = 4 if records.is_framed else 0
        fixed = prefix_len + NONCE_LEN + TAG_LEN
        nonces = os.urandom(NONCE_LEN * len(records.lengths))
        s = o = 0
        for i, n in enumerate(records.lengths):
            starts[i] = o
            if framed:
                dst[o : o + 4] = (fixed + n).to_bytes(4, "big")
                o += 4
            dst[o : o + prefix_len] = prefix
            o += prefix_len
            nonce = nonces[i * NONCE_LEN : (i + 1) * NONCE_LEN]
            dst[o : o + NONCE_LEN] = nonce
            o += NONCE_LEN
            s += skip
            encrypt_into(nonce, src[s : s + n], aad, dst[o : o + n + TAG_LEN])
            s += n
            o += n + TAG_LEN
        starts[len(records.lengths)] = o

    def seal_many_text(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        aad: BytesLike,
        records: Records,
        layout: TextLayout,
        out: Any,
        size: int,
    ) -> None:
        encrypt = _aead(spec, key).encrypt
        src, count = memoryview(records.data), len(records.lengths)
        nonces = os.urandom(NONCE_LEN * count)
        before, texts, s = layout.before, [], 0
        for i, (n, after) in enumerate(zip(records.lengths, layout.suffixes(count), strict=True)):
            nonce = nonces[i * NONCE_LEN : (i + 1) * NONCE_LEN]
            sealed = nonce + encrypt(nonce, src[s : s + n], aad)
            texts.append(before + binascii.b2a_base64(sealed, newline=False) + after)
            s += n
        text = layout.head + layout.sep.join(texts) + layout.tail
        if len(text) != size:
            raise ValueError("records: the text does not fill the output")
        writable(out, size)[:] = text

    def open_many(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        aad: BytesLike,
        prefix_len: int,
        records: Records,
        out: bytearray,
        offsets: bytearray,
        status: bytearray,
    ) -> None:
        decrypt_into = _aead(spec, key).decrypt_into
        src, dst, starts = memoryview(records.data), memoryview(out), memoryview(offsets).cast("Q")
        prefix = bytes(aad[:prefix_len])
        skip = 4 if records.is_framed else 0
        fixed = prefix_len + NONCE_LEN + TAG_LEN
        s = o = 0
        for i, n in enumerate(records.lengths):
            starts[i] = o
            s += skip
            record = src[s : s + n]
            s += n
            if record[:prefix_len] != prefix:
                status[i] = _OTHER_PREFIX
                skip_out = max(0, n - fixed)
                dst[o : o + skip_out] = bytes(skip_out)  # out is not zeroed beforehand
                o += skip_out
                continue
            if n < fixed:
                status[i] = _FAILED
                continue
            plain = dst[o : o + n - fixed]
            o += n - fixed
            nonce = record[prefix_len : prefix_len + NONCE_LEN]
            try:
                decrypt_into(nonce, record[prefix_len + NONCE_LEN :], aad, plain)
            except InvalidTag:
                cleanse(plain)
                status[i] = _FAILED
        starts[len(records.lengths)] = o


_FAILED, _OTHER_PREFIX = RecordStatus.FAILED, RecordStatus.OTHER_PREFIX


def context_stats() -> dict[str, int]:
    """Keyed-object events of this provider since process start."""
    with _totals_lock:
        totals = list(_retired)
        for cache in list(_live):
            totals[0] += cache.counts[0]
            totals[1] += cache.counts[1]
    return dict(zip(EVENTS, totals, strict=True))
