"""Keeping a PostgreSQL keystore's cache current: LISTEN/NOTIFY, and polling when that fails.

Every write to the keystore bumps ``sealflow_changes.generation`` and sends ``NOTIFY`` in its
transaction, so every replica hears of it when it commits. One thread per store holds a
connection that LISTENs; on a notification, and once a second anyway (a notification sent
while the connection was being re-made is not delivered), it asks the store to sync, which
reloads only when the generation moved. When that connection drops the thread says so (log,
``mode``) and polls every ``poll_interval`` seconds over the store's connections, trying to LISTEN
again every ``relisten`` seconds. The request path never waits for any of this.

``synced_at`` is when the database last answered; a replica that many seconds past it
(``SEALFLOW_KEYSTORE_MAX_CACHE_AGE``) is stale (``stale``: the front door refuses requests
with a token, or serves them, as the operator chose). A peer that vanishes without closing the
connection (a partition, a host that died) would leave the LISTEN connection waiting for the
kernel's TCP timeouts (about two hours idle, some fifteen minutes with data unacknowledged):
TCP keepalives and a user timeout (``KEEPALIVE``) end it within seconds, so the thread falls
back to polling and logs it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg
from psycopg.conninfo import make_conninfo

from ._pg_connections import KEEPALIVE
from ._pg_schema import CHANNEL
from .errors import DriverErrors, KeyStoreUnavailable

log = logging.getLogger("sealflow.keystore")

HEARTBEAT = 1.0


def listen_connection(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """The watcher's connection: autocommit (LISTEN takes effect at once), TCP keepalives."""
    conninfo = make_conninfo(
        url, connect_timeout=5, application_name="sealflow-keystore-listen", **KEEPALIVE
    )
    return psycopg.connect(conninfo, autocommit=True)


class Watcher:
    """The thread that calls ``sync`` when the keystore changes; see the module docstring."""

    def __init__(
        self,
        url: str,
        sync: Callable[[], None],
        poll_interval: float,
        errors: DriverErrors,
        relisten: float = 5.0,
    ) -> None:
        self._url = url
        self._sync = sync
        self._errors = errors  # the store's mapping of psycopg's errors
        self._poll_interval = poll_interval
        self._relisten = relisten
        self._stop = threading.Event()
        self.mode = "notify"  # or "poll"
        self.reachable = True
        self.synced_at = time.monotonic()
        self.fallbacks = 0  # times the notification connection was lost
        self._thread = threading.Thread(target=self._run, name="sealflow-keystore-watch")
        self._thread.daemon = True
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self._errors:
                    self._listen()
            except KeyStoreUnavailable as exc:
                if self._stop.is_set():
                    return
                self._fall_back(exc)
            self._poll_until(time.monotonic() + self._relisten)

    def stale(self, max_age: float) -> bool:
        """Whether the database last answered more than ``max_age`` seconds ago: a read of the
        clock and a comparison, asked on every request with a token."""
        return time.monotonic() - self.synced_at > max_age

    def _listen(self) -> None:
        with listen_connection(self._url) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self._synced()  # whatever changed while nobody listened
            if self.mode != "notify":
                log.warning("keystore notifications are back; polling stopped")
                self.mode = "notify"
            next_beat = time.monotonic() + HEARTBEAT
            while not self._stop.is_set():
                heard = any(True for _ in conn.notifies(timeout=0.2))
                now = time.monotonic()
                if heard or now >= next_beat:
                    conn.execute("SELECT 1")  # the connection, checked once a second
                    self._synced()
                    next_beat = now + HEARTBEAT

    def _fall_back(self, exc: KeyStoreUnavailable) -> None:
        if self.mode == "notify":
            self.fallbacks += 1
            log.warning(
                "keystore notifications lost (%s); polling every %.1f s",
                exc,
                self._poll_interval,
                extra={"fields": {"invalidation": "poll"}},
            )
        self.mode = "poll"

    def _poll_until(self, deadline: float) -> None:
        while not self._stop.is_set() and time.monotonic() < deadline:
            self._synced()
            self._stop.wait(self._poll_interval)

    def _synced(self) -> None:
        """One sync; notes whether the keystore answered, and logs each change of that."""
        try:
            self._sync()
        except KeyStoreUnavailable as exc:
            if self.reachable:
                log.error(
                    "keystore unreachable: %s; the cache serves up to the max cache age",
                    exc,
                    extra={"fields": {"keystore": "unreachable"}},
                )
            self.reachable = False
            return
        if not self.reachable:
            log.warning("keystore reachable again", extra={"fields": {"keystore": "reachable"}})
        self.reachable = True
        self.synced_at = time.monotonic()
