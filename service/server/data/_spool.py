"""The output spool: where a request's output waits until its body has ended.

Request-then-response (the default transport) answers only once the whole request body has
been read, so that half-duplex clients (httpx, requests, urllib and most SDKs) and proxies that
stop forwarding a body once the response has begun (nginx) work at any size. The output is
produced batch by batch as the body arrives, as in full duplex; it waits here:

- in memory up to ``memory_limit`` bytes;
- beyond, in a temporary file that never has a name (``tempfile.TemporaryFile`` uses
  ``O_TMPFILE`` on Linux, elsewhere it unlinks the file at once), so a crash leaves nothing
  behind and no other process can open it through its directory.

What is written is ciphertext: an encrypt's envelope, or the envelope a stream decrypt
received (``_reopen``: authenticated as it arrived, opened again as it is sent), kept as it is.
Only a spool made with ``sealed=True`` may be given plaintext (a mode=records decrypt, or a
stream decrypt small enough to stay in the memory part): what reaches its file is sealed with
C2SP chunked encryption under a random key that lives only in this object (AES-256-GCM, one
chunked stream per spool).

A file that gives back fewer bytes than were written, or (sealed) fails to open, is
``damaged``: the request ends there, and the reply is cut off if it had begun. Bytes changed
in a file kept as it is are for its caller to catch: an encrypt's envelope fails at its own
decryption, a decrypt's envelope fails its second open (``_reopen``).

A process-wide ``SpoolBudget`` (``_budget``) bounds the disk all spools may use at once (507
``spool_full`` beyond it), and a per-request limit bounds one (413). A disk that fills up before
either (other files on it, a small tmpfs as TMPDIR) is 507 ``insufficient_storage``: every disk
write (the file's creation, each piece, a sealed spool's last chunk) happens before the answer's
first byte, so the refusal is always a clean answer, and the caller's ``close()`` frees the file
before it goes out. Everything is released by ``close()``, on every path out of a request.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

from sealflow import engine

from .. import _metrics, errors
from .._budget import SpoolBudget

log = logging.getLogger("sealflow.spool")

# The file is read back in pieces of this size (of what was written); a multiple of C2SP's
# chunk. Each piece is a new object: the transport may keep it until it is sent.
READ_PIECE = 16 * engine.CHUNK_LEN
_SEALED_PIECE = READ_PIECE + READ_PIECE // engine.CHUNK_LEN * engine.TAG_LEN
_ALG = engine.Algorithm.AES_256_GCM
_CONTEXT = b"sealflow output spool"

# A full disk, or the user's quota on it: the request cannot be spooled now; another may be.
_DISK_FULL = frozenset((errno.ENOSPC, errno.EDQUOT))

Piece = bytes | bytearray
# What the output is passed through on its way back out, piece by piece (or None: as it is).
Through = Callable[[Piece], Piece] | None


def damaged(why: str) -> errors.ApiError:
    """The error for a spool whose file did not give back what was written to it."""
    log.error("spool: %s; the request is ended without passing it on", why)
    _metrics.SPOOL_DAMAGED.inc()
    return errors.spool_damaged()


@contextlib.contextmanager
def _disk() -> Iterator[None]:
    """Writes to the spool's disk: a full one is 507 ``insufficient_storage``, other errors
    stay what they are (a failing disk is the server's 500)."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        log.warning("spool: the disk is full (%s); the request is refused with 507", exc.strerror)
        _metrics.SPOOL_DISK_FULL.inc()
        raise errors.insufficient_storage() from None


class Spool:
    """One request's output, written in order, then read back once, in order."""

    def __init__(
        self,
        pool: engine.CryptoPool,
        budget: SpoolBudget,
        memory_limit: int,
        request_limit: int,
        directory: Path | None,
        *,
        sealed: bool = False,
    ) -> None:
        self._pool = pool
        self._budget = budget
        self._memory_limit = memory_limit
        self._request_limit = request_limit
        self._directory = directory
        self._sealed = sealed
        self._memory: list[Piece] = []
        self._in_memory = 0
        self._file: io.FileIO | None = None
        self._sealer: engine.ChunkedEncryptor | None = None
        self._key = b""
        self._scratch = bytearray()  # sealed bytes on their way to or from the file
        self._on_disk = 0  # bytes written to the file (before sealing)
        self._taken = 0  # disk budget taken (bytes in the file)
        self.size = 0

    async def write(self, data: Piece, more: bool = True) -> None:
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
            with _disk():
                self._open()
        grows = len(data) if self._sealer is None else self._sealer.update_size(len(data))
        self._budget.take(grows)
        self._taken += grows
        self._on_disk += len(data)
        with _disk():
            await self._pool.run(len(data), self._put, data)

    async def chunks(self, through: Through = None) -> AsyncIterator[Piece]:
        """The output, in order: what is in memory, then the file, read piece by piece; each
        piece passed through ``through`` if given (in the same job as its read).

        A sealed file's last chunk is written before the first piece comes out: its disk may
        be full, and that must be a clean error, not a reply cut off."""
        pool = self._pool
        if self._sealer is not None:
            await self._seal_tail()
        for piece in self._memory:
            yield piece if through is None else await pool.run(len(piece), through, piece)
        self._memory.clear()
        if self._file is None:
            return
        if self._sealer is None:
            self._file.seek(0)
            left = self._on_disk
            while left:
                n = min(READ_PIECE, left)
                yield await pool.run(n, self._get, n, through)
                left -= n
            return
        self._file.seek(0)
        opener = engine.ChunkedDecryptor(_ALG, self._key, _CONTEXT)
        while True:
            piece, done = await pool.run(READ_PIECE, self._get_sealed, opener, through)
            if piece:
                yield piece
            if done:
                return

    async def _seal_tail(self) -> None:
        assert self._sealer is not None
        assert self._file is not None
        tail = self._sealer.finalize()
        self._budget.take(len(tail))
        self._taken += len(tail)
        with _disk():
            await self._pool.run(len(tail), _write_all, self._file, memoryview(tail))

    def close(self) -> None:
        """Forget everything: the memory part, the file (it has no name) and the key."""
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
        if self._sealed:
            self._key = os.urandom(32)
            self._sealer = engine.ChunkedEncryptor(_ALG, self._key, _CONTEXT)
        _metrics.SPOOLED_REQUESTS.inc()

    def _put(self, data: Piece) -> None:
        assert self._file is not None
        if self._sealer is None:
            with memoryview(data) as view:
                _write_all(self._file, view)
            _metrics.SPOOL_BYTES_WRITTEN.inc(len(data))
            return
        # Sealed into one scratch buffer kept for the spool's life, written from there.
        need = self._sealer.update_size(len(data))
        if len(self._scratch) < need:
            self._scratch = bytearray(need)
        n = self._sealer.update_into(data, self._scratch)
        with memoryview(self._scratch) as scratch:
            _write_all(self._file, scratch[:n])
        _metrics.SPOOL_BYTES_WRITTEN.inc(n)

    def _get(self, n: int, through: Through) -> Piece:
        """The next n bytes written, read back (and passed through)."""
        assert self._file is not None
        piece = self._file.read(n)
        if piece is None or len(piece) != n:
            raise damaged("the spool file is shorter than what was written to it")
        return piece if through is None else through(piece)

    def _get_sealed(self, opener: engine.ChunkedDecryptor, through: Through) -> tuple[Piece, bool]:
        """The next piece of plaintext from a sealed file (passed through), and whether it
        was the last."""
        # Read into the scratch buffer; opened into a new bytearray each time, since the
        # piece is handed to the transport, which may keep it until it is sent.
        assert self._file is not None
        if len(self._scratch) < _SEALED_PIECE:
            self._scratch = bytearray(_SEALED_PIECE)
        out: Piece
        try:
            with memoryview(self._scratch) as scratch:
                n = self._file.readinto(scratch[:_SEALED_PIECE])
                if n:
                    out = bytearray(opener.update_size(n))
                    del out[opener.update_into(scratch[:n], out) :]
                else:
                    out = opener.finalize()
        except engine.DecryptionError:
            raise damaged("the sealed spool file failed to open") from None
        return (out if through is None else through(out)), not n


def _write_all(file: io.FileIO, data: memoryview) -> None:
    """An unbuffered file may take less than asked (a signal, a full disk): write the rest."""
    while data:
        written = file.write(data)
        if written is None:  # only for non-blocking files, which this is not
            raise BlockingIOError
        data = data[written:]
