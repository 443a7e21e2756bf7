"""One writer's hash chain: each record names the SHA-256 of the line before it.

A writer (a server process, one CLI invocation) chains its own records only, so writers never
wait on each other and several can share one file: ``verify`` follows each chain through the
interleaved lines. A line removed, changed, moved or inserted breaks the next record's
``prev`` or ``seq``; a checkpoint's HMAC seals the chain so far, so that whoever lacks the
master key cannot rewrite a chain up to its last checkpoint either.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import time as _time
from collections.abc import Mapping, Sequence

import orjson

from ._keys import checkpoint_key, checkpoint_mac

# What the chain adds to every record; a record handed in may not set them itself.
CHAIN_FIELDS = frozenset({"writer", "seq", "prev"})

_second: tuple[int, str] = (-1, "")


def timestamp(t: float) -> str:
    """UTC ISO 8601 with microseconds and Z; strftime once a second, not once a record."""
    global _second
    whole, micros = divmod(int(t * 1_000_000), 1_000_000)
    second, text = _second
    if whole != second:
        second, text = whole, _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(whole))
        _second = (second, text)  # one tuple: a reader on another thread sees a matching pair
    return f"{text}.{micros:06d}Z"


def opening(second: int) -> bytes:
    """``{"time":"YYYY-MM-DDTHH:MM:SS`` of a Unix second: a record's opening up to its
    fraction (the ``Auditor`` formats it once a second)."""
    return b'{"time":"' + _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(second)).encode()


def writer_id() -> str:
    """``host:pid:random``: a new chain's name. The random part tells apart two processes that
    had the same pid (a restart, another container with the same host name)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Chain:
    """The chain of the writer ``writer``; ``key`` is the audit key (``audit_key(master)``).

    Not thread-safe: the ``Auditor`` calls it under its lock.
    """

    __slots__ = ("_ckey", "_prev", "_seq", "_tail", "writer")

    def __init__(self, key: bytes, writer: str) -> None:
        self._ckey = checkpoint_key(key)
        self.writer = writer
        self._tail = b'"writer":%b,"seq":' % orjson.dumps(writer)
        self._seq = 0
        self._prev = b"null"  # the last line's hash as JSON (a quoted hex string)

    @property
    def seq(self) -> int:
        """The seq of the last line made (0: none yet)."""
        return self._seq

    def line(self, record: Mapping[str, object]) -> bytes:
        """``record`` with ``writer``, ``seq`` and ``prev`` added, as one JSON line (no newline).

        The hash is kept as the next record's ``prev``: the line must be written as returned.
        """
        if not CHAIN_FIELDS.isdisjoint(record):
            record = {k: v for k, v in record.items() if k not in CHAIN_FIELDS}
        return self.link(orjson.dumps(record))

    def link(self, body: bytes) -> bytes:
        """``line`` for a record already encoded (a JSON object without the chain's fields)."""
        if body == b"{}":
            return self._chained(b'{%b%d,"prev":%b}' % (self._tail, self._seq + 1, self._prev))
        return self.extend_all((body[:-1],))[0]

    def extend_all(self, opened: Sequence[bytes]) -> list[bytes]:
        """``link`` for each of ``opened`` in order, in one loop: records encoded without their
        closing brace, none empty (the ``Auditor``'s: it encodes on the caller's thread, so a
        value JSON cannot hold fails there and not in a batch that has been half chained)."""
        tail, seq, prev, sha256 = self._tail, self._seq, self._prev, hashlib.sha256
        lines = []
        for body in opened:
            seq += 1
            line = b'%b,%b%d,"prev":%b}' % (body, tail, seq, prev)
            # The hash is the next record's ``prev``: the line must be written as made.
            prev = b'"%b"' % sha256(line).hexdigest().encode()
            lines.append(line)
        self._seq, self._prev = seq, prev
        return lines

    def _chained(self, line: bytes) -> bytes:
        self._seq += 1
        self._prev = b'"%b"' % hashlib.sha256(line).hexdigest().encode()
        return line

    def checkpoint(self, now: float) -> bytes:
        """A checkpoint line: its ``hmac`` covers this writer, its seq and its prev, so the
        whole chain before it, and its time."""
        when = timestamp(now)
        prev = None if self._prev == b"null" else self._prev[1:-1].decode()
        mac = checkpoint_mac(self._ckey, self.writer, self._seq + 1, prev, when)
        return self.line({"type": "checkpoint", "time": when, "hmac": mac})
