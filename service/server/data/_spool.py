"""The output spool: where a request's output waits until its body has ended.

Request-then-response (the default transport) answers only once the whole request body has
been read, so that half-duplex clients (httpx, requests, urllib and most SDKs) and proxies that
stop forwarding a body once the response has begun (nginx) work at any size. The output is
produced batch by batch as the body arrives, as in full duplex; it waits here:

- in memory up to ``memory_limit`` bytes;
- beyond, in a temporary file that is never readable: it is unlinked from the start
  (``tempfile.TemporaryFile`` uses ``O_TMPFILE`` on Linux), so a crash leaves nothing behind,
  and what is written to it is sealed with C2SP chunked encryption under a random key that
  lives only in this object's memory (AES-256-GCM, one chunked stream per spool).

A process-wide ``SpoolBudget`` (``_budget``) bounds the disk all spools may use at once (507
``spool_full`` beyond it), and a per-request limit bounds one (413). Everything is released
by ``close()``, on every path out of a request.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from sealflow import engine

from .. import _metrics, errors
from .._budget import SpoolBudget

# The spool file is read back in pieces of this size (plaintext); a multiple of C2SP's chunk.
READ_PIECE = 16 * engine.CHUNK_LEN
_SEALED_PIECE = READ_PIECE + READ_PIECE // engine.CHUNK_LEN * engine.TAG_LEN
_ALG = engine.Algorithm.AES_256_GCM
_CONTEXT = b"sealflow output spool"


class Spool:
    """One request's output, written in order, then read back once, in order."""

    def __init__(
        self,
        crypto: engine.CryptoPool,
        budget: SpoolBudget,
        memory_limit: int,
        request_limit: int,
        directory: Path | None,
    ) -> None:
        self._crypto = crypto
        self._budget = budget
        self._memory_limit = memory_limit
        self._request_limit = request_limit
        self._directory = directory
        self._memory: list[bytes | bytearray] = []
        self._in_memory = 0
        self._file: io.FileIO | None = None
        self._sealer: engine.ChunkedEncryptor | None = None
        self._key = b""
        self._scratch = bytearray()  # sealed bytes on their way to or from the file
        self._on_disk = 0  # plaintext bytes in the file
        self._taken = 0  # disk budget taken (ciphertext bytes)
        self.size = 0

    async def write(self, data: bytes | bytearray, more: bool = True) -> None:
        """Keep data for the answer (``more`` as for a reply; the spool ignores it)."""
        if not data:
            return
        self.size += len(data)
        if self._file is None and self._in_memory + len(data) <= self._memory_limit:
            self._memory.append(data)
            self._in_memory += len(data)
            return
        if self._on_disk + len(data) > self._request_limit:
            raise errors.too_large(self._request_limit)
        if self._file is None:
            self._open()
        assert self._sealer is not None
        grows = self._sealer.update_size(len(data))
        self._budget.take(grows)
        self._taken += grows
        self._on_disk += len(data)
        await self._crypto.run(len(data), self._seal_and_write, data)

    async def chunks(self) -> AsyncIterator[bytes | bytearray]:
        """The output, in order: what is in memory, then the file, opened piece by piece."""
        for piece in self._memory:
            yield piece
        self._memory.clear()
        if self._file is None:
            return
        assert self._sealer is not None
        tail = self._sealer.finalize()
        self._budget.take(len(tail))
        self._taken += len(tail)
        await self._crypto.run(len(tail), self._file.write, tail)
        self._file.seek(0)
        opener = engine.ChunkedDecryptor(_ALG, self._key, _CONTEXT)
        while True:
            piece, done = await self._crypto.run(READ_PIECE, self._read_and_open, opener)
            if piece:
                yield piece
            if done:
                return

    def close(self) -> None:
        """Forget everything: the memory part, the file (unlinked already) and the key."""
        self._memory.clear()
        if self._file is not None:
            self._file.close()
            self._file = None
        self._sealer = None
        self._key = b""
        self._scratch = bytearray()
        if self._taken:
            self._budget.give_back(self._taken)
            self._taken = 0

    def _open(self) -> None:
        # TemporaryFile: O_TMPFILE where the filesystem has it, else created and unlinked at
        # once; mode 0600 either way. Unbuffered: the pieces are large.
        self._file = tempfile.TemporaryFile(dir=self._directory, buffering=0)  # noqa: SIM115
        self._key = os.urandom(32)
        self._sealer = engine.ChunkedEncryptor(_ALG, self._key, _CONTEXT)
        _metrics.SPOOLED_REQUESTS.inc()

    def _seal_and_write(self, data: bytes | bytearray) -> None:
        # Sealed into one scratch buffer kept for the spool's life, written from there.
        assert self._sealer is not None
        assert self._file is not None
        need = self._sealer.update_size(len(data))
        if len(self._scratch) < need:
            self._scratch = bytearray(need)
        n = self._sealer.update_into(data, self._scratch)
        with memoryview(self._scratch) as scratch:
            _write_all(self._file, scratch[:n])
        _metrics.SPOOL_BYTES_WRITTEN.inc(n)

    def _read_and_open(self, opener: engine.ChunkedDecryptor) -> tuple[bytes | bytearray, bool]:
        """The next piece of plaintext from the file, and whether it was the last."""
        # Read into the scratch buffer; opened into a new bytearray each time, since the
        # piece is handed to the transport, which may keep it until it is sent.
        assert self._file is not None
        if len(self._scratch) < _SEALED_PIECE:
            self._scratch = bytearray(_SEALED_PIECE)
        with memoryview(self._scratch) as scratch:
            n = self._file.readinto(scratch[:_SEALED_PIECE])
            if not n:
                return opener.finalize(), True
            out = bytearray(opener.update_size(n))
            del out[opener.update_into(scratch[:n], out) :]
        return out, False


def _write_all(file: io.FileIO, data: memoryview) -> None:
    """An unbuffered file may take less than asked (a signal, a full disk): write the rest."""
    while data:
        written = file.write(data)
        if written is None:  # only for non-blocking files, which this is not
            raise BlockingIOError
        data = data[written:]
