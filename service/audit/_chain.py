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
from collections.abc import Mapping

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


def writer_id() -> str:
    """``host:pid:random``: a new chain's name. The random part tells apart two processes that
    had the same pid (a restart, another container with the same host name)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Chain:
    """The chain of the writer ``writer``; ``key`` is the audit key (``audit_key(master)``).

    Not thread-safe: the ``Auditor`` calls it under its lock.
    """

    __slots__ = ("_ckey", "_prev", "_seq", "_writer_json", "writer")

    def __init__(self, key: bytes, writer: str) -> None:
        self._ckey = checkpoint_key(key)
        self.writer = writer
        self._writer_json = orjson.dumps(writer)
        self._seq = 0
        self._prev: str | None = None

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
        """``line`` for a record already encoded (a JSON object without the chain's fields):
        the ``Auditor`` encodes on the caller's thread, so a value JSON cannot hold fails there
        and not in a batch that has been half chained."""
        seq = self._seq + 1
        prev = orjson.dumps(self._prev)
        tail = b'"writer":%s,"seq":%d,"prev":%s}' % (self._writer_json, seq, prev)
        data = body[:-1] + (tail if body == b"{}" else b"," + tail)
        self._seq, self._prev = seq, hashlib.sha256(data).hexdigest()
        return data

    def checkpoint(self, now: float) -> bytes:
        """A checkpoint line: its ``hmac`` covers this writer, its seq and its prev, so the
        whole chain before it, and its time."""
        when = timestamp(now)
        mac = checkpoint_mac(self._ckey, self.writer, self._seq + 1, self._prev, when)
        return self.line({"type": "checkpoint", "time": when, "hmac": mac})
