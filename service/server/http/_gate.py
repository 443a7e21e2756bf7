"""The connections a process keeps open: at most ``limit``, and which one goes to make room.

Every connection holds a file descriptor, and so does every spool file, the keystore and the
listener. A process that runs out of descriptors fails everything at once: its accept loop
drops new connections (a client that holds a valid token among them) and a spool or keystore
file cannot be opened. The cap is therefore kept below the descriptor limit (``_capacity``),
and counted here, where connections begin and end.

A new connection beyond the cap is let in, and another one goes, in this order:

1. the oldest connection that has never authenticated a request and has nothing being served
   (it sent nothing, or part of a head, or its last answer is written): idle sockets opened
   by a client without a token go first, whatever else is open;
2. else the connection that authenticated longest ago and is idle between requests (a
   keep-alive connection, as nginx reuses them when its connections run out);
3. else, every connection being busy with a request, the new one itself.

So a client without a token can only ever push out connections like its own, or idle
keep-alive ones once none of those is left; a request being served is never cut off, and a
client with a token always gets in while any connection is idle. The one closed is aborted:
its descriptor is free at once (an idle connection has nothing queued to write anyway).

uvicorn's ``limit_concurrency`` is not this: its protocols answer 503 per request once the
count is reached, after reading the request's head, keep the connection, and close no idle
one, so idle sockets still take every descriptor; nor does uvicorn apply it to a protocol
class of its caller's (``_protocol``). Counting requests is ``_front``'s job
(``MAX_CONCURRENT_REQUESTS``); this counts connections.
"""

from __future__ import annotations

from typing import Protocol


class Connection(Protocol):
    """What the gate needs of a connection (``HttpProtocol``)."""

    @property
    def idle(self) -> bool:
        """Nothing being served: no request read, answered, waiting or held."""

    def shed(self, reason: str) -> None:
        """Close at once, to make room (``reason``: one of the three below)."""


# Why a connection was closed, as sealflow_connections_refused_total's reason.
UNAUTHENTICATED = "shed_unauthenticated"  # never authenticated, idle: made room
KEEP_ALIVE = "shed_idle"  # authenticated, idle between requests: made room
FULL = "connection_limit"  # the new connection: every other one was busy


class Gate:
    """The open connections of one process (one per app lifespan, shared by its connections).
    Used from the event loop only."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # Insertion order is age: never authenticated by when they came, authenticated by
        # when they first did. Dicts for O(1) removal in any order.
        self._unproven: dict[Connection, None] = {}
        self._proven: dict[Connection, None] = {}

    def __len__(self) -> int:
        return len(self._unproven) + len(self._proven)

    def admit(self, conn: Connection) -> None:
        """A new connection, counted; if that passes the cap, one is shed (``conn`` itself
        when every other one is busy) and no longer counted."""
        unproven = self._unproven
        unproven[conn] = None
        if len(unproven) + len(self._proven) <= self.limit:
            return
        shed, reason = self._choose(conn)
        self.gone(shed)
        shed.shed(reason)

    def _choose(self, conn: Connection) -> tuple[Connection, str]:
        # A scan, but only at the cap; the idle ones a flood leaves are at the front.
        for other in self._unproven:
            if other is not conn and other.idle:
                return other, UNAUTHENTICATED
        for other in self._proven:
            if other.idle:
                return other, KEEP_ALIVE
        return conn, FULL

    def authenticated(self, conn: Connection) -> None:
        """A request on ``conn`` carried a valid token."""
        if conn in self._unproven:
            del self._unproven[conn]
            self._proven[conn] = None

    def gone(self, conn: Connection) -> None:
        self._unproven.pop(conn, None)
        self._proven.pop(conn, None)
