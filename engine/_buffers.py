"""Body buffers for single-shot messages, and a pool that reuses them.

After OpenJDK's AEADBufferedStream, without the per-update reallocation that
JDK-8298865 removed: an ``AEADBuffer`` is allocated once at the exact size when
the body size is known (Content-Length), otherwise it grows by doubling, so a
message fed in n pieces costs n copies and O(log n) reallocations. Sealing and
opening run in place on the buffer. Released buffers are zeroed and pooled.
"""

from __future__ import annotations

import threading

from ._aead import open_into, seal_into
from ._binding import cleanse
from ._types import TAG_LEN, Algorithm, BytesLike

_MIN_CAPACITY = 4096


class AEADBuffer:
    """A byte buffer for one message, filled piece by piece and sealed or opened in place."""

    __slots__ = ("_buf", "_len", "_pool", "growths")

    def __init__(self, capacity: int, pool: BufferPool | None = None) -> None:
        self._buf = bytearray(capacity)
        self._len = 0
        self._pool = pool
        self.growths = 0

    def __len__(self) -> int:
        return self._len

    @property
    def capacity(self) -> int:
        return len(self._buf)

    def view(self) -> memoryview:
        """The filled bytes, without a copy; valid until the buffer is released."""
        return memoryview(self._buf)[: self._len]

    def reserve(self, total: int) -> None:
        """Make room for `total` bytes in all, growing at least twofold if it must grow."""
        if total > len(self._buf):
            self._grow(max(total, 2 * len(self._buf), _MIN_CAPACITY))

    def feed(self, piece: BytesLike) -> None:
        """Append one piece: one copy, and a reallocation only when capacity runs out."""
        n = len(piece) if type(piece) is bytes else memoryview(piece).nbytes
        end = self._len + n
        if end > len(self._buf):
            self.reserve(end)
        self._buf[self._len : end] = piece
        self._len = end

    def seal(
        self,
        alg: Algorithm | str,
        key: BytesLike,
        nonce: BytesLike,
        aad: BytesLike | None,
        start: int = 0,
    ) -> None:
        """Seal bytes [start:] in place and append the tag."""
        self.reserve(self._len + TAG_LEN)
        with memoryview(self._buf) as whole:
            n = seal_into(alg, key, nonce, aad, whole[start : self._len], whole[start:])
        self._len = start + n

    def open(
        self,
        alg: Algorithm | str,
        key: BytesLike,
        nonce: BytesLike,
        aad: BytesLike | None,
        start: int = 0,
    ) -> memoryview:
        """Open bytes [start:] (ciphertext || tag) in place; return a view of the plaintext.

        The view exists only once the tag has verified; on failure the region
        is wiped and ``DecryptionError`` raised.
        """
        with memoryview(self._buf) as whole:
            n = open_into(alg, key, nonce, aad, whole[start : self._len], whole[start:])
        self._len = start + n
        return memoryview(self._buf)[start : self._len]

    def clear(self) -> None:
        """Zero the used bytes and empty the buffer, keeping its capacity."""
        cleanse(self._buf, self._len)
        self._len = 0

    def release(self) -> None:
        """Zero the buffer and hand it back to its pool (if any). Views must be released first."""
        self.clear()
        if self._pool is not None:
            self._pool.give_back(self)

    def _grow(self, capacity: int) -> None:
        old = self._buf
        new = bytearray(capacity)
        new[: self._len] = memoryview(old)[: self._len]
        cleanse(old, self._len)
        self._buf = new
        self.growths += 1


class BufferPool:
    """Keeps released buffers for reuse, up to a count and a total size."""

    def __init__(self, max_buffers: int = 64, max_bytes: int = 256 << 20) -> None:
        self._free: list[AEADBuffer] = []
        self._lock = threading.Lock()
        self.max_buffers = max_buffers
        self.max_bytes = max_bytes
        self.pooled_bytes = 0
        self.allocations = 0
        self.reuses = 0
        self.growths = 0

    def acquire(self, size_hint: int | None = None) -> AEADBuffer:
        """A buffer with room for size_hint bytes (exact if new), or a small growable one."""
        want = _MIN_CAPACITY if size_hint is None else max(size_hint, 1)
        with self._lock:
            best = None
            for i, buf in enumerate(self._free):
                # Fit without wasting more than half of the buffer.
                if want <= buf.capacity <= 2 * want and (
                    best is None or buf.capacity < self._free[best].capacity
                ):
                    best = i
            if best is not None:
                buf = self._free.pop(best)
                self.pooled_bytes -= buf.capacity
                self.reuses += 1
                buf.growths = 0
                return buf
            self.allocations += 1
        return AEADBuffer(want, self)

    def give_back(self, buf: AEADBuffer) -> None:
        with self._lock:
            self.growths += buf.growths
            if (
                len(self._free) < self.max_buffers
                and self.pooled_bytes + buf.capacity <= self.max_bytes
            ):
                self._free.append(buf)
                self.pooled_bytes += buf.capacity

    @property
    def pooled(self) -> int:
        return len(self._free)
