"""Where ``sealflow encrypt`` / ``decrypt`` write: stdout, or ``--output``.

A regular file, or a path where nothing is yet, is written as a temporary file beside it that
replaces it only on success: a reader sees the old file or the whole new one. A character
device or a FIFO is written in place, as a shell's ``>`` writes it: it cannot be replaced
(run as root, ``-o /dev/null`` once replaced the system's /dev/null with a regular file) and
its reader is on the other side. A symbolic link is refused, not followed: replacing what it
points to would let a link planted in a shared directory such as /tmp choose which file a root
process replaces, past the kernel's ``protected_symlinks`` (which guards opening through a
link, not a path the program resolved itself). Anything else (a directory, a block device, a
socket) is refused too: nothing that is not a regular file is ever replaced.

An envelope is binary: ``encrypt`` does not write it to a terminal unless asked with ``-o -``,
as ``age`` does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
import threading
from typing import IO

from ._errors import ClientError

_SYNC_EVERY = 16 << 20  # 8 to 64 MiB measured alike; docs/BENCHMARKS.md, "Client"
_TERMINAL = (
    "refusing to write the envelope to a terminal: redirect stdout, give -o FILE, "
    "or force it with -o -"
)
_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFREG: "a regular file",
}
_IN_PLACE = (stat.S_IFCHR, stat.S_IFIFO)


def _lstat(path: str) -> os.stat_result | None:
    """The path itself (a link is not followed), or None when nothing is there."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _is_terminal(f: IO[bytes]) -> bool:
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptor (tests)
        return f.isatty()
    return False


def _refusal(path: str, st: os.stat_result) -> str:
    kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
    if stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(OSError):
            kind += f" (to {os.readlink(path)!r})"
        return (
            f"refusing to write to {path!r}: it is {kind}, which -o does not follow; "
            "give the path of the file it points to"
        )
    return (
        f"refusing to write to {path!r}: it is {kind}; -o writes a regular file (replaced "
        "only on success), a character device or a FIFO"
    )


def _open_in_place(path: str) -> IO[bytes]:
    """A character device or FIFO for writing, as it is (no truncation, no replacement). A
    FIFO's open waits for its reader, as a shell's redirection does."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    if stat.S_IFMT(os.fstat(fd).st_mode) not in _IN_PLACE:  # swapped since the lstat
        os.close(fd)
        raise ClientError(f"refusing to write to {path!r}: it changed while it was opened", 2)
    return os.fdopen(fd, "wb")


class Output:
    """stdout, a temporary file beside --output that replaces it only on success, or a
    character device or FIFO written in place. ``binary``: the output is an envelope.

    The temporary file is fsynced before the rename. So that this does not add the flush of
    the whole file to the command's time (80 ms for 200 MiB here), a daemon thread
    ``fdatasync``s it after every _SYNC_EVERY bytes while the transfer runs, leaving the
    final fsync the tail (docs/BENCHMARKS.md, "Client").
    """

    def __init__(self, path: str | None, binary: bool) -> None:
        self.path, self.tmp, self.rewind = path, "", -1
        self._mode: int | None = None  # the permission bits of the file replaced
        self._unsynced = 0
        self._syncer: threading.Thread | None = None
        self._sync_error: OSError | None = None
        if path is None or path == "-":
            self.f: IO[bytes] = sys.stdout.buffer
            if path is None and binary and _is_terminal(self.f):
                raise ClientError(_TERMINAL, 2)
            self._note_rewind()
            return
        st = _lstat(path)
        if st is None or stat.S_ISREG(st.st_mode):
            import tempfile  # with what it loads, 3 ms of every start: only for --output

            folder, name = os.path.split(os.path.abspath(path))
            fd, self.tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
            self.f = os.fdopen(fd, "wb")
            if st is not None:
                self._keep_owner(st)
        elif stat.S_IFMT(st.st_mode) in _IN_PLACE:
            self.f = _open_in_place(path)
            if binary and _is_terminal(self.f):
                self.f.close()
                raise ClientError(_TERMINAL, 2)
        else:
            raise ClientError(_refusal(path, st), 2)

    def _keep_owner(self, st: os.stat_result) -> None:
        """The file replaced keeps its owner and group (checked now, before anything is sent:
        one that cannot be kept refuses the output) and, at the rename, its permission bits.
        Only a file the command creates is 0600 (mkstemp's)."""
        self._mode = stat.S_IMODE(st.st_mode) & 0o777  # never a set-id bit onto new contents
        mine = os.fstat(self.f.fileno())
        if (mine.st_uid, mine.st_gid) == (st.st_uid, st.st_gid):
            return
        try:
            os.fchown(self.f.fileno(), st.st_uid, st.st_gid)
        except OSError as e:
            self.discard()
            raise ClientError(
                f"refusing to replace {self.path!r}: its owner or group cannot be kept "
                f"({e.strerror}); write through it with > FILE instead",
                2,
            ) from None

    def _note_rewind(self) -> None:
        """stdout redirected to a regular file: on failure, truncate back to where our output
        starts (the end of the file with ``>>``)."""
        with contextlib.suppress(OSError, ValueError):  # ValueError: no fd (tests)
            fd = self.f.fileno()
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                append = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
                self.rewind = st.st_size if append else self.f.tell()

    def write(self, data: bytes | memoryview) -> int:
        try:
            n = self.f.write(data)
        except OSError as e:
            raise ClientError(f"cannot write the output: {e}") from None
        self._unsynced += n
        if self.tmp and self._unsynced >= _SYNC_EVERY and not self._syncing():
            self._unsynced = 0
            self._syncer = threading.Thread(target=self._sync, daemon=True)
            self._syncer.start()
        return n

    def _syncing(self) -> bool:
        return self._syncer is not None and self._syncer.is_alive()

    def _sync(self) -> None:
        try:
            os.fdatasync(self.f.fileno())
        except OSError as e:  # Linux reports a writeback error once: keep it for commit
            self._sync_error = e

    def _join_syncer(self) -> None:
        if self._syncer is not None:
            self._syncer.join()
            self._syncer = None

    def commit(self) -> None:
        try:
            self.f.flush()
            if self.path and self.tmp:
                self._join_syncer()
                if self._sync_error is not None:
                    raise self._sync_error
                if self._mode is not None:
                    os.fchmod(self.f.fileno(), self._mode)
                os.fsync(self.f.fileno())
                self.f.close()
                self._replace()
            elif self.f is not sys.stdout.buffer:
                self.f.close()  # a FIFO's reader sees its end now
        except OSError as e:
            raise ClientError(f"cannot write the output: {e}") from None

    def _replace(self) -> None:
        """Rename the temporary file onto --output, if that is still a regular file or
        absent: the transfer may have taken minutes."""
        assert self.path is not None
        st = _lstat(self.path)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise ClientError(_refusal(self.path, st) + " (it changed during the transfer)", 1)
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        self._join_syncer()
        with contextlib.suppress(OSError, ValueError):
            if self.tmp:
                self.f.close()
                os.unlink(self.tmp)
            elif self.rewind >= 0:
                self.f.flush()
                self.f.seek(self.rewind)
                self.f.truncate()
            elif self.f is not sys.stdout.buffer:
                self.f.close()
