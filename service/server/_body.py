"""Moving bytes between ASGI and the crypto code: the request body in, the reply out."""

from __future__ import annotations

from typing import Any

from starlette.types import Receive, Scope, Send

from ._logging import AccessRecord
from ._watchdog import Watch
from .errors import ApiError
from .http import Head


class Disconnected(Exception):
    """The client went away; there is nobody to answer."""


class Body:
    """The request body as it arrives; every piece counts as progress for the watchdog."""

    __slots__ = ("_receive", "_watch", "done", "received")

    def __init__(self, receive: Receive, watch: Watch) -> None:
        self._receive = receive
        self._watch = watch
        self.done = False
        self.received = 0

    async def read(self) -> bytes | None:
        """The next non-empty piece, or None once the body is complete."""
        while not self.done:
            message = await self._receive()
            watch = self._watch
            watch.touch()
            if message["type"] == "http.disconnect":
                raise Disconnected
            self.done = not message.get("more_body", False)
            watch.receiving = not self.done
            piece: bytes = message.get("body", b"")
            if piece:
                self.received = watch.received = self.received + len(piece)
                return piece
        return None


_OCTETS = (b"content-type", b"application/octet-stream")
_DUPLEX = (b"sealflow-duplex", b"1")


class Reply:
    """The response: started with the first bytes, so an error before them is still an error."""

    __slots__ = ("_log", "_send", "_watch", "duplex", "headers", "length", "sent", "started")

    def __init__(self, send: Send, log: AccessRecord, watch: Watch) -> None:
        self._send = send
        self._log = log
        self._watch = watch
        self.length: int | None = None
        self.duplex = False  # answered while the body arrives: say so (Sealflow-Duplex: 1)
        # Sent with the answer: its content type (octets unless changed), then any others.
        self.headers: list[tuple[bytes, bytes]] = [_OCTETS]
        self.started = False
        self.sent = 0

    async def write(self, data: bytes | bytearray, more: bool = True) -> None:
        if not data and more:
            return  # nothing authenticated to send yet: keep a clean error possible
        if not self.started:
            headers = list(self.headers)
            if self.length is not None:
                headers.append((b"content-length", b"%d" % self.length))
            if self.duplex:
                headers.append(_DUPLEX)
                self._log.duplex = True
            await self._send({"type": "http.response.start", "status": 200, "headers": headers})
            self.started = True
            self._log.status = 200
        message: Any = {"type": "http.response.body", "body": data, "more_body": more}
        # A client that stops reading stalls this send: the watchdog ends the request.
        await self._send(message)
        self._watch.touch()
        self.sent += len(data)

    async def whole(self, data: bytes) -> None:
        """The whole response at once, its length known: what a small request sends."""
        self.started = True
        self._log.status = 200
        headers = [*self.headers, (b"content-length", b"%d" % len(data))]
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        await self._send({"type": "http.response.body", "body": data, "more_body": False})
        self.sent = len(data)

    async def fail(self, error: ApiError, close: bool) -> bool:
        """Answer with the error if nothing was sent yet; else leave the response unfinished.

        Returns False when the response had started: the caller then returns
        without completing it and the server closes the connection, so the
        client sees a truncated body, never a clean end.
        """
        if self.started:
            return False
        self._log.status = error.status
        await send_error(self._send, error, close)
        return True


async def refuse(error: ApiError, scope: Scope, send: Send, log: AccessRecord) -> None:
    """Answer a request refused from its head, leaving its body (if any) unread.

    Callers pass the error straight from their ``except`` clause: a local holding it would
    hold its traceback, whose frames hold the caller's, a cycle per refused request.
    """
    log.status, log.error = error.status, error.code
    await send_error(send, error, close=has_body(scope))


def drop_connection(scope: Scope) -> None:
    """Abort a stalled reply's connection at once: closing it would wait for a client that
    does not read to take what is queued (never), holding the connection and its buffers.

    The transport's abort comes from the protocol (server/http); elsewhere this does nothing.
    """
    abort = scope.get("sealflow.abort")
    if abort is not None:
        abort()


def stream_error(scope: Scope, code: str) -> None:
    """Name the error that leaves a started response unfinished: the protocol (server/http)
    then ends a chunked body with a signal naming it before the close; elsewhere nothing."""
    name = scope.get("sealflow.stream_error")
    if name is not None:
        name(code)


def has_body(scope: Scope) -> bool:
    """Whether the request announced a body (Content-Length above 0, or chunked), as its one
    ``Head`` says (the front door puts it in every scope)."""
    head: Head = scope["sealflow.head"]
    return head.has_body


async def send_error(send: Send, error: ApiError, close: bool) -> None:
    """A JSON error; ``close`` ends the connection after it, leaving the rest of the body unread.

    Without ``close`` the server reads (and discards) what is left of the body
    and keeps the connection. Closing with unread data makes the kernel send a
    reset, which can destroy the answer before the client reads it: close only
    when reading on would cost more (unauthenticated, too large, too slow).
    """
    body, headers = error.rendered()
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
