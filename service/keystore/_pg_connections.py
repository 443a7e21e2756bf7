"""The connections a PostgreSQL keystore writes and reloads on, kept here rather than by a pool.

A pool library did what a keystore must not during an outage: each write waited its whole
timeout for a connection the pool kept failing to make, and once the database was back the pool
reconnected on its own backoff, seconds later (issue 24). The rules here:

- an idle connection is reused, else a new one is made (``connect_timeout``); at most
  ``max_idle`` are kept;
- a connection that failed is closed, and so is every connection idle since a failure (after a
  restart of the database they are all dead);
- for ``retry_after`` seconds after a failure to reach the database, callers fail at once
  (KeyStoreUnavailable: a 503) instead of each waiting for a connect of its own. The store's
  watcher asks every half second, so writes work again within about a second of the
  database's return.

Every connection carries TCP keepalives and a user timeout (``KEEPALIVE``), so a peer gone
silent (a partition, not a refusal) is found in seconds rather than the kernel's two hours.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq

from .errors import DriverErrors, KeyStoreUnavailable

Db = psycopg.Connection[tuple[Any, ...]]

CONNECT_TIMEOUT = 3  # seconds (libpq's minimum is 2)
# libpq's TCP settings (PostgreSQL's docs, "Parameter Key Words") for a connection that must
# notice a silent peer in seconds: keepalive probes after 2 s idle, every second, 3 unanswered
# end it; data unacknowledged for 5 s ends it too (tcp_user_timeout, in milliseconds). The
# watcher's connection has them as well (``_pg_watch``).
KEEPALIVE: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 3,
    "tcp_user_timeout": 5000,  # milliseconds
}


class Connections:
    """See the module docstring. Thread-safe: the service writes from several threads."""

    def __init__(
        self,
        url: str,
        errors: DriverErrors,
        application_name: str = "sealflow-keystore",
        max_idle: int = 4,
        retry_after: float = 0.5,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self._url = url
        self._params = dict(params or {})  # more of psycopg.connect's (autocommit, options)
        self._errors = errors
        self._name = application_name
        self._max_idle = max_idle
        self._retry_after = retry_after
        self._lock = threading.Lock()
        self._idle: list[Db] = []
        self._epoch = 0  # failures so far: a connection idle across one is dropped
        self._failed_at: float | None = None  # time.monotonic() of the last failure
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[Db]:
        """A connection for one transaction (the caller's ``db.transaction()``), given back
        after it; KeyStoreUnavailable at once while the database is known to be unreachable."""
        with self._lock:
            if self._closed:
                raise KeyStoreUnavailable("the keystore is closed")
            failed = self._failed_at
            if failed is not None and time.monotonic() - failed < self._retry_after:
                raise KeyStoreUnavailable(
                    "the keystore's database did not answer a moment ago; not asked again yet"
                )
            epoch = self._epoch
            db = self._idle.pop() if self._idle else None
        if db is None:
            try:
                with self._errors:
                    db = psycopg.connect(
                        self._url,
                        connect_timeout=CONNECT_TIMEOUT,
                        application_name=self._name,
                        **KEEPALIVE,
                        **self._params,
                    )
            except KeyStoreUnavailable:
                self._failed()
                raise
        try:
            yield db
        except BaseException:
            self._done(db, epoch)
            raise
        self._done(db, epoch)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()

    def _done(self, db: Db, epoch: int) -> None:
        """Keep a healthy connection for the next caller; close any other."""
        healthy = not db.broken and db.info.transaction_status == pq.TransactionStatus.IDLE
        if not healthy and (db.broken or db.closed):
            self._failed()
        with self._lock:
            keep = (
                healthy
                and not self._closed
                and epoch == self._epoch
                and len(self._idle) < self._max_idle
            )
            if keep:
                self._idle.append(db)
                self._failed_at = None  # it answered
        if not keep:
            db.close()

    def _failed(self) -> None:
        with self._lock:
            self._epoch += 1
            self._failed_at = time.monotonic()
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()
