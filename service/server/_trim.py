"""Give memory that finished requests freed back to the operating system, once idle.

glibc keeps what a process frees in its arenas (one per thread that allocated) instead of
returning it, so a burst of large requests leaves the resident size at its peak for good:
ten concurrent 32 MiB requests that stalled and were cut off left RSS 84 MiB above its start,
all of it free inside the allocator (``malloc_trim`` brought it back to +2 MiB). So, a second
after the last request in flight ends, and at most once a second, the server calls
``malloc_trim(0)``. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable

DELAY = 1.0


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc
        return None
    return trim


class Trimmer:
    def __init__(self, busy: Callable[[], bool]) -> None:
        self._busy = busy
        self._trim = _malloc_trim()
        self._pending: asyncio.TimerHandle | None = None

    def idle(self) -> None:
        """The last request in flight has ended: trim in a moment, unless one is due."""
        if self._trim is not None and self._pending is None:
            self._pending = asyncio.get_running_loop().call_later(DELAY, self._run)

    def _run(self) -> None:
        self._pending = None
        if self._trim is not None and not self._busy():
            self._trim(0)
