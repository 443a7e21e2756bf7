"""sealflow's HTTP/1.1 connection: httptools parses, the app side plans, this moves bytes.

uvicorn runs it through its public configuration (``uvicorn.Config(http=HttpProtocol)``) and
keeps the sockets, TLS, workers, lifespan, signals and shutdown; nothing here inherits from a
uvicorn class or reaches into one. The app's lifespan hands its settings over through the
lifespan state, which uvicorn passes to each connection as ``app_state`` (``OPTIONS``).

For each request the head is scanned once into a ``Head`` and handed to the planner (the
app's front door), whose plan says what happens next:

- refused from the head (401, 403, 413, 503, ...): the planner's answer is written at once,
  the body left unread (the connection closes after it when one was announced);
- whole-body, with a declared length the plan allows: the body is gathered here and the
  planner answers it in one synchronous call when it is complete (the *fast answer*), or
  passes it on (its sealing needs the keystore, which the event loop never waits for): then
  it goes through the ASGI app with its body already read;
- anything else (streams, full duplex, records, Transit batches, admin): the ASGI app, with
  the plan in the scope so nothing is decided twice.

A fast answer is taken only when no earlier response on the connection is still going out;
otherwise the request waits its turn as an ASGI request, whose path makes the same calls.

Rules this enforces for every request on a connection, the first or a pipelined one:

- a head (request line and headers) may be at most ``head_limit`` bytes (431, or 414 for the
  URL) and must arrive within ``head_timeout`` seconds of its first byte (408); the same
  budget bounds a chunked body's framing between two pieces of data, trailers included;
- trailer fields are dropped: they never become request headers (a proxy's rules only ever
  saw the head) and never reach the app;
- the keep-alive timer runs only while the connection has nothing pending: no request being
  read, answered or waiting, and no head begun;
- per-request state, Vault's ``LIST`` method included, lives in the request's ``Head`` and
  ``Cycle`` and ends with them;
- every response names its request in ``X-Request-Id`` (the head's ``request_id``; a refusal
  of bytes that never made a head gets a new one: ``_request_id``);
- the process keeps at most so many connections open (``Options.gate``, ``_gate``): a new one
  beyond makes room by closing an idle one, one that never authenticated first.

Small answers (fast answers, and an ASGI response whose first body write is at most
``HOLD_MAX`` bytes, together with its head) are held until the end of the event loop's turn and
leave together, one write per connection (``hold``): writing each at once wakes a client per
answer, which on this machine's virtual CPUs cost about 15 us of the server's time each
(docs/BENCHMARKS.md). Anything else written to the connection, and its close, sends what it
holds first.

An answer whose audit record must be written first (``Answer.ticket``, ``Options.recorded``)
leaves only once it is: if the record's write is under way on the audit's writer thread (a
remote sink), the connection *parks* its output (``_emit``): that answer and everything
written after it wait, in order, its close too, until the trail calls back
(``Options.wait_recorded``); then they go out, or the connection is dropped if the write
failed. Other connections go on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import httptools

from . import _request_id
from ._cycle import STATUS_LINES, Cycle, status_line
from ._gate import Gate
from ._head import Head
from ._peer import PeerCert, identity

log = logging.getLogger("sealflow")

OPTIONS = "sealflow.http"  # the key of this protocol's ``Options`` in the lifespan state
LIST_METHOD = "LIST"
_LIST, _AS_GET = b"LIST ", b"GET "
_END = b"\r\n\r\n"
_HEAD_PHASE, _BODY_PHASE, _CHUNKED_PHASE, _CLOSED = range(4)
# Seconds a refused connection may go on sending (discarded) before it is dropped.
_LINGER = 2.0


class Answer(Protocol):
    """A whole response the planner made: status, header lines (each ending in CRLF), body;
    ``ticket``: the audit record that must be written before it leaves (0: none)."""

    status: int
    headers: bytes
    body: Sequence[bytes]
    close: bool
    ticket: int


class Plan(Protocol):
    refused: bool  # answered from the head (``Planner.answer(plan, None)``)
    whole: int  # the largest body this protocol may gather and have answered; 0: never

    @property
    def token(self) -> object | None:
        """The request's valid token, if it had one: its connection has authenticated."""


class Planner(Protocol):
    """The app's side of a request (``_front.Front``); the plan is the planner's own type,
    which the protocol hands back without looking into it (but for ``Plan``'s two fields)."""

    def plan(self, head: Head) -> Plan: ...

    def begin(self, plan: Any) -> None:
        """A whole-body plan the protocol takes: its body is on its way."""

    def answer(self, plan: Any, body: bytes | None) -> Answer | None:
        """The answer to a refused plan (body None), to a whole-body plan whose body came
        (its bytes), or to one whose body did not come in time (None). Records the request.
        None for a body that came: not answered here after all; the protocol runs the request
        through the app as any other, its body already read (the planner records it there)."""

    def abandon(self, plan: Any) -> None:
        """A whole-body plan whose connection went away before its answer."""

    def connection_refused(self, reason: str) -> None:
        """A connection the protocol itself refused or closed (a bad or slow head, idle)."""


@dataclass(frozen=True, slots=True)
class Options:
    head_limit: int = 16 * 1024
    head_timeout: float = 10.0
    receive_timeout: float = 30.0  # a whole body gathered here must come within this
    planner: Planner | None = None
    fast: bool = True  # answer whole-body plans here (off: every request through the app)
    gate: Gate | None = None  # the process's open connections, capped (None: not counted)
    # The audit trail's ``recorded(ticket)``: whether that record is written (True), could not
    # be (False), or is being written (None: ask ``wait_recorded``), writing what is queued if
    # it is not (no trail: None). An answer whose record is not written never leaves.
    recorded: Callable[[int], bool | None] | None = None
    # The trail's ``wait(ticket, then)``: ``then(written)`` on the loop once it is known.
    wait_recorded: Callable[[int, Callable[[bool], None]], None] | None = None


_REFUSALS = {
    400: (b"bad_request", b"the request could not be parsed as HTTP/1.1"),
    408: (b"request_timeout", b"the request head was not received in time"),
    414: (b"uri_too_long", b"the request URL is too long"),
    431: (b"headers_too_large", b"the request head is too large"),
    500: (b"internal_error", b"internal error"),
}


def _refusal(status: int) -> bytes:
    """A refusal of the connection's bytes, not of a request: no head came whole, so its id is
    a new one (the refused request is not in the access log, only counted)."""
    code, message = _REFUSALS[status]
    body = b'{"error": {"code": "%s", "message": "%s"}}' % (code, message)
    return (
        status_line(status)
        + _request_id.line(_request_id.new())
        + (
            b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n"
            b"\r\n%s" % (len(body), body)
        )
    )


class _Refused(Exception):
    """Raised from a parser callback after a refusal, to stop the parser there."""


class _Whole:
    """A whole-body plan's request, its body gathered for the fast answer."""

    __slots__ = ("head", "keep_alive", "pieces", "plan", "timer")

    def __init__(self, plan: Plan, head: Head, keep_alive: bool) -> None:
        self.plan = plan
        self.head = head
        self.keep_alive = keep_alive
        self.pieces: list[bytes] = []
        self.timer: asyncio.TimerHandle | None = None


# Connections holding answers until the end of the loop's turn, in the order answered.
_holding: list[HttpProtocol] = []


def _send_held() -> None:
    """The end of the turn (a ``call_soon`` made when the first answer was held)."""
    holding = _holding[:]
    _holding.clear()
    for conn in holding:
        conn.send_held()


class HttpProtocol(asyncio.Protocol):
    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.server_state = server_state
        self.app_state = app_state
        self.keepalive_timeout: float = config.timeout_keep_alive
        options = app_state.get(OPTIONS)
        self.options: Options = options if isinstance(options, Options) else Options()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.server: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None
        self._peer: str | None = None  # the client's IP address, for each head
        self._peer_cert: PeerCert | None = None  # its TLS client certificate, for each head
        self.scheme = "http"
        self._phase = _HEAD_PHASE
        self._count = 0  # bytes of the head being read, or of a chunked body's framing
        self._tail = b""  # the last bytes of the head so far (its end may straddle reads)
        self._remaining = 0  # body bytes still to come (Content-Length)
        self._url: list[bytes] = []
        self._listing = False  # the head being read came as LIST
        self._prefix = b""  # the first bytes of a head, too few to tell LIST from others
        self._begun = False  # a head's request line has begun (the parser said so)
        self._fed_body = 0  # data bytes the parser found in the chunked read being fed
        self._body_ended = -1  # where in that read (in data bytes) the body ended, if it did
        self._fields: list[tuple[bytes, bytes]] = []  # the head's headers so far, as read
        self._reader: Cycle | _Whole | None = None  # where the body being read goes
        self._busy: Cycle | _Whole | None = None  # the request whose answer is under way
        self._queue: deque[Cycle] = deque()  # pipelined requests waiting for it
        self._last = False  # no request after the ones under way (an Upgrade, shutdown)
        self._draining = False  # reading (and dropping) a body whose answer has gone
        self._held: list[bytes] = []
        self._ticket = 0  # the last audit record the held answers need written (``hold``)
        # Output waiting for an audit record being written (``_emit``), the last ticket it
        # needs, and what ends the connection once it is out (``_after_out``).
        self._parked: list[bytes] | None = None
        self._parked_ticket = 0
        self._then: Callable[[], None] | None = None
        self._paused_writing = False  # by the transport (its buffer is full)
        self._refusal: int | None = None  # a refusal waiting for the answers before it
        self._head_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        # When the connection last became idle; None while anything is pending. The idle
        # timer, once armed, stays: it checks this when it fires (a timer per request, armed
        # and cancelled, was a measurable share of a small request).
        self._idle_since: float | None = None
        self._reading = True
        self._writable = asyncio.Event()
        self._writable.set()
        self._authenticated = False  # a request on it carried a valid token (``_gate``)

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)
        self.server_state.connections.add(self)
        self.server = _address(transport.get_extra_info("sockname"))
        self.client = client = _address(transport.get_extra_info("peername"))
        self._peer = None if client is None else client[0]
        if transport.get_extra_info("sslcontext"):
            self.scheme = "https"
            # The handshake is done: a client certificate it verified is read once, here.
            self._peer_cert = identity(transport.get_extra_info("ssl_object"))
        # A connection that never sends a request is closed like one that never finishes it.
        self._arm_head_timer()
        if self.options.gate is not None:
            self.options.gate.admit(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server_state.connections.discard(self)
        if self.options.gate is not None:
            self.options.gate.gone(self)
        self._phase = _CLOSED
        self._cancel_timers()
        self._held = []
        self._parked = self._then = None
        busy, reader = self._busy, self._reader
        self._busy = self._reader = None
        for request in {id(busy): busy, id(reader): reader}.values():
            if isinstance(request, Cycle):
                request.lost()
            elif isinstance(request, _Whole):
                self._forget(request)
                if self.options.planner is not None:
                    self.options.planner.abandon(request.plan)
        for cycle in self._queue:
            cycle.lost()
        self._queue.clear()
        self._writable.set()

    def eof_received(self) -> bool | None:
        self.send_held()  # the transport closes itself after this: what is held goes first
        if self._parked is not None:  # unless answers wait for their record: closed after
            self._after_out(self._close_transport)
            return True
        return None

    def pause_writing(self) -> None:
        self._paused_writing = True
        self._writable.clear()

    def resume_writing(self) -> None:
        self._paused_writing = False
        if self._parked is None:
            self._writable.set()

    def data_received(self, data: bytes) -> None:
        self._idle_since = None
        try:
            self._receive(data)
        except httptools.HttpParserUpgrade:
            # The request before the Upgrade was delivered whole; no other protocol is spoken
            # here, so that one is answered and the connection then closes.
            self._last = True
            self._phase = _CLOSED
            if self._busy is None and not self._queue:
                self._close()
        except httptools.HttpParserError as exc:
            log.debug("unparseable request: %s", exc)
            self._refuse(400)
            return
        self._settle()

    def _receive(self, data: bytes) -> None:
        options = self.options
        if self._prefix:
            data, self._prefix = self._prefix + data, b""
        while data and self._phase != _CLOSED:
            phase = self._phase
            if phase == _BODY_PHASE:
                n = self._remaining
                if len(data) <= n:
                    self.parser.feed_data(data)
                    return
                self.parser.feed_data(data[:n])  # ends the message: the next head follows
                data = data[n:]
            elif phase == _CHUNKED_PHASE:
                self._receive_chunked(data)
                return
            else:
                if not self._count and not self._tail:
                    if data.startswith(_LIST):
                        # Vault's LIST, a method the parser does not know, read as GET.
                        data = _AS_GET + data[len(_LIST) :]
                        self._listing = True
                    elif _LIST.startswith(data[:5]) and len(data) < len(_LIST):
                        self._prefix = data  # too short to tell yet: wait for more
                        return
                end = self._head_end(data)
                piece = data if end < 0 else data[:end]
                self._count += len(piece)
                # Fed first (one read at most): an overlong URL is then a 414 (``on_url``).
                self.parser.feed_data(piece)
                if self._phase == _HEAD_PHASE and self._count > options.head_limit:
                    self._refuse(431)
                    return
                if end < 0:
                    self._tail = (self._tail + data)[-3:] if len(data) < 3 else data[-3:]
                    return
                self._tail = b""
                data = data[end:]

    def _receive_chunked(self, data: bytes) -> None:
        """A chunked body: the parser finds its framing; what is not data counts against the
        head budget until the next piece of data (``on_body`` resets it)."""
        self._count += len(data)
        self._fed_body, self._body_ended = 0, -1
        self.parser.feed_data(data)
        if self._body_ended >= 0 and self._begun and self._phase == _HEAD_PHASE:
            # The body ended inside this read and a head began after it: all of the read
            # but its data counts, the body's last framing too (high by a few bytes, never
            # low), and the head's end may straddle this read and the next.
            self._count = len(data) - self._body_ended
            self._tail = data[-3:]
        if self._count > self.options.head_limit:
            self._refuse(431)

    def _head_end(self, data: bytes) -> int:
        """Where the head being read ends in ``data`` (just past its blank line), or -1."""
        tail = self._tail
        if tail:
            probe = tail + data[:3]
            i = probe.find(_END)
            if i >= 0:
                return i + len(_END) - len(tail)
        i = data.find(_END)
        return -1 if i < 0 else i + len(_END)

    # -- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = []
        self._fields = []
        self._begun = True

    def on_url(self, url: bytes) -> None:
        self._url.append(url)
        if sum(map(len, self._url)) > self.options.head_limit:
            self._refuse(414)
            raise _Refused  # stops the parser: nothing after it is read

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._phase == _CHUNKED_PHASE:
            return  # a trailer field: dropped (the module's docstring)
        self._fields.append((name.lower(), value))

    def _new_head(self) -> Head:
        """The head read: its request line, then its headers in one call."""
        url = b"".join(self._url)
        self._url = []
        if not url.startswith(b"/"):
            parsed = httptools.parse_url(url)  # absolute form: http://host/path?query
            raw_path, query = parsed.path or b"/", parsed.query or b""
        else:
            raw_path, _, query = url.partition(b"?")
        method = self.parser.get_method().decode("ascii")
        if self._listing:
            self._listing = False
            method = LIST_METHOD
        text = raw_path.decode("ascii", "replace")
        path = urllib.parse.unquote(text) if b"%" in raw_path else text
        head = Head(method, raw_path, query, path, self._peer, self._peer_cert)
        fields, self._fields = self._fields, []
        head.add_all(fields)
        return head.complete()

    def on_headers_complete(self) -> None:
        try:
            self._headers_complete()
        except Exception:
            self._planner_failed()

    def _planner_failed(self) -> None:
        """An error in the app's planner: a bug, not a bad request. 500, and the connection
        ends (what it was in the middle of cannot be trusted to go on)."""
        log.exception("the request could not be planned")
        self._phase = _CLOSED
        self.write_now(_refusal(500))
        self._close()

    def _headers_complete(self) -> None:
        head = self._new_head()
        self._begun = False
        if self._head_timer is not None:
            self._cancel_head_timer()
        self._count = 0
        if head.chunked:
            self._phase = _CHUNKED_PHASE
        elif head.length:
            self._phase, self._remaining = _BODY_PHASE, head.length
        keep_alive = self.parser.should_keep_alive() and not self.parser.should_upgrade()
        options = self.options
        planner = options.planner
        plan = None if planner is None else planner.plan(head)
        if (
            plan is not None
            and not self._authenticated
            and plan.token is not None
            and options.gate is not None
        ):
            self._authenticated = True
            options.gate.authenticated(self)
        if planner is not None and plan is not None and self._busy is None and not self._queue:
            if plan.refused:
                self._reader = None
                close = not keep_alive or head.has_body
                refusal = planner.answer(plan, None)
                assert refusal is not None  # a refusal is always answered here
                self._write_answer(refusal, head, close)
                return
            length = head.length
            if options.fast and length is not None and length <= plan.whole and plan.whole:
                planner.begin(plan)
                self._busy = self._reader = _Whole(plan, head, keep_alive)
                if length and head.continue_:
                    self.write_now(b"HTTP/1.1 100 Continue\r\n\r\n")
                return  # its deadline is armed only if the read ends before the body (_settle)
        scope = self._scope(head, plan)
        cycle = Cycle(self, scope, head, keep_alive)
        self._reader = cycle
        if self._busy is None:
            self._start(cycle)
        else:
            self._queue.append(cycle)
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        reader = self._reader
        if self._phase == _BODY_PHASE:
            self._remaining -= len(body)
        else:
            self._count = 0  # data: the framing before it was within its budget
            self._fed_body += len(body)
        if isinstance(reader, Cycle):
            if not reader.complete:
                reader.feed(body)
        elif reader is not None:
            reader.pieces.append(body)

    def on_message_complete(self) -> None:
        if self._phase == _CHUNKED_PHASE:
            self._body_ended = self._fed_body
        self._phase = _HEAD_PHASE
        self._count = 0
        reader = self._reader
        self._reader = None
        if self._draining:
            self._draining = False
            self._cancel_head_timer()
        if isinstance(reader, Cycle):
            reader.ended()
        elif reader is not None:
            if reader.timer is not None:
                self._forget(reader)
            planner = self.options.planner
            assert planner is not None
            pieces = reader.pieces
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            self._busy = None
            answer = planner.answer(reader.plan, body)
            if answer is None:
                self._through_app(reader, body)
            else:
                self._write_answer(answer, reader.head, not reader.keep_alive)

    # -- answers ------------------------------------------------------------------------------

    def _write_answer(self, answer: Answer, head: Head, close: bool) -> None:
        close = close or answer.close or self._last
        source, defaults = _defaults  # ``default_lines``, its call saved while they hold
        if source is not self.server_state.default_headers:
            defaults = self.default_lines()
        lines = [
            STATUS_LINES.get(answer.status) or status_line(answer.status),
            defaults,
            _request_id.line(head.request_id),
            answer.headers,
            b"connection: close\r\n\r\n" if close else b"\r\n",
        ]
        if head.method != "HEAD":
            lines.extend(answer.body)
        self.server_state.total_requests += 1
        ticket = answer.ticket
        if close:
            self.send_held()
            if self._emit(lines, ticket):
                self._close_after_answer(head)
        else:
            if ticket:
                self._ticket = ticket
            self.hold(*lines)

    def _through_app(self, whole: _Whole, body: bytes) -> None:
        """A whole-body request the planner passed on: an ASGI cycle with its body read."""
        cycle = Cycle(self, self._scope(whole.head, whole.plan), whole.head, whole.keep_alive)
        cycle.waiting_continue = False  # asked for, and sent, while the body was gathered
        cycle.feed(body)
        cycle.ended()
        self._start(cycle)

    def _whole_timed_out(self, whole: _Whole) -> None:
        whole.timer = None
        if self._reader is not whole:
            return
        self._reader = self._busy = None
        planner = self.options.planner
        assert planner is not None
        refusal = planner.answer(whole.plan, None)
        assert refusal is not None  # a refusal is always answered here
        self._write_answer(refusal, whole.head, close=True)

    def _forget(self, whole: _Whole) -> None:
        if whole.timer is not None:
            whole.timer.cancel()
            whole.timer = None

    def _close_after_answer(self, head: Head) -> None:
        """Close after an answer given before the request's body was read (if it had one)."""
        self._phase = _CLOSED
        linger = head.has_body and self._reader is None
        self._after_out(lambda: self._end(linger))

    def _end(self, linger: bool) -> None:
        transport = self.transport
        if linger and transport.can_write_eof():
            # Lingering close: closing with the client's bytes still arriving would reset the
            # connection, and the reset can destroy the answer before the client reads it.
            transport.write_eof()
            self.loop.call_later(_LINGER, transport.abort)
        else:
            transport.close()

    def _refuse(self, status: int) -> None:
        """A connection-level refusal (an unparseable or over-limit head, a broken body): no
        more is read; the answers to the requests before it go out first, then this one, and
        the connection ends."""
        if self._phase == _CLOSED:
            return
        self._phase = _CLOSED
        self._cancel_timers()
        self.pause_reading()
        reader, busy = self._reader, self._busy
        self._reader = None
        if isinstance(reader, Cycle):  # the bad bytes were its body's: it cannot finish
            reader.lost()
            if reader in self._queue:
                self._queue.remove(reader)
        elif isinstance(reader, _Whole):
            self._forget(reader)
            self._busy = busy = None
            if self.options.planner is not None:
                self.options.planner.abandon(reader.plan)
        if busy is reader and isinstance(busy, Cycle):
            self._busy = None
            if busy.started:
                self.transport.abort()  # inside its response: nothing clean can be said
                return
            busy = None
        self._refusal = status
        if busy is None:
            self._send_refusal()

    def _send_refusal(self) -> None:
        status, self._refusal = self._refusal, None
        if status is None:
            self._close()
            return
        _count_refused(self.options, _REFUSALS[status][0].decode())
        self.send_held()
        if self.transport.is_closing():
            return
        self._emit([_refusal(status)], 0)
        self._after_out(lambda: self._end(True))  # TLS has no half-close: closed at once

    # -- for a cycle --------------------------------------------------------------------------

    def _scope(self, head: Head, plan: Plan | None) -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": self.parser.get_http_version(),
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": head.method,
            "root_path": "",
            "path": head.path,
            "raw_path": head.raw_path,
            "query_string": head.query,
            "headers": head.headers,
            "state": self.app_state.copy(),
            "sealflow.head": head,
            "sealflow.plan": plan,
            # For the watchdog: a stalled reply must drop its connection at once, not wait
            # for a client that does not read to take what is queued (close would).
            "sealflow.abort": self.transport.abort,
        }

    def _start(self, cycle: Cycle) -> None:
        self._busy = cycle
        task = self.loop.create_task(cycle.run(self.app))
        tasks = self.server_state.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def default_lines(self) -> bytes:
        """The server's default header lines (``date``), joined once per list (uvicorn's
        server loop replaces the list when the second changes)."""
        global _defaults
        source, lines = _defaults
        headers = self.server_state.default_headers
        if source is not headers:
            lines = b"".join(b"%s: %s\r\n" % pair for pair in headers)
            _defaults = (headers, lines)
        return lines

    def closing_after(self, cycle: Cycle) -> bool:
        """Whether the connection ends after this response (``_last``)."""
        return self._last and not self._queue

    def hold(self, *pieces: bytes) -> None:
        """Queue bytes for this connection, to be written at the end of the loop's turn."""
        if not self._held:
            if not _holding:
                self.loop.call_soon(_send_held)
            _holding.append(self)
        self._held.extend(pieces)

    def send_held(self) -> None:
        pieces = self._held
        if pieces:
            self._held = []
            ticket, self._ticket = self._ticket, 0
            self._emit(pieces, ticket)

    def _emit(self, pieces: list[bytes], ticket: int) -> bool:
        """Write ``pieces`` after everything written before them, once the audit record of
        ``ticket`` (0: none) is written: now, or parked until the trail knows. False if the
        connection was dropped (the record could not be written)."""
        parked = self._parked
        if parked is not None:
            parked.extend(pieces)
            self._parked_ticket = max(self._parked_ticket, ticket)
            return True
        if ticket:
            known = self._recorded(ticket)
            if known is None:
                self._park(pieces, ticket)
                return True
            if not known:
                self._unrecorded()
                return False
        if not self.transport.is_closing():
            self.transport.writelines(pieces)
        return True

    def _recorded(self, ticket: int) -> bool | None:
        """Whether the audit record of ``ticket`` is written: the first connection to ask in a
        turn writes (or hands to the writer thread) the turn's records, one batch; the others
        find theirs written, or on their way (None)."""
        recorded = self.options.recorded
        return True if recorded is None else recorded(ticket)

    def _park(self, pieces: list[bytes], ticket: int) -> None:
        wait = self.options.wait_recorded
        assert wait is not None  # a trail that answers None can be waited for
        self._parked = list(pieces)
        self._parked_ticket = ticket
        self._writable.clear()  # a streamed response waits for it too (``drain``)
        wait(ticket, self._unpark)

    def _unpark(self, written: bool) -> None:
        """The trail's word on the parked output's record: out it goes (or waits again for a
        later record parked behind it), or the connection is dropped."""
        pieces, self._parked = self._parked, None
        if pieces is None:
            return  # the connection was lost meanwhile
        ticket, self._parked_ticket = self._parked_ticket, 0
        then, self._then = self._then, None
        if not written:
            self._unrecorded()
            return
        if not self._paused_writing:
            self._writable.set()
        if self._emit(pieces, ticket) and then is not None:
            self._after_out(then)

    def _after_out(self, then: Callable[[], None]) -> None:
        """``then`` (the connection's end) once the parked output is out: now if none is."""
        if self._parked is None:
            then()
        elif self._then is None:
            self._then = then

    def _close_transport(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def _unrecorded(self) -> None:
        """Answers whose audit record could not be written (mode required) never leave: the
        connection is dropped, so the client sees no answer rather than an unrecorded one."""
        self._phase = _CLOSED
        self._parked = self._then = None
        self._cancel_timers()
        self.transport.abort()

    def write_now(self, *pieces: bytes) -> None:
        self.send_held()
        self._emit(list(pieces), 0)

    async def drain(self) -> None:
        if not self._writable.is_set():
            await self._writable.wait()

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if not self._reading and not self._queue and self._phase != _CLOSED:
            self._reading = True
            self.transport.resume_reading()

    def response_complete(self, cycle: Cycle) -> None:
        self.server_state.total_requests += 1
        if self._busy is cycle:
            self._busy = None
        if not cycle.keep_alive:
            self._close()
            return
        if cycle.more_body and self._reader is cycle:
            # Answered before its body ended: the rest is read and dropped, within the head
            # timeout, so that the connection can carry the next request.
            self._reader = None
            self._draining = True
            self._arm_head_timer()
        if self._queue:
            self._start(self._queue.popleft())
        elif self._phase == _CLOSED:
            self._send_refusal()  # or the close after an Upgrade
            return
        self.resume_reading()
        self._settle()

    def app_failed(self, cycle: Cycle, exc: BaseException) -> None:
        if isinstance(exc, Exception):
            log.error("unhandled error in the app", exc_info=exc)
        if self.transport.is_closing() or (self._phase == _CLOSED and cycle.disconnected):
            return
        if not cycle.started:
            body = b"Internal Server Error"
            self.write_now(
                status_line(500),
                _request_id.line(cycle.head.request_id),
                b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (len(body), body),
            )
        self._close()

    def cut(self, cycle: Cycle) -> None:
        """The app returned without finishing its response: the connection ends there. With
        a signal (``Cycle.signal``) the close lingers, so that the client reads the signal
        before anything resets the connection (the request body may still be arriving)."""
        if self._busy is cycle:
            self._busy = None
        signal = cycle.signal()
        if not signal:
            self._close()
            return
        self.write_now(signal)
        self._phase = _CLOSED
        self._cancel_timers()
        self._after_out(lambda: self._end(linger=True))

    @property
    def idle(self) -> bool:
        """Nothing being served: no request read (beyond a head), answered, waiting or held."""
        return (
            self._busy is None
            and self._reader is None
            and not self._queue
            and not self._held
            and self._parked is None
        )

    def shed(self, reason: str) -> None:
        """Closed to make room for another connection (``_gate``): aborted, so that its
        descriptor is free now; an idle connection has nothing queued to write anyway."""
        _count_refused(self.options, reason)
        self._phase = _CLOSED
        self._cancel_timers()
        self.transport.abort()

    def _close(self) -> None:
        self._phase = _CLOSED
        self._cancel_timers()
        self.send_held()
        self._after_out(self._close_transport)

    # -- uvicorn's server ---------------------------------------------------------------------

    def shutdown(self) -> None:
        """The server is stopping: an idle connection closes now, a busy one after its
        answer (a request under way, or waiting, is finished)."""
        busy = self._busy
        if busy is None and not self._queue and self._reader is None:
            self._close()
            return
        self._last = True
        if isinstance(busy, Cycle):
            busy.keep_alive = busy.keep_alive and bool(self._queue)
        for cycle in self._queue:
            cycle.keep_alive = False

    # -- timers -------------------------------------------------------------------------------

    def _settle(self) -> None:
        """After a read or an answer: the head timer runs while a head is begun, the
        keep-alive timer while nothing at all is pending."""
        if self._phase == _CLOSED:
            return
        reader = self._reader
        if isinstance(reader, _Whole) and reader.timer is None:
            reader.timer = self.loop.call_later(
                self.options.receive_timeout, self._whole_timed_out, reader
            )
        if (self._count and self._phase == _HEAD_PHASE) or self._tail or self._prefix:
            if self._head_timer is None:
                self._arm_head_timer()
        elif (
            self._busy is None
            and self._reader is None
            and not self._queue
            and not self._draining
            and self._phase == _HEAD_PHASE
        ):
            if self._head_timer is not None:
                self._cancel_head_timer()
            self._idle_since = self.loop.time()
            if self._idle_timer is None:
                self._idle_timer = self.loop.call_later(self.keepalive_timeout, self._idle)

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.options.head_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        self._cancel_idle_timer()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._phase == _CLOSED or self.transport.is_closing():
            return
        if self._draining:
            _count_refused(self.options, "request_timeout")
            self._close()
        elif self._busy is not None:
            # An answer is still going out: the next head may wait for it.
            self._arm_head_timer()
        elif self._count or self._tail or self._prefix:
            self._refuse(408)
        else:
            _count_refused(self.options, "idle")
            self._close()

    def _idle(self) -> None:
        self._idle_timer = None
        since = self._idle_since
        if since is None or self._phase == _CLOSED:
            return  # busy since: armed again when it is idle again (_settle)
        left = since + self.keepalive_timeout - self.loop.time()
        if left > 0:
            self._idle_timer = self.loop.call_later(left, self._idle)
        elif self._busy is None and self._reader is None and not self._queue:
            self._close()


_defaults: tuple[object, bytes] = (None, b"")


def _address(info: Any) -> tuple[str, int] | None:
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


def _count_refused(options: Options, reason: str) -> None:
    if options.planner is not None:
        options.planner.connection_refused(reason)
