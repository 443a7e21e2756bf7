"""What a call uploads: bytes, a binary file, or an iterator (sync or async) of bytes.

``source_for`` turns the caller's input into a ``Source``: its length when it is known in
advance (bytes, a regular file), whether it can be sent again (bytes, a seekable file), and
its chunks. Files and sync iterators are read on a daemon thread a few chunks ahead of the
socket, so a slow disk, pipe or generator never blocks the event loop, and a read blocked on
a stalled pipe or a terminal cannot hold up the end of a failed call (asyncio's executor
would join it).

A regular file of a MiB or more, opened with ``open(path, "rb")``, may instead go from the
page cache to the socket by ``os.sendfile`` (``sendfile_span``; the exchange decides, see
``_duplex``): its bytes never pass through Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import stat
import threading
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable, Iterator
from typing import Any, Protocol, cast, runtime_checkable

from ._errors import InputChanged

CHUNK = 1 << 20  # bytes per read; docs/BENCHMARKS.md ("Client") has the sizes tried
_AHEAD = 4  # chunks read ahead of the socket


@runtime_checkable
class Readable(Protocol):
    """A binary file object: ``read1`` (preferred: pipe data as it comes) or ``read``."""

    def read(self, size: int = ..., /) -> bytes: ...


Input = bytes | bytearray | memoryview | Readable | Iterable[bytes] | AsyncIterable[bytes]
Chunks = AsyncGenerator[bytes | memoryview, None]


_NOT_BYTES = "an input iterator must give bytes-like objects"


def _as_bytes(chunk: object, error: str) -> bytes:
    """bytes of a bytes-like chunk (a copy of a mutable one: the caller may reuse it)."""
    if isinstance(chunk, bytes):
        return chunk
    if isinstance(chunk, bytearray | memoryview):
        return bytes(chunk)
    raise TypeError(f"{error}, not {type(chunk).__name__}")  # an int would be bytes(n) zeros


class Source:
    """The chunks of one upload. ``length`` is None when unknown (sent chunked)."""

    length: int | None = None
    replayable = False
    blocking = False  # reads may block for ever (pipes, terminals, generators)

    def chunks(self) -> Chunks:
        raise NotImplementedError

    def in_memory(self) -> memoryview | None:
        """All of the input, when it is bytes in memory (a small call sends it with the head)."""
        return None

    def sendfile_span(self) -> tuple[Any, int] | None:
        """(file object, offset) of a regular file that may go by ``os.sendfile``: its
        ``length`` bytes from ``offset``. Then ``skip(n)`` tells it that n bytes went that
        way, and ``chunks()`` gives the rest."""
        return None

    def skip(self, sent: int) -> None:
        raise NotImplementedError

    async def rewind(self) -> None:
        """Start again from the beginning (only when ``replayable``)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Stop reading; once this returns, the caller's object is no longer touched
        (but by a read blocked on a pipe or a generator, which is left behind)."""


class _Bytes(Source):
    replayable = True

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._view = memoryview(data).cast("B")
        self.length = len(self._view)

    async def chunks(self) -> Chunks:
        for start in range(0, len(self._view), CHUNK):
            yield self._view[start : start + CHUNK]

    def in_memory(self) -> memoryview:
        return self._view

    async def rewind(self) -> None:
        pass


class _Reader:
    """Calls ``produce`` on a daemon thread until it returns b"", at most _AHEAD ahead."""

    def __init__(self, produce: Callable[[], bytes]) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self._room = threading.Semaphore(_AHEAD)
        self._stop = threading.Event()
        self._finished = self._loop.create_future()
        self._produce = produce
        threading.Thread(target=self._run, name="sealflow-input", daemon=True).start()

    def _run(self) -> None:
        try:
            while True:
                self._room.acquire()
                if self._stop.is_set():
                    return
                chunk = self._produce()
                self._post(chunk)
                if not chunk:
                    return
        except BaseException as e:  # the caller's read failed: the call reports it
            self._post(e)
        finally:
            self._post(None)

    def _post(self, item: bytes | BaseException | None) -> None:
        def deliver() -> None:
            if item is None:
                if not self._finished.done():
                    self._finished.set_result(None)
            elif not self._stop.is_set():
                self._queue.put_nowait(item)

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(deliver)

    async def get(self) -> bytes:
        item = await self._queue.get()
        self._room.release()
        if isinstance(item, BaseException):
            raise item
        return item

    async def stop(self, wait: bool) -> None:
        self._stop.set()
        self._room.release()
        if wait:
            await asyncio.shield(self._finished)


class _File(Source):
    def __init__(self, f: Readable) -> None:
        self._file = cast(Any, f)  # fileno, seekable, tell and seek are optional
        self._read = getattr(f, "read1", None) or f.read  # read1: pipe data as it comes
        self._start: int | None = None
        self._skipped = 0  # bytes already sent by os.sendfile
        self._reader: _Reader | None = None
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if self._file.seekable():
                self._start = self._file.tell()
        self.replayable = self._start is not None
        self.blocking = not self.replayable
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptor: BytesIO
            st = os.fstat(self._file.fileno())
            if stat.S_ISREG(st.st_mode):
                # Zero may be a /proc file that does have content: those go chunked.
                self.length = (st.st_size - (self._start or 0)) or None

    def _produce(self) -> bytes:
        chunk = self._read(CHUNK)
        if chunk is None:  # a non-blocking file with nothing to read now
            raise TypeError("the input file must be opened in blocking mode")
        return _as_bytes(chunk, "the input file must be opened in binary mode")

    def sendfile_span(self) -> tuple[Any, int] | None:
        # Only files whose read() gives the descriptor's bytes (a subclass's may not), and
        # large enough for the copy saved to count.
        plain = type(self._file) in (io.BufferedReader, io.FileIO)
        if plain and self._start is not None and (self.length or 0) >= CHUNK:
            return self._file, self._start
        return None

    def skip(self, sent: int) -> None:
        assert self._start is not None
        self._skipped = sent
        self._file.seek(self._start + sent)  # through the file object: its buffer too

    async def chunks(self) -> Chunks:
        reader = self._reader = _Reader(self._produce)
        sent = self._skipped
        while chunk := await reader.get():
            sent += len(chunk)
            if self.length is not None and sent > self.length:
                raise InputChanged("the input changed size while it was being sent")
            yield chunk
        if self.length is not None and sent != self.length:
            raise InputChanged("the input changed size while it was being sent")

    async def rewind(self) -> None:
        await self.aclose()
        assert self._start is not None
        self._skipped = 0
        self._file.seek(self._start)

    async def aclose(self) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            await reader.stop(wait=not self.blocking)


class _Iterator(Source):
    blocking = True

    def __init__(self, it: Iterable[bytes]) -> None:
        self._it: Iterator[bytes] = iter(it)
        self._reader: _Reader | None = None

    def _produce(self) -> bytes:
        for chunk in self._it:
            if chunk := _as_bytes(chunk, _NOT_BYTES):
                return chunk
        return b""

    async def chunks(self) -> Chunks:
        reader = self._reader = _Reader(self._produce)
        while chunk := await reader.get():
            yield chunk

    async def aclose(self) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            await reader.stop(wait=False)


class _AsyncIterator(Source):
    def __init__(self, it: AsyncIterable[bytes]) -> None:
        self._it = it

    async def chunks(self) -> Chunks:
        async for chunk in self._it:
            if chunk := _as_bytes(chunk, _NOT_BYTES):
                yield chunk


def source_for(data: Input) -> Source:
    """The Source for a call's input, or TypeError."""
    if isinstance(data, bytes | bytearray | memoryview):
        return _Bytes(data)
    if isinstance(data, str):
        raise TypeError("encrypt bytes, not str: encode the text first")
    if isinstance(data, Readable):
        return _File(data)
    if isinstance(data, AsyncIterable):
        return _AsyncIterator(data)
    if isinstance(data, Iterable):
        return _Iterator(data)
    what = type(data).__name__
    raise TypeError(f"cannot send a {what}: pass bytes, a binary file or an iterator of bytes")
