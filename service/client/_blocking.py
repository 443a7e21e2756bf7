"""``Client``'s small calls in the caller's own thread: the request written in one piece on a
blocking socket, the response read back, on connections kept alive between calls.

A small call (a body in memory of at most SMALL_MAX bytes, ``_plan``) needs none of the event
loop's machinery: the service reads all of it before it answers, so there is nothing to read
while sending. Handed to the client's event-loop thread, each such call cost two thread
wake-ups and a task and futures of its own (docs/BENCHMARKS.md, "Client: small calls"); here
it is a ``sendall`` and a ``recv`` or two. Threads calling at once each take a connection from
the pool (``list.pop`` and ``append``, no lock held across a call). These connections are
apart from the event loop's: a socket belongs to one of them.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator

from . import _proxy
from ._connection import MAX_IDLE
from ._errors import ERROR_BODY_MAX, SealflowError, TransportError, error_from_reply
from ._framing import FramingError, Response
from ._origin import Endpoint
from ._plan import Plan
from ._sink import Sink

# Below glibc's mmap threshold: a recv of 256 KiB (asyncio's) cost a 256 KiB allocation a call.
_RECV = 64 << 10

Progress = Callable[[int, int], None]


class Connection:
    __slots__ = ("_poll", "reused", "sock", "tls")

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.reused = sock, False
        self.tls = isinstance(sock, ssl.SSLSocket)
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    @property
    def usable(self) -> bool:
        """Nothing came from the server since the last exchange (not even its close: a
        kept-alive connection the server timed out is readable)."""
        if self._poll.poll(0):
            return False
        return not (self.tls and self.sock.pending())  # type: ignore[attr-defined]


class Pool:
    """The idle connections of one client's threads."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._idle: list[Connection] = []
        self._count = threading.Lock()
        self.opened = 0

    def acquire(self, fresh: bool) -> Connection:
        while not fresh:
            try:
                conn = self._idle.pop()
            except IndexError:
                break
            if conn.usable:
                conn.reused = True
                return conn
            conn.sock.close()
        return self._open()

    def release(self, conn: Connection, reusable: bool) -> None:
        if reusable and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.sock.close()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.sock.close()

    def _open(self) -> Connection:
        endpoint, origin, proxy = self._endpoint, self._endpoint.origin, self._endpoint.proxy
        to = (origin.host, origin.port) if proxy is None else (proxy.host, proxy.port)
        try:
            sock = socket.create_connection(to, endpoint.timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if endpoint.tls is not None:
                    if proxy is not None:
                        _tunnel(sock, proxy.connect_request(origin))
                    sock = endpoint.tls.wrap_socket(sock, server_hostname=origin.host)
            except BaseException:
                sock.close()
                raise
        except OSError as e:  # ssl.SSLError and TimeoutError among them
            reason = str(e) or ("timed out" if isinstance(e, TimeoutError) else type(e).__name__)
            raise TransportError(f"cannot connect to {origin.url}: {reason}") from None
        with self._count:
            self.opened += 1
        return Connection(sock)


def _tunnel(sock: socket.socket, request: bytes) -> None:
    """Ask the proxy for a tunnel (``CONNECT``) and read its answer, nothing beyond it."""
    sock.sendall(request)
    answer = b""
    while True:
        piece = sock.recv(1)  # byte by byte: what follows the answer is the service's TLS
        if not piece:
            raise TransportError("the proxy closed the connection instead of a tunnel")
        answer += piece
        if answer.endswith(b"\n") and _proxy.connect_answer(answer) is not None:
            return


class Exchange:
    """One small exchange: ``start()`` sends the request and returns the response status;
    then ``body()`` (a 2xx) and ``finish()``, or ``error()``. As ``_duplex.Exchange``."""

    def __init__(
        self, conn: Connection, request: bytes, length: int, timeout: float | None,
        progress: Progress | None,
    ) -> None:  # fmt: skip
        self.conn, self._request, self._length = conn, request, length
        self._timeout, self._progress = timeout, progress
        self.sent = self.received = 0
        self.upload_done = False
        self.responded = False
        self.reusable = False
        self._response = Response()
        self._pending: list[memoryview] = []
        self._request_sent = False

    def send(self) -> None:
        """Write the request (``start`` does, unless this was called first: a caller with
        several exchanges in flight sends the next before reading the last's answer)."""
        self._request_sent = True
        try:
            self.conn.sock.sendall(self._request)
        except TimeoutError as e:
            raise self._lost("before a response", e) from None
        except OSError:
            pass  # the server may have answered and closed already: its answer is read next
        else:
            self.sent, self.upload_done = self._length, True
            if self._progress is not None:
                self._progress(self.sent, self.received)

    def start(self) -> int:
        if not self._request_sent:
            self.send()
        response = self._response
        while response.head is None:
            data = self._receive("before a response")
            try:
                if not data:
                    response.end()
                self._pending = response.feed(data)
            except FramingError as e:
                raise self._lost("before a response", e) from None
        self.responded = True
        return response.head.status

    def body(self) -> Iterator[memoryview]:
        response = self._response
        pieces, self._pending = self._pending, []
        while True:
            for piece in pieces:
                self.received += len(piece)
                if self._progress is not None:
                    self._progress(self.sent, self.received)
                yield piece
            if response.done:
                return
            when = f"after {self.received} bytes of output"
            data = self._receive(when)
            try:
                if not data:
                    response.end()
                    return
                pieces = response.feed(data)
            except FramingError as e:
                raise self._lost(when, e) from None

    def finish(self) -> None:
        if not self.upload_done:
            raise TransportError("the server answered before it had read the whole input")
        self.reusable = self._keep_alive()

    def error(self) -> SealflowError:
        got = bytearray()
        self._progress = None  # an error body is not output
        try:
            for piece in self.body():
                got += piece[: ERROR_BODY_MAX - len(got)]
                if len(got) >= ERROR_BODY_MAX:
                    break
        except TransportError:
            pass  # a cut-off error body is still an answer
        self.reusable = self.upload_done and self._response.done and self._keep_alive()
        assert self._response.head is not None
        return error_from_reply(self._response.head.status, bytes(got))

    def _keep_alive(self) -> bool:
        head = self._response.head
        return head is not None and head.keep_alive and not self._response.extra

    def _receive(self, when: str) -> bytes:
        try:
            return self.conn.sock.recv(_RECV)
        except OSError as e:
            raise self._lost(when, e) from None

    def _lost(self, when: str, e: BaseException) -> TransportError:
        if isinstance(e, TimeoutError):
            return TransportError(f"no progress for {self._timeout:g} s {when}")
        return TransportError(f"connection lost {when}: {e or type(e).__name__}")


def transfer(
    pool: Pool, endpoint: Endpoint, plan: Plan, body: memoryview, sink: Sink,
    progress: Progress | None,
) -> None:  # fmt: skip
    """One small call, with the retries of ``Plan.retry`` (``AsyncClient._transfer``'s)."""
    while True:
        conn = pool.acquire(plan.fresh)
        request = plan.head(endpoint.target, endpoint.prelude) + body
        ex = Exchange(conn, request, len(body), endpoint.timeout, progress)
        try:
            status = ex.start()
            if not 200 <= status < 300:
                raise ex.error()
            for piece in ex.body():
                sink.add(piece)
            ex.finish()
            return
        except SealflowError as e:
            stale = isinstance(e, TransportError) and conn.reused and not ex.responded
            retry = plan.retry(e, stale=stale, cut_short=not ex.upload_done)
            if retry is None or not retry.small or not sink.reset():
                raise
            plan = retry
        finally:
            pool.release(conn, ex.reusable)
