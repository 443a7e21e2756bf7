"""Where audit lines go: a file (rotated by size, shared by processes) or standard output.

A sink writes a batch whole or raises ``OSError``, and a batch that raised counts as not
written: the ``Auditor`` writes it again (mode required) or counts it as dropped. So a sink
never leaves part of a batch behind if it can take it back, and never needs to remember
anything about a failure to write the next batch cleanly.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from pathlib import Path
from typing import Protocol

from ._files import rotated_name

_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
# How often the file opened at the path may be found not live in a row before a write gives up:
# each time means another writer rotated it meanwhile, so this only bounds a spin (or finds a
# live file made read-only by hand).
_REOPENS = 100


class Sink(Protocol):
    # A batch costs a round trip to another process or host (the PostgreSQL table): the
    # ``Auditor`` writes it on a thread of its own (``start_writer``) rather than on the
    # thread that records, which is the event loop in the server. A local sink's write
    # (about 10 us) costs less than handing it to a thread.
    remote: bool

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
    They agree through an exclusive ``flock`` on the live file, held for one batch: under it
    a writer checks that its descriptor is still the live file, rotates if the batch would
    take the file past ``rotate_bytes``, and appends the batch in one write. Because nobody
    else appends meanwhile, a short write (a full disk) is taken back by truncating to the
    size before it, so the file only ever holds whole lines.

    The check costs one ``fstat`` per batch (a stat of the path costs twice that, and
    syscalls are most of a batch's cost): a file removed (with its folder or not) has no
    link left, so the next write opens the path again, which fails while the folder is gone
    rather than vanish into a file with no name; a file rotated by another writer was made
    read-only (0400) by it before it let go of the lock. Only a path replaced by someone
    else (a file moved away by hand, another file mounted over it) is found by a stat of the
    path, every ``CHECK_SECONDS``: until then lines still go to the file that was there,
    which keeps them.
    """

    CHECK_SECONDS = 0.1
    remote = False

    def __init__(self, path: Path, rotate_bytes: int) -> None:
        if rotate_bytes < 0:
            raise ValueError("rotate_bytes must be 0 (never) or more")
        self.path = path
        self.rotate_bytes = rotate_bytes
        self._fd = -1
        self._checked = 0.0
        self._open()

    def write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        data = b"\n".join(lines) + b"\n"
        size = self._lock_live()
        try:
            while self.rotate_bytes and size and size + len(data) > self.rotate_bytes:
                self._rotate()
                # The new file may have filled up while this writer waited for its lock.
                size = self._lock_live()
            done, error = _write_all(self._fd, data)
            if error is not None:
                if done:
                    os.ftruncate(self._fd, size)
                raise error
        finally:
            if self._fd >= 0:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _open(self) -> None:
        self._fd = os.open(self.path, _FLAGS, 0o600)
        self._checked = time.monotonic()

    def _lock_live(self) -> int:
        """Lock the live file, opening the path again if the one held is not it; its size."""
        for _ in range(_REOPENS):
            if self._fd < 0:
                self._open()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                held = os.fstat(self._fd)
                live = held.st_nlink > 0 and held.st_mode & stat.S_IWUSR
                if live and time.monotonic() - self._checked >= self.CHECK_SECONDS:
                    live = self._at_path(held)
                    self._checked = time.monotonic()
            except BaseException:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                raise
            if live:
                return held.st_size
            self._drop()
        raise OSError(errno.EAGAIN, f"{self.path} is read-only, or keeps being replaced")

    def _at_path(self, held: os.stat_result) -> bool:
        try:
            at = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (at.st_ino, at.st_dev) == (held.st_ino, held.st_dev)

    def _rotate(self) -> None:
        """Rename the live file (locked, so no one writes to it meanwhile) and let it go."""
        if self._at_path(os.fstat(self._fd)):  # never rename a file another writer put there
            os.rename(self.path, rotated_name(self.path, time.time()))
            # Read-only: how the writers still holding it learn, at their next fstat, that it
            # was rotated. If the mode cannot be changed (another user's file), their check
            # of the path finds out a little later.
            with contextlib.suppress(OSError):
                os.fchmod(self._fd, 0o400)
        self._drop()

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

    remote = False

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
