"""Where audit lines go: a file (rotated by size, shared by processes) or standard output.

A sink writes a batch whole or raises ``OSError``, and a batch that raised counts as not
written: the ``Auditor`` writes it again (mode required) or counts it as dropped. So a sink
never leaves part of a batch behind if it can take it back, and never needs to remember
anything about a failure to write the next batch cleanly.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from typing import Protocol

from ._files import rotated_name

_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
# How often the live path may be found replaced in a row before a write gives up: each time
# means another process rotated the file in the meantime, so this is only a bound on a spin.
_REOPENS = 100


class Sink(Protocol):
    def write(self, lines: list[bytes]) -> None:
        """Write the lines, each followed by a newline, all or none; OSError on failure."""

    def close(self) -> None: ...


def _write_all(fd: int, data: bytes) -> tuple[int, OSError | None]:
    """Write ``data`` whole, however many calls it takes: the bytes written, and the error that
    stopped it if one did (a short write and then ENOSPC is how a full disk shows)."""
    view = memoryview(data)
    done = 0
    try:
        while done < len(data):
            n = os.write(fd, view[done:])
            if n == 0:
                return done, OSError(errno.EIO, "the write took no bytes")
            done += n
    except OSError as exc:
        return done, exc
    return done, None


class FileSink:
    """Appends to ``path`` (created 0600; its folder must exist), rotating it at
    ``rotate_bytes`` (0: never) to ``<path>.<UTC time>``.

    Several processes may write one path (uvicorn's workers, the CLI next to the server).
    They agree through an exclusive ``flock`` on the live file, held for one batch: under it a
    writer checks that its descriptor is still the file at ``path`` (another writer may have
    rotated it, or someone removed it: then it opens the path again, which fails if the folder
    is gone), rotates if the batch would take the file past ``rotate_bytes``, and appends the
    batch in one write. Because nobody else appends meanwhile, a short write (a full disk) is
    taken back by truncating to the size before it, so the file only ever holds whole lines.
    That costs a stat, an fstat and two flocks per batch (about a microsecond each), which
    is what makes a removed file or folder fail the very next write instead of vanishing into a
    file with no name.
    """

    def __init__(self, path: Path, rotate_bytes: int) -> None:
        if rotate_bytes < 0:
            raise ValueError("rotate_bytes must be 0 (never) or more")
        self.path = path
        self.rotate_bytes = rotate_bytes
        self._fd = os.open(path, _FLAGS, 0o600)

    def write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        data = b"\n".join(lines) + b"\n"
        size = self._lock_live()
        try:
            while self.rotate_bytes and size and size + len(data) > self.rotate_bytes:
                # Renamed under the lock, so no one writes to it any more; the new file may
                # have filled up while this writer waited for it, hence the loop.
                os.rename(self.path, rotated_name(self.path, time.time()))
                self._drop()
                size = self._lock_live()
            done, error = _write_all(self._fd, data)
            if error is not None:
                if done:
                    os.ftruncate(self._fd, size)
                raise error
        finally:
            if self._fd >= 0:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _lock_live(self) -> int:
        """Lock the file at ``path``, opening it again if it is not the one held; its size."""
        for _ in range(_REOPENS):
            if self._fd < 0:
                self._fd = os.open(self.path, _FLAGS, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                held = os.fstat(self._fd)
                try:
                    live = os.stat(self.path)
                except FileNotFoundError:
                    live = None
            except BaseException:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                raise
            if live is not None and (live.st_ino, live.st_dev) == (held.st_ino, held.st_dev):
                return held.st_size
            self._drop()
        raise OSError(errno.EAGAIN, f"{self.path} keeps being replaced")

    def _drop(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing releases its lock
            self._fd = -1

    def close(self) -> None:
        self._drop()


class StdoutSink:
    """Lines on file descriptor 1, for containers whose log collector reads standard output.

    A stream cannot take back a short write: the next batch then starts with a newline, so
    the cut line stands alone (and fails verification, which is the truth) and the lines
    after it stay whole.
    """

    def __init__(self) -> None:
        self._torn = False

    def write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        data = (b"\n" if self._torn else b"") + b"\n".join(lines) + b"\n"
        done, error = _write_all(1, data)
        if done:
            self._torn = data[done - 1] != ord("\n")
        if error is not None:
            raise error

    def close(self) -> None:
        """Nothing to close: descriptor 1 is the process's, not the sink's."""
