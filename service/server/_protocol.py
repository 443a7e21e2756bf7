"""uvicorn's httptools protocol with bounds on a request's head (request line and headers).

httptools buffers the URL and header lines without limit until the head is complete, and uvicorn
times out only idle keep-alive connections: one client could grow the server's memory with an
endless header, hold a core parsing it, or keep a connection that never finishes its head for
ever. Here, per connection:

- at most ``head_limit`` bytes may arrive before a head is complete (431, then close), and the
  URL may be at most ``head_limit`` bytes (414, then close);
- a head must be complete within ``head_timeout`` seconds of its first byte, and a new
  connection must send one within that time (408 if part of one came, then close);
- between requests uvicorn's own keep-alive timeout applies (``--keepalive-timeout``).

Vault's ``LIST`` method (hvac's default for listing keys) is not one httptools knows: a request
line starting ``LIST `` in the first bytes of a request is parsed as ``GET`` and handed to the
app with ``scope["method"] == "LIST"`` (``LIST_METHOD``). A ``LIST`` request that arrives
behind another one in the same read, or whose first five bytes come in two reads, is still a
400 from the parser (docs/TRANSIT.md).

The check is a counter in ``data_received`` while a head is being read, nothing once it is
complete: the body and the response pay no cost (docs/BENCHMARKS.md measures it). The server's
own refusals happen before the app sees a request, so they are counted in
``sealflow_connections_refused_total`` rather than in the request metrics.

The small-request lane's answers, and the app's small responses (``_OneSend``), leave together
at the end of the event loop's turn (``_send_held``), not each as soon as it is made: the
server reads every ready connection in one turn, and writing each answer at once wakes a client
that has gone back to sleep for each of them (on this machine's virtual CPUs a cross-core
wake-up cost about 15 us of the server's time per response, more than the seal and the log line
together). Held this way, a turn's answers cost about one wake-up between them: Redis writes
its replies the same way, before the event loop sleeps. An answer never waits for more than the
rest of its turn, and anything else written to its connection (a refusal, a 400 from the
parser, a close) sends it first.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from . import _metrics

log = logging.getLogger("sealflow")
_T = TypeVar("_T")


@dataclass(slots=True)
class HeadLimits:
    head_limit: int = 16 * 1024
    head_timeout: float = 10.0


# Set by the app factory in each process (create_app), before any connection is accepted.
LIMITS = HeadLimits()
LIST_METHOD = "LIST"


class Lane(Protocol):
    """The small-request lane (``_front.Front``, docs/SERVICE.md): ``lane_head`` decides from a
    complete head whether to hold the request (a ticket) or not (None); ``lane_answer`` gives
    the whole response's pieces for the held request and its body, or None to serve it
    through the ASGI app after all."""

    def lane_head(self, url: bytes, headers: list[tuple[bytes, bytes]]) -> Any | None: ...

    def lane_answer(self, ticket: Any, body: bytes, default: bytes) -> Sequence[bytes] | None: ...


LANE: Lane | None = None  # set by the app while its services run
LANE_URLS: tuple[bytes, ...] = ()  # URL prefixes the lane may answer (it decides), set with it
# How long a held request's body may take to arrive before it goes the usual way (under the
# app's own receive deadline from then on).
LANE_WAIT = 1.0
_LIST, _AS_GET = b"LIST ", b"GET "
# Seconds a refused connection may go on sending (discarded) before it is dropped.
_LINGER = 2.0

_REASONS = {
    408: ("Request Timeout", "request_timeout", "the request head was not received in time"),
    414: ("URI Too Long", "uri_too_long", "the request URL is too long"),
    431: (
        "Request Header Fields Too Large",
        "headers_too_large",
        "the request head is too large",
    ),
}


def _refusal(status: int) -> bytes:
    phrase, code, message = _REASONS[status]
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    # Bytes of the head being read (None once it is complete, until the message ends).
    _head: int | None
    _head_timer: asyncio.TimerHandle | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.url = b""  # uvicorn sets it when a message begins; the URL check reads it before
        self._head = 0
        self._head_timer = None
        self._refused = False
        self._listing = False  # the request being parsed came as LIST
        # A request held for the lane: its ticket and its body so far (None: not one).
        self._ticket: Any = None
        self._lane: list[bytes] = []
        self._lane_timer: asyncio.TimerHandle | None = None
        self._held: list[bytes] = []  # answers waiting for the end of the turn

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # A connection that never sends a request is closed like one that never finishes it.
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._drop_ticket()
        self._held = []  # nobody to send them to
        super().connection_lost(exc)

    def eof_received(self) -> None:
        # The transport closes itself after this: what the lane answered goes out first.
        self.send_held()
        super().eof_received()

    def data_received(self, data: bytes) -> None:
        head = self._head
        if head is None:  # body bytes: uvicorn's path, untouched
            super().data_received(data)
            return
        if self._refused:
            return  # discarded unread, while the refusal lingers
        if not head and data.startswith(_LIST):
            data = _AS_GET + data[len(_LIST) :]
            self._listing = True
        self._head = head + len(data)
        super().data_received(data)
        if self._ticket is not None and self._lane_timer is None:  # the body is still coming
            self._lane_timer = self.loop.call_later(LANE_WAIT, self._to_app, False)
        if self._head is None or self.transport.is_closing():
            return
        if len(self.url) > LIMITS.head_limit:
            self._refuse(414)
        elif self._head > LIMITS.head_limit:
            self._refuse(431)
        elif self._head and self._head_timer is None:
            # A head still incomplete after this read: it has head_timeout from now. (Armed
            # only then: a head that comes whole in one read, the usual case, costs no timer.)
            self._arm_head_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # For the watchdog: a stalled reply must drop its connection at once, not wait for
        # a client that does not read to take the bytes still queued (transport.close would).
        self.scope["sealflow.abort"] = self.transport.abort  # type: ignore[typeddict-unknown-key]

    def on_headers_complete(self) -> None:
        self._head = None
        self._cancel_head_timer()
        parser = self.parser
        if (
            LANE is not None
            and self.url.startswith(LANE_URLS)
            and parser.get_method() == b"POST"
            and (self.cycle is None or self.cycle.response_complete)
            and not self.pipeline
            and not self.expect_100_continue
            and parser.get_http_version() == "1.1"
            and parser.should_keep_alive()
            and not parser.should_upgrade()
        ):
            self._ticket = _guarded(LANE.lane_head, self.url, self.headers)
            if self._ticket is not None:
                return  # held: answered once its body has come
        self._start_app()

    def on_body(self, body: bytes) -> None:
        if self._ticket is None:
            super().on_body(body)
        else:
            self._lane.append(body)

    def shutdown(self) -> None:
        if self._ticket is not None:
            self._to_app(complete=False)  # the app finishes it, as any request in flight
        self.send_held()
        super().shutdown()

    def send_400_response(self, msg: str) -> None:
        self.send_held()  # answers to the requests before the bad one come first
        super().send_400_response(msg)

    def hold(self, pieces: Sequence[bytes]) -> None:
        """Queue bytes for this connection, to be written at the end of the loop's turn."""
        if not self._held:
            if not _holding:
                self.loop.call_soon(_send_held)
            _holding.append(self)
        self._held.extend(pieces)

    def send_held(self) -> None:
        """Write this connection's held lane answers now (see the module's docstring)."""
        pieces = self._held
        if pieces:
            self._held = []
            if not self.transport.is_closing():
                self.transport.writelines(pieces)

    def _drop_ticket(self) -> None:
        self._ticket = None
        self._lane = []
        if self._lane_timer is not None:
            self._lane_timer.cancel()
            self._lane_timer = None

    def _to_app(self, complete: bool) -> None:
        """Hand a request held for the lane to the ASGI app, with its body so far, exactly as
        uvicorn would have started it from its head."""
        if self._ticket is None:
            return
        pieces = self._lane
        self._drop_ticket()
        if self.transport.is_closing():
            return
        self._start_app()
        for piece in pieces:
            super().on_body(piece)
        if complete:
            super().on_message_complete()

    def _start_app(self) -> None:
        self.send_held()  # the app's answer follows the lane's before it (pipelined requests)
        super().on_headers_complete()  # sets scope["method"] from the parser: GET
        if self._listing:
            self._listing = False
            self.scope["method"] = LIST_METHOD  # the app's task has not run yet
        cycle = self.cycle
        if cycle is not None:
            cycle.transport = _OneSend(self.transport, cycle, self)  # type: ignore[assignment]

    def on_response_complete(self) -> None:
        cycle = self.cycle
        if cycle is not None and isinstance(cycle.transport, _OneSend):
            cycle.transport.flush()  # a response with no body write (HEAD)
        super().on_response_complete()

    def on_message_complete(self) -> None:
        ticket = self._ticket
        if ticket is None:
            super().on_message_complete()
        else:
            lane = self._lane
            body = lane[0] if len(lane) == 1 else b"".join(lane)
            default = _default_lines(self.server_state.default_headers)
            answer = None if LANE is None else _guarded(LANE.lane_answer, ticket, body, default)
            if answer is None:
                self._to_app(complete=True)
            else:
                self._drop_ticket()
                self.hold(answer)
                self.on_response_complete()  # keep-alive timer, request count, reading on
        self._head = 0  # a pipelined request may follow

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(LIMITS.head_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A reply is still going out on this connection: the next head can wait for it.
            self._arm_head_timer()
        elif self._head:
            self._refuse(408)
        else:
            _metrics.CONNECTIONS_REFUSED.labels("idle").inc()
            self.send_held()
            self.transport.close()

    def timeout_keep_alive_handler(self) -> None:
        # A timer: with a short keep-alive timeout it can fire before the turn's end.
        self.send_held()
        super().timeout_keep_alive_handler()

    def _refuse(self, status: int) -> None:
        self.send_held()
        _metrics.CONNECTIONS_REFUSED.labels(_REASONS[status][1]).inc()
        self._cancel_head_timer()
        self._refused = True
        transport = self.transport
        transport.write(_refusal(status))
        if transport.can_write_eof():
            # Lingering close: closing with the client's bytes still arriving would reset the
            # connection, and the reset can destroy the answer before the client reads it. So
            # half-close, discard what still comes (nothing is parsed or kept), then drop it.
            transport.write_eof()
            self.loop.call_later(_LINGER, transport.abort)
        else:  # TLS has no half-close
            transport.close()


# The largest first body write whose response is held for the end of the turn (_OneSend).
_HOLD_MAX = 64 * 1024

# Connections with lane answers held until the end of the loop's turn, in the order answered.
_holding: list[GuardedHttpToolsProtocol] = []


def _send_held() -> None:
    """The end of the turn (a ``call_soon`` made when the first answer was held): every held
    answer goes out, one write per connection."""
    holding = _holding[:]
    _holding.clear()
    for protocol in holding:
        protocol.send_held()


_defaults: tuple[object, bytes] = (None, b"")


def _default_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The server's default header lines (``date``) as uvicorn writes them, joined once per
    list (uvicorn's server loop replaces the list when the second changes)."""
    global _defaults
    source, lines = _defaults
    if source is not headers:
        lines = b"".join(b"%s: %s\r\n" % pair for pair in headers)
        _defaults = (headers, lines)
    return lines


def _guarded(call: Callable[..., _T], *args: Any) -> _T | None:
    """A lane call; an error in it is logged and the request goes the usual way (a parser
    callback that raises would turn into a 400 for a request the app would have served)."""
    try:
        return call(*args)
    except Exception:
        log.exception("the small-request lane failed; served through the app")
        return None


class _OneSend:
    """A response's transport: its head waits for the first body write and leaves with it,
    at the end of the loop's turn when the two are small.

    uvicorn writes a response's head and its body separately, two ``send()`` calls where one
    does: for a small response that is two trips through the kernel's TCP path and two
    packets. Held here, the head goes out with the first body bytes in one write (uvloop's
    ``writelines``: one ``writev``). When that first write is at most ``_HOLD_MAX`` bytes the
    pair is held with the connection's lane answers (``GuardedHttpToolsProtocol.hold``) and
    leaves with the turn's other answers, for the reason the lane's do (the module's
    docstring); a larger one, and every later write, goes at once, after whatever the
    connection holds. The head is also sent when the response completes without a body write
    (HEAD) and before the transport is closed. A ``100 Continue``, written before the response
    starts, is never held.
    """

    __slots__ = ("_cycle", "_head", "_protocol", "_transport")

    def __init__(
        self, transport: asyncio.Transport, cycle: Any, protocol: GuardedHttpToolsProtocol
    ) -> None:
        self._transport = transport
        self._cycle = cycle
        self._protocol = protocol
        self._head: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        head = self._head
        if head is not None:
            self._head = None
            if len(data) <= _HOLD_MAX:
                # A copy: the app may reuse its buffer once send() returns.
                self._protocol.hold((head, bytes(data)))
                return
            self._protocol.send_held()
            self._transport.writelines((head, data))
        elif self._cycle is not None and self._cycle.response_started:
            self._head = bytes(data)
            self._cycle = None  # only the head is held, once
        else:
            self._protocol.send_held()
            self._transport.write(data)

    def flush(self) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._protocol.hold((head,))

    def close(self) -> None:
        self.flush()
        self._protocol.send_held()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, abort, get_extra_info, ...
        return getattr(self._transport, name)
