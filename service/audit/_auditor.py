"""The Auditor: records queued by any thread, chained and written in batches to every sink.

``record`` only encodes and queues (the request path pays for one ``orjson.dumps``); ``flush``
chains what is queued, adds the checkpoints that are due and writes the batch to each sink in
one call. The failure policy is the caller's choice (``mode``):

- ``required``: a batch a sink did not take stays pending for that sink and is written again,
  before anything newer, by the next flush; ``failing`` is True until then, so the server can
  refuse requests rather than answer some it could not record.
- ``best_effort``: a batch a sink did not take is dropped and counted (``dropped``); the
  chain in that sink then shows the gap, which is the truth.

Each sink keeps its own pending lines, so a sink that failed never makes another sink write
a line twice.

Where the writes happen: by default in ``flush``, on the caller's thread. Once
``start_writer`` is called (the server does; the CLI does not) and a sink is remote
(``Sink.remote``: the PostgreSQL table, whose batch is a round trip), ``flush`` only chains
what is queued and hands the batch to one writer thread (``_writer.BatchWriter``), which
writes it to every sink and reports each batch's outcome to the callback: the caller's thread
(the event loop) never waits for the database. Files and standard output alone are written
inline still: their write costs less than handing it to a thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Literal

import orjson

from ._chain import CHAIN_FIELDS, Chain, opening
from ._keys import hmac_field
from ._sinks import Sink
from ._writer import BatchWriter, Done

Mode = Literal["required", "best_effort"]
MODES: tuple[Mode, ...] = ("required", "best_effort")

# Lines one sink may hold while it fails in mode required (about 30 MB of records): past it
# they are dropped and counted, so a long outage cannot take the process's memory with it.
MAX_PENDING = 100_000
# Seconds ``close`` waits for the writer thread's last batches: several times the longest a
# remote sink's write may take (the table's statement timeout, a connect's timeout).
CLOSE_SECONDS = 10.0


class Auditor:
    """One writer's records to ``sinks``; ``key`` is the audit key (``audit_key(master)``).

    A checkpoint follows every ``checkpoint_every`` records, and the first batch flushed
    ``checkpoint_seconds`` after the last checkpoint ends with one: call ``flush`` at least
    that often (an idle flush seals the records written since), and ``close`` at shutdown.
    Thread-safe.
    """

    def __init__(
        self,
        key: bytes,
        sinks: Sequence[Sink],
        writer: str,
        mode: Mode,
        checkpoint_every: int = 1000,
        checkpoint_seconds: float = 10.0,
        constant: Mapping[str, object] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every must be 1 or more")
        self._key = key
        # Fields every record of this writer carries (the server's replica and origin), encoded
        # once: each record's body ends with them.
        constant = constant or {}
        if not CHAIN_FIELDS.isdisjoint(constant) or "time" in constant:
            raise ValueError("time, writer, seq and prev are set by the auditor")
        self._constant = b"," + orjson.dumps(dict(constant))[1:-1] if constant else b""
        self._chain = Chain(key, writer)
        self._sinks = list(sinks)
        self._mode = mode
        self._every = checkpoint_every
        self._seconds = checkpoint_seconds
        self._queue: list[bytes] = []
        self._queued = 0  # records queued (the last ticket handed out)
        self._cut = 0  # records chained into a batch (written inline, or handed to the writer)
        self._written = 0  # every record up to this ticket is written
        self._failed = 0  # the last ticket of the last batch that failed (written may pass it)
        self._second: tuple[int, bytes] = (-1, b"")  # ``record``'s time of the second
        self._queue_lock = threading.Lock()  # record() takes only this one: never held on I/O
        # One flush at a time: the chain, and (no writer thread) the pending lines and sinks.
        self._lock = threading.Lock()
        self._writer: BatchWriter | None = None  # the writer thread, once started
        self._pending: list[list[bytes]] = [[] for _ in self._sinks]
        self._unsealed = 0  # records chained since the last checkpoint
        self._sealed_at = time.monotonic()
        # Mode required: the last flush left lines unwritten (True until a flush writes all). An
        # attribute, not a property: the server reads it for every request.
        self.failing = False
        self._dropped = 0
        self._closed = False

    @property
    def writer(self) -> str:
        return self._chain.writer

    @property
    def dropped(self) -> int:
        """Mode best_effort (or past MAX_PENDING): lines a sink failed to take, summed over the
        sinks."""
        return self._dropped

    def record(self, fields: Mapping[str, object], when: float | None = None) -> int:
        """Queue a record of the event at ``when`` (Unix time; now if None): its ticket, the
        count of records queued so far (``written``). Raises TypeError for a value JSON cannot
        hold, ValueError for a field the auditor or the chain sets, RuntimeError once
        closed."""
        if "time" in fields or "writer" in fields or "seq" in fields or "prev" in fields:
            raise ValueError("time, writer, seq and prev are set by the auditor")
        # '{"time":"...",' then the fields and the constant ones, left open for the chain's
        # (``Chain.extend_all``): one format, no dict merged, per record.
        t = time.time() if when is None else when
        whole, micros = divmod(int(t * 1_000_000), 1_000_000)
        second, text = self._second
        if whole != second:
            text = opening(whole)
            self._second = (whole, text)  # one tuple: another thread sees a matching pair
        if fields:
            inner = orjson.dumps(fields)[1:-1]
            body = b'%b.%06dZ",%b%b' % (text, micros, inner, self._constant)
        else:
            body = b'%b.%06dZ"%b' % (text, micros, self._constant)
        with self._queue_lock:
            if self._closed:
                raise RuntimeError("the auditor is closed")
            self._queue.append(body)
            self._queued += 1
            return self._queued

    def hmac(self, value: bytes | str) -> str:
        """``value`` as a record may name it: ``hmac-sha256:<hex>`` under the audit key."""
        return hmac_field(self._key, value)

    @property
    def written(self) -> int:
        """Every record up to this ticket is written to every sink."""
        return self._written

    @property
    def cut(self) -> int:
        """Every record up to this ticket is chained into a batch: written, or on its way."""
        return self._cut

    @property
    def failed(self) -> int:
        """The last ticket of the last batch a sink did not take: a ticket above ``written``
        and at most this one was in a failed write (it may be written by a later one)."""
        return self._failed

    @property
    def threaded(self) -> bool:
        """Batches are written by the writer thread (``start_writer``)."""
        return self._writer is not None

    def start_writer(self, done: Done) -> bool:
        """If a sink is remote, write from now on on a thread of its own: ``flush`` hands the
        batch over and returns, and ``done(upto, wrote)`` is called on that thread after each
        write (``upto``: the last ticket it carried; ``wrote``: every sink took it). False
        (and nothing changes) if every sink is local."""
        if not any(sink.remote for sink in self._sinks):
            return False
        with self._lock:
            if self._closed or self._writer is not None:
                return self._writer is not None
            self._writer = BatchWriter(self._write_off_loop, done)
        return True

    def flush(self) -> bool:
        """Chain everything queued and write it (and every sink's pending lines): True if every
        sink took every line. With the writer thread, the batch is handed to it and this says
        only whether the last write succeeded (``failing``)."""
        with self._lock:
            if self._closed:
                return not self.failing
            return self._flush(final=False)

    def close(self) -> bool:
        """A final checkpoint (if a record is unsealed), a last flush, the sinks closed: True if
        the last flush wrote everything. The writer thread, if any, writes what it was handed
        and this batch, for at most ``CLOSE_SECONDS``."""
        with self._lock:
            if self._closed:
                return not self.failing
            with self._queue_lock:
                self._closed = True
            wrote = self._flush(final=True)
            writer, self._writer = self._writer, None
            if writer is not None:
                if not writer.close(CLOSE_SECONDS):
                    # Still writing (the sinks are its): the process ends without it.
                    return False
                wrote = not self.failing and self._written == self._cut
            for sink in self._sinks:
                sink.close()
            return wrote

    def _flush(self, final: bool) -> bool:
        with self._queue_lock:
            queued, self._queue = self._queue, []
            upto = self._queued
        lines = self._link(queued, final)
        self._cut = upto
        if self._writer is not None:
            if lines or self.failing:  # else nothing to write, nothing pending
                self._writer.hand(lines, upto)
            return not self.failing
        return self._write(lines, upto)

    def _write_off_loop(self, lines: list[bytes], upto: int) -> bool:
        try:
            return self._write(lines, upto)
        except Exception:
            # Not a sink's OSError (a bug): the lines stay pending, and count as not written.
            self.failing = self._mode == "required"
            self._failed = upto
            raise

    def _write(self, lines: list[bytes], upto: int) -> bool:
        """Write ``lines`` after every sink's pending ones (the writer thread's, if it runs)."""
        wrote = True
        for sink, pending in zip(self._sinks, self._pending, strict=True):
            pending += lines
            if not pending:
                continue
            try:
                sink.write(pending)
            except OSError:
                wrote = False
                if self._mode == "best_effort" or len(pending) > MAX_PENDING:
                    self._dropped += len(pending)
                    pending.clear()
                continue
            pending.clear()
        if wrote:
            self._written = upto
        else:
            self._failed = upto
        self.failing = self._mode == "required" and not wrote
        return wrote

    def _link(self, queued: list[bytes], final: bool) -> list[bytes]:
        """The queued records chained, with the checkpoints that are due."""
        lines: list[bytes] = []
        start = 0
        while start < len(queued):
            part = queued[start : start + self._every - self._unsealed]
            lines += self._chain.extend_all(part)
            start += len(part)
            self._unsealed += len(part)
            if self._unsealed >= self._every:
                lines.append(self._seal())
        due = final or time.monotonic() - self._sealed_at >= self._seconds
        if self._unsealed and due:
            lines.append(self._seal())
        return lines

    def _seal(self) -> bytes:
        self._unsealed = 0
        self._sealed_at = time.monotonic()
        return self._chain.checkpoint(time.time())
