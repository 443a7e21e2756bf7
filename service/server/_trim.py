"""glibc's allocator, tuned for large bodies; and memory given back to the system once idle.

Two things, both about glibc (elsewhere this module does nothing):

- **Fixed thresholds at startup** (``tune``). By default glibc serves a large allocation
  from ``mmap`` and, once one is freed, raises its threshold and serves the next ones from
  the heap, which it shrinks again (``brk``) whenever more than the trim threshold is free at
  its top. A large body moves through the server in pieces of 64 KiB to a few MiB that are
  allocated and freed in turn, so every piece came from freshly mapped pages: a page fault
  per 4 KiB, a fifth of the server's CPU time while it received a 256 MiB body, and twice
  the time of the upload (0.55 s against 0.28 s measured with the thresholds fixed). With
  the mmap threshold fixed at ``MMAP_THRESHOLD`` and the trim threshold at
  ``TRIM_THRESHOLD``, pieces reuse the same warm heap pages. Larger values (8 and 32 MiB)
  were no faster and left 41 MiB that ``malloc_trim`` could not give back after the
  stalled-streams test in ``tests/service/server/test_memory.py``.
- **Trim when idle** (``Trimmer``), which gives back what those thresholds keep, and more:

  glibc keeps what a process frees in its arenas (one per thread that allocated) instead of
  returning it, so a burst of large requests leaves the resident size at its peak for good:
  ten concurrent 32 MiB requests that stalled and were cut off left RSS 84 MiB above its
  start, all of it free inside the allocator (``malloc_trim`` brought it back to +2 MiB). So,
  a second after the last request in flight ends, and at most once a second, the server
  calls ``malloc_trim(0)``.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable

DELAY = 1.0
MMAP_THRESHOLD = 2 << 20  # allocations above it still get their own mapping
TRIM_THRESHOLD = 8 << 20  # free memory kept at the heap's top between requests
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # from glibc's malloc.h


def _libc(name: str) -> Callable[..., int] | None:
    try:
        fn: Callable[..., int] = getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):  # not glibc
        return None
    return fn


def _malloc_trim() -> Callable[[int], int] | None:
    return _libc("malloc_trim")


def tune() -> bool:
    """Fix glibc's mmap and trim thresholds (see above); False where there is no glibc."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return False
    # mallopt returns 1 on success, 0 on error.
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


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
