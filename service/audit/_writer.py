"""One thread that writes an ``Auditor``'s batches, so that a sink with a round trip (the
PostgreSQL table, ``Sink.remote``) never holds the thread that cut them (the event loop).

Batches are handed over in the order they were chained (``hand``); while one is being
written, the next ones queue, and the thread then writes all that queued as one batch: under
load, one round trip carries several turns' records (a group commit). After each write the
thread reports the highest ticket it carried and whether every sink took it (``done``); the
caller decides what to do with that (the server releases or drops the answers that waited).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("sealflow.audit")

Write = Callable[[list[bytes], int], bool]  # lines, the last ticket they carry: all written?
Done = Callable[[int, bool], None]


class BatchWriter:
    """A daemon thread calling ``write`` for what ``hand`` queued, then ``done``.

    ``write`` is the only code that touches the sinks while the thread runs; ``close`` stops
    it after the batches already handed over (one more write at most), within ``timeout``."""

    def __init__(self, write: Write, done: Done, name: str = "sealflow-audit") -> None:
        self._write = write
        self._done = done
        self._batches: list[tuple[list[bytes], int]] = []
        self._wake = threading.Condition(threading.Lock())
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def hand(self, lines: list[bytes], upto: int) -> None:
        """Queue a batch (possibly empty: the sinks' pending lines are tried again)."""
        with self._wake:
            self._batches.append((lines, upto))
            self._wake.notify()

    def close(self, timeout: float) -> bool:
        """Write what was handed over and stop: False if the thread was still writing after
        ``timeout`` seconds (it is a daemon: it does not keep the process alive)."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._batches and not self._stopping:
                    self._wake.wait()
                if not self._batches:
                    return
                batches, self._batches = self._batches, []
            lines = [line for batch, _ in batches for line in batch]
            upto = batches[-1][1]
            try:
                wrote = self._write(lines, upto)
            except Exception:  # a bug, not a sink's failure: never leave waiters hanging
                log.exception("audit records not written: the writer failed")
                wrote = False
            try:
                self._done(upto, wrote)
            except Exception:
                log.exception("audit writer: reporting a batch failed")
