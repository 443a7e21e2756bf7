"""The server's side of the audit trail (``sealflow.service.audit``, docs/AUDIT.md): what a
request, a refusal and a keystore change put on record, and when a record must be written.

``Front.record`` hands every request that presented a token (and every failed
authentication) to ``Trail.request``, which builds its record from what the request path
already knows (the plan's token, the access record) and queues it; the queue is written
once per turn of the event loop (``flush``, a ``call_soon`` made by the turn's first record),
and every second (an idle flush seals the chain with a checkpoint when one is due).

Mode ``required`` (the default once a sink is set): no success leaves before its own record is
written. ``record`` hands back a ticket; ``recorded(ticket)`` writes what is queued if that
record is not written yet and says whether it is, or (a remote sink, written by the
auditor's writer thread once ``run`` has started it) that it is not known yet: ``wait``
then calls back on the event loop when the writer thread reports the batch, and
``confirmed`` is the same as an awaitable. The protocol holds a connection's answers until
then and drops the connection if the write failed; the ASGI path checks a response of a
declared length as it starts (replaced by 503 ``audit_unavailable`` if its record could not
be written), a streamed one before its last piece is sent (the connection is dropped
instead, so the client never sees it end). Once a write has failed, ``failing`` holds until a
write succeeds: the front door then refuses every request that presents a token with 503
``audit_unavailable`` before any key is used, and ``/readyz`` answers 503. Mode
``best_effort``: nothing waits and nothing is refused; lost records are counted
(``sealflow_audit_dropped_total``) and logged at most once a second.

Changes: the keystore tells ``change`` of each committed write (``KeyStore.on_change``); who
asked comes from ``asking``, set by the front door for the request being served (a context
variable: it follows the request into FastAPI's and ``asyncio.to_thread``'s threads). A change
made with no request behind it (an automatic rotation from the usage meter's thread) is
recorded without a caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

from sealflow.service.audit import Auditor, open_auditor
from sealflow.service.config import Settings
from sealflow.service.keystore import TokenInfo, audit_table

from . import _metrics

log = logging.getLogger("sealflow.audit")

# Who is asking, for the records of the keystore changes a request makes.
asking: contextvars.ContextVar[Mapping[str, object] | None] = contextvars.ContextVar(
    "sealflow_audit_asking", default=None
)

_FLUSH_EVERY = 1.0  # seconds: an idle flush, which seals the chain when a checkpoint is due
_LOG_EVERY = 1.0  # seconds between two log lines about lost records (best_effort)


def open_trail(settings: Settings, master_key: bytes) -> Trail | None:
    """The trail the settings ask for, or None when no sink is set. Open the keystore first:
    its schema makes the audit table."""
    replica = f"{socket.gethostname()}:{os.getpid()}"
    constant = {"replica": replica, "origin": "http"}
    auditor = open_auditor(settings, master_key, audit_table(settings), constant)
    if auditor is None:
        return None
    log.info(
        "audit trail",
        extra={"fields": {"audit_writer": auditor.writer, "audit_mode": settings.audit_mode}},
    )
    return Trail(auditor, settings.audit_mode == "required")


class Trail:
    """One process's audit trail; see the module docstring."""

    def __init__(self, auditor: Auditor, required: bool) -> None:
        self._auditor = auditor
        self.required = required
        # Set and cleared on the event loop's thread only (a thread's record is written by the
        # turn's flush if one is scheduled, else by the next ``recorded`` or idle flush).
        self._scheduled = False
        self._dropped = 0
        self._logged_at = 0.0
        # With the writer thread: the event loop (``run``) and who waits for which ticket
        # (``wait``), in order of ticket.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[tuple[int, int, Callable[[bool], None]]] = []
        self._order = itertools.count()

    # -- state

    @property
    def failing(self) -> bool:
        """Mode required: the last write failed (requests are refused until one succeeds)."""
        return self._auditor.failing

    def hmac(self, value: bytes | str) -> str:
        return self._auditor.hmac(value)

    # -- records

    def record(self, fields: dict[str, object], when: float | None = None) -> int:
        """Queue a record of an event at ``when`` (Unix time; now if None); its ticket
        (``recorded``)."""
        ticket = self._auditor.record(fields, when)
        if not self._scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on the event loop (a thread): see ``_scheduled``
                return ticket
            self._scheduled = True
            loop.call_soon(self._turn_ended)
        return ticket

    def recorded(self, ticket: int) -> bool | None:
        """Whether the record of ``ticket`` is written (True) or its write failed (False),
        writing what is queued if it is not written yet. None: the writer thread has it, and
        ``wait`` says when it knows. Always True in mode best_effort (nothing waits for the
        trail)."""
        auditor = self._auditor
        if not self.required or auditor.written >= ticket:
            return True
        if not auditor.threaded:
            self.flush()
            return auditor.written >= ticket
        if auditor.failed >= ticket:
            return False
        if auditor.cut < ticket:
            self.flush()  # the turn's records, now rather than at the end of the turn
        return None

    def wait(self, ticket: int, then: Callable[[bool], None]) -> None:
        """Call ``then(written)`` on the event loop once the batch carrying ``ticket`` has been
        written or has failed. For a ticket ``recorded`` said None of (that call also made
        sure it is on its way to the writer thread)."""
        heapq.heappush(self._waiters, (ticket, next(self._order), then))

    async def confirmed(self, ticket: int) -> bool:
        """``recorded``, waiting for the writer thread if it has the record."""
        known = self.recorded(ticket)
        if known is not None:
            return known
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def settled(written: bool) -> None:
            if not future.done():
                future.set_result(written)

        self.wait(ticket, settled)
        return await future

    def change(self, operation: str, fields: dict[str, object]) -> None:
        """The keystore's ``on_change``: a committed change, with who asked for it."""
        record: dict[str, object] = {"type": "change", "operation": operation}
        who = asking.get()
        if who is not None:
            record.update(who)
        record.update(fields)
        self.record(record)

    # -- writing

    def flush(self) -> bool:
        wrote = self._auditor.flush()
        self._count_dropped()
        return wrote

    def _turn_ended(self) -> None:
        self._scheduled = False
        self.flush()

    async def run(self) -> None:
        """Start the writer thread if a sink is remote, then flush every second (sealing the
        chain when a checkpoint is due, and trying a failed write again), until cancelled."""
        self._loop = asyncio.get_running_loop()
        self._auditor.start_writer(self._reported)
        while True:
            await asyncio.sleep(_FLUSH_EVERY)
            self.flush()

    def _reported(self, upto: int, written: bool) -> None:
        """The writer thread's word on a batch: handed to the event loop."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(self._settle, upto, written)

    def _settle(self, upto: int, written: bool) -> None:
        """On the event loop: the waiters for tickets up to ``upto`` learn the outcome."""
        self._count_dropped()
        waiters = self._waiters
        while waiters and waiters[0][0] <= upto:
            _, _, then = heapq.heappop(waiters)
            then(written)

    def close(self) -> bool:
        """At shutdown: the last records and a final checkpoint (the writer thread's last
        batches, for a bounded time)."""
        wrote = self._auditor.close()
        self._count_dropped()
        waiters, self._waiters = self._waiters, []
        written = self._auditor.written
        for ticket, _, then in sorted(waiters):
            then(ticket <= written)
        return wrote

    def _count_dropped(self) -> None:
        dropped = self._auditor.dropped
        if dropped == self._dropped:
            return
        _metrics.AUDIT_DROPPED.inc(dropped - self._dropped)
        self._dropped = dropped
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY:
            self._logged_at = now
            log.error(
                "audit records lost: %d so far (the sink does not take them; mode best_effort)",
                dropped,
                extra={"fields": {"audit_dropped": dropped}},
            )


def caller(token: TokenInfo | None) -> dict[str, object]:
    """The fields that name who asked: the token's accessor and label."""
    if token is None:
        return {}
    fields: dict[str, object] = {"accessor": token.id}
    if token.label:
        fields["label"] = token.label
    return fields
