"""One request's ASGI exchange on a connection: ``receive`` hands over the body as the parser
delivers it, ``send`` writes the response (``Content-Length`` or chunked framing, HEAD without
a body, ``Connection: close`` when asked or when the connection cannot be kept).

The connection (``_protocol``) owns the socket; a cycle only asks it to write, to hold a small
answer until the end of the loop's turn, to pause or resume reading, and to say when the
response is complete.
"""

from __future__ import annotations

import asyncio
import http
from typing import TYPE_CHECKING, Any

from . import _request_id
from ._head import Head

if TYPE_CHECKING:
    from ._protocol import HttpProtocol

# Body bytes a cycle buffers for an app that is not reading before the socket stops being read.
HIGH_WATER = 64 * 1024
# The largest first body write that leaves with its head at the end of the loop's turn.
HOLD_MAX = 64 * 1024
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_NO_BODY_STATUS = frozenset((204, 304))


def status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase.encode("ascii"))


STATUS_LINES = {status.value: status_line(status.value) for status in http.HTTPStatus}


class Cycle:
    """A request served through the ASGI app."""

    __slots__ = (
        "_chunked",
        "_conn",
        "_event",
        "_expected",
        "_head_bytes",
        "body",
        "buffered",
        "complete",
        "disconnected",
        "error",
        "head",
        "keep_alive",
        "more_body",
        "scope",
        "started",
        "waiting_continue",
    )

    def __init__(
        self, conn: HttpProtocol, scope: dict[str, Any], head: Head, keep_alive: bool
    ) -> None:
        self._conn = conn
        self.scope = scope
        self.head = head
        self.keep_alive = keep_alive
        self.body: list[bytes] = []
        self.buffered = 0
        self.more_body = True  # until the parser has the whole request
        self.disconnected = False
        self.waiting_continue = head.continue_
        self.started = False  # the response's head was given
        self.complete = False  # the response was sent whole
        self._event = asyncio.Event()  # set when body or a disconnect waits for receive()
        self._chunked = False
        self._expected: int | None = None  # Content-Length the response declared
        self._head_bytes: bytes | None = None  # a response head waiting for its first body
        self.error: bytes | None = None  # why the app left its response unfinished
        scope["sealflow.stream_error"] = self.stream_error

    # -- from the connection --------------------------------------------------------------

    def feed(self, piece: bytes) -> None:
        self.body.append(piece)
        self.buffered += len(piece)
        self._event.set()
        if self.buffered > HIGH_WATER:
            self._conn.pause_reading()

    def ended(self) -> None:
        self.more_body = False
        self._event.set()

    def lost(self) -> None:
        self.disconnected = True
        self._event.set()

    def stream_error(self, code: str) -> None:
        """The app will leave its started response unfinished because of ``code`` (an error
        code such as ``decryption_failed``): the cut-off then says so (``signal``)."""
        if code.isascii() and code.replace("_", "").isalnum():
            self.error = code.encode("ascii")

    def signal(self) -> bytes:
        """The last bytes of a chunked response the app left unfinished with a known error:
        a chunk-size line naming it in a chunk extension, for a chunk that never comes
        (docs/API.md, "Transports"). A client that ignores the extension still sees a body
        cut off inside a chunk, never a clean end."""
        if self._chunked and self.started and self._head_bytes is None and self.error:
            return b"1;sealflow-error=%s\r\n" % self.error
        return b""

    # -- the ASGI interface ------------------------------------------------------------------

    async def run(self, app: Any) -> None:
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            self._conn.app_failed(self, exc)
            if not isinstance(exc, Exception):
                raise
        else:
            if self.disconnected:
                return  # the connection is gone, or was refused: nothing to answer
            if not self.started:
                self._conn.app_failed(self, RuntimeError("the app gave no response"))
            elif not self.complete:
                # How a stream that failed midway is cut off: the client sees the response
                # end early (a short body, or chunked framing never closed), never cleanly.
                self._conn.cut(self)

    async def receive(self) -> dict[str, Any]:
        if self.waiting_continue and self.more_body and not self.body:
            self.waiting_continue = False
            self._conn.write_now(_CONTINUE)
        if not self.disconnected and self.more_body and not self.body:
            self._conn.resume_reading()
            self._event.clear()
            await self._event.wait()
        if self.disconnected or self.complete:
            return {"type": "http.disconnect"}
        body = self.body
        piece = body[0] if len(body) == 1 else b"".join(body)
        self.body = []
        self.buffered = 0
        self._conn.resume_reading()
        return {"type": "http.request", "body": piece, "more_body": self.more_body}

    async def send(self, message: dict[str, Any]) -> None:
        if self.disconnected:
            return  # nobody to send it to (ASGI lets a server ignore it)
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected http.response.start, got {kind!r}")
            self.started = True
            self.waiting_continue = False
            self._head_bytes = self._render_head(message["status"], message.get("headers", ()))
            return
        if self.complete or kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        data: bytes = message.get("body", b"")
        more: bool = message.get("more_body", False)
        conn = self._conn
        if self.head.method == "HEAD":
            data = b""
        elif self._chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data) if data else b""
            if not more:
                data += b"0\r\n\r\n"
        elif self._expected is not None:
            self._expected -= len(data)
            if self._expected < 0 or (not more and self._expected):
                raise RuntimeError("response body does not match its Content-Length")
        head = self._head_bytes
        if head is not None:
            self._head_bytes = None
            if len(data) <= HOLD_MAX:
                # A copy: the app may reuse its buffer once send() returns.
                conn.hold(head, bytes(data))
            else:
                conn.write_now(head, data)
        elif data:
            conn.write_now(data)
            if more:
                await conn.drain()
        if not more:
            self.complete = True
            conn.response_complete(self)

    def _render_head(self, status: int, headers: Any) -> bytes:
        conn = self._conn
        lines = [
            STATUS_LINES.get(status) or status_line(status),
            conn.default_lines(),
            _request_id.line(self.head.request_id),
        ]
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-length":
                self._expected = int(value)
            elif lower == b"connection" and value.lower() == b"close":
                self.keep_alive = False
                continue  # written once below
            elif lower == b"transfer-encoding":
                continue  # the server frames the body itself
            lines.append(b"%s: %s\r\n" % (name, value))
        if (
            self._expected is None
            and self.head.method != "HEAD"
            and status not in _NO_BODY_STATUS
            and status >= 200
        ):
            self._chunked = True
            lines.append(b"transfer-encoding: chunked\r\n")
        if not self.keep_alive or conn.closing_after(self):
            self.keep_alive = False
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)
