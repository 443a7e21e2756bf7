"""Where a response body goes: collected into ``bytes``, written to a file, or handed to an
iterator that the caller consumes.

``reset`` takes back what a sink got, for the client's one retry (a proxy that cannot carry
full duplex): collected bytes can always be dropped, a file or an iterator only while
nothing has reached it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

_DEPTH = 8  # pieces (up to 256 KiB each) waiting for an iterator's consumer


class Writable(Protocol):
    """A binary file object, or anything with ``write(bytes)``."""

    def write(self, data: bytes, /) -> object: ...


def as_bytes(piece: memoryview) -> bytes:
    """``bytes`` of a piece, without a copy when it is a whole ``bytes`` object."""
    obj = piece.obj
    if type(obj) is bytes and len(obj) == len(piece):
        return obj
    return bytes(piece)


class Sink:
    def __init__(self) -> None:
        self.written = 0

    def add(self, piece: memoryview) -> None:
        """Take a piece at once (``Client``'s small calls, on the caller's thread)."""
        raise NotImplementedError

    async def write(self, piece: memoryview) -> None:
        self.add(piece)

    def reset(self) -> bool:
        """Forget what was written, if that is possible."""
        return self.written == 0


class Collect(Sink):
    """The whole body, as ``bytes`` at the end (one copy: the pieces are joined once)."""

    def __init__(self) -> None:
        super().__init__()
        self._pieces: list[memoryview] = []

    def add(self, piece: memoryview) -> None:
        self._pieces.append(piece)
        self.written += len(piece)

    def reset(self) -> bool:
        self._pieces.clear()
        self.written = 0
        return True

    def result(self) -> bytes:
        return b"".join(self._pieces)


class ToFile(Sink):
    """The caller's binary file object. Writes happen on the event loop: give it a file on a
    local disk, or consume ``encrypt_stream``/``decrypt_stream`` instead."""

    def __init__(self, f: Writable) -> None:
        super().__init__()
        self._write = f.write

    def add(self, piece: memoryview) -> None:
        data = as_bytes(piece)  # bytes, whatever the object does with them
        while data:
            n = self._write(data)
            # A raw file may write less; None (an object that does not count) means all.
            data = data[n:] if isinstance(n, int) and 0 < n < len(data) else b""
        self.written += len(piece)


class Channel(Sink):
    """Pieces from the transfer task to an iterator's consumer, at most _DEPTH waiting."""

    def __init__(self) -> None:
        super().__init__()
        self._items: deque[bytes] = deque()
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._done = False
        self._error: BaseException | None = None

    async def write(self, piece: memoryview) -> None:
        while len(self._items) >= _DEPTH:
            self._room.clear()
            await self._room.wait()
        self._items.append(as_bytes(piece))
        self.written += len(piece)
        self._ready.set()

    def finished(self, task: asyncio.Task[None]) -> None:
        """The transfer ended: the consumer gets what is left, then its error if any."""
        self._done = True
        if not task.cancelled():
            self._error = task.exception()
        self._ready.set()

    async def get(self) -> bytes | None:
        """The next piece, None at the end of the body, or the transfer's error."""
        while not self._items:
            if self._done:
                if self._error is not None:
                    raise self._error
                return None
            self._ready.clear()
            await self._ready.wait()
        self._room.set()
        return self._items.popleft()
