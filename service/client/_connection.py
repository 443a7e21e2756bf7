"""HTTP/1.1 connections to one service: opening them (TCP or TLS), moving bytes with flow
control both ways, and keeping idle ones for the next call.

A ``Connection`` is an ``asyncio.Protocol`` rather than a stream pair: the pieces the socket
delivers go to the response reader as they are (``asyncio.StreamReader`` would copy each into
its buffer and out again). One exchange at a time uses a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import deque
from typing import Any, cast

from ._errors import TransportError
from ._origin import Origin
from ._proxy import Proxy, connect_answer

# Writes wait until the transport has handed everything to the kernel: what the socket does not
# take at once, Python 3.11's transport copies into a bytearray and shifts at every send
# (docs/SERVICE.md, "Client library"). Reading pauses above READ_HIGH unread bytes.
WRITE_HIGH = 0
READ_HIGH = 4 << 20
# Idle connections kept per client: as many as an application has calls at once, or each call
# beyond them opens a connection of its own.
MAX_IDLE = 64
# Connections in use at once per client, by default: httpx's default limit.
MAX_CONNECTIONS = 100


class Connection(asyncio.Protocol):
    """One connection: received pieces queued for the reader, writes with back-pressure."""

    def __init__(self, timeout: float | None) -> None:
        self.transport: asyncio.Transport | None = None
        self._socket: Any = None  # asyncio's TransportSocket, when sendfile can be used
        self.reused = False
        self.timeout = timeout
        self.stalled = False  # closed by the watchdog: nothing moved for `timeout` seconds
        self._loop = asyncio.get_running_loop()
        self._pieces: deque[bytes] = deque()
        self._buffered = 0
        self._eof = False
        self._closed: Exception | None = None
        self._reading_paused = False
        self._wakeup: asyncio.Future[None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._last_progress = self._loop.time()
        self._watchdog: asyncio.TimerHandle | None = None
        self._watching = False
        self.lost: asyncio.Future[None] = self._loop.create_future()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.set_write_buffer_limits(high=WRITE_HIGH)
        # sendfile: plain TCP (TLS must go through the transport) on asyncio's own loops
        # (uvloop's sock_sendfile is the abstract one, NotImplementedError).
        tls = transport.get_extra_info("sslcontext") is not None
        if isinstance(self._loop, asyncio.BaseEventLoop) and not tls:
            self._socket = transport.get_extra_info("socket")

    def data_received(self, data: bytes) -> None:
        self._last_progress = self._loop.time()
        self._pieces.append(data)
        self._buffered += len(data)
        if self._buffered > READ_HIGH and not self._reading_paused and self.transport:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self._eof = True
        self._wake()
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._closed = exc or ConnectionError("the connection was closed")
        self._writable.set()  # a waiting writer finds out
        self._wake()
        self._cancel_watchdog()
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._last_progress = self._loop.time()
        self._writable.set()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    # Used by an exchange

    @property
    def open(self) -> bool:
        return self._closed is None

    @property
    def usable(self) -> bool:
        """Idle, open, and nothing came from the server since the last exchange."""
        return self._closed is None and not self._eof and not self._pieces

    async def receive(self) -> bytes:
        """The next piece from the server; b"" once it has closed its side."""
        while not self._pieces:
            if self._eof:
                return b""
            self._wakeup = self._loop.create_future()
            try:
                await self._wakeup
            finally:
                self._wakeup = None
        piece = self._pieces.popleft()
        self._buffered -= len(piece)
        if self._reading_paused and self._buffered <= READ_HIGH // 2 and self.transport:
            self._reading_paused = False
            self.transport.resume_reading()
        return piece

    def unreceive(self, data: bytes) -> None:
        """Put bytes back in front of the next ``receive``."""
        if data:
            self._pieces.appendleft(data)
            self._buffered += len(data)

    def write(self, data: bytes | memoryview) -> None:
        if self._closed is not None or self.transport is None:
            raise ConnectionError("the connection was closed")
        self.transport.write(data)
        self._last_progress = self._loop.time()

    @property
    def can_sendfile(self) -> bool:
        return self._socket is not None

    async def sendfile(self, file: Any, offset: int, count: int) -> int:
        """Send ``count`` bytes of ``file`` from ``offset`` with ``os.sendfile`` (page cache to
        socket, no copy through Python); returns the bytes sent, fewer at the file's end.
        Only after ``drain()``, so nothing of the transport's is queued ahead.
        ``asyncio.SendfileNotAvailableError`` when it cannot be sent this way (TLS, uvloop, a
        file without ``sendfile`` support)."""
        if self._socket is None:
            raise asyncio.SendfileNotAvailableError("not a plain TCP connection on asyncio")
        if self._closed is not None:
            raise ConnectionError("the connection was closed")
        # The transport owns the socket's descriptor and asyncio lets no one else watch it
        # for writing; a duplicate of it, the same socket, can be watched.
        sock = self._socket.dup()
        try:
            sent: int = await self._loop.sock_sendfile(sock, file, offset, count, fallback=False)
        finally:
            self._loop.remove_writer(sock.fileno())  # when cancelled, asyncio would do it later
            sock.close()
        self._last_progress = self._loop.time()
        return sent

    async def drain(self) -> None:
        """Wait while the transport holds more than WRITE_HIGH unsent bytes.

        The bytes the transport holds decide, not only the last pause_writing: asyncio's TLS
        transport (and uvloop's, a port of it) pauses when its buffer is at or above the
        high-water mark, so with a mark of 0 it pauses after a write that went out whole,
        and only looks again at its next event: another write, bytes from the server, or the
        socket below draining. An upload that then waited for resume_writing waited for the
        server, which was waiting for the rest of the body (a pipe's small chunks in full
        duplex, every body over 64 KiB request-then-response). When bytes are held, that
        transport is paused as well (it pauses at 0 or more), and resumes once they are out.
        """
        transport = self.transport
        held = 0 if transport is None or self._closed else transport.get_write_buffer_size()
        if held > WRITE_HIGH and not self._writable.is_set():
            await self._writable.wait()
        if self._closed is not None:
            raise ConnectionError("the connection was closed")

    def start_watchdog(self) -> None:
        """Close the connection if nothing is sent or received for ``timeout`` seconds, until
        ``stop_watchdog``. The timer outlives an exchange (idle, the connection is not
        watched): back-to-back exchanges then arm it once per ``timeout``, not once each."""
        self._last_progress = self._loop.time()
        self._watching = True
        if self.timeout is not None and self._watchdog is None:
            self._watchdog = self._loop.call_later(self.timeout, self._check)

    def stop_watchdog(self) -> None:
        self._watching = False

    def _check(self) -> None:
        assert self.timeout is not None
        self._watchdog = None
        if not self._watching:
            return  # idle in the pool: the next exchange starts it again
        idle = self._loop.time() - self._last_progress
        if idle >= self.timeout:
            self.stalled = True
            self.abort()
        else:
            self._watchdog = self._loop.call_later(self.timeout - idle, self._check)

    def _cancel_watchdog(self) -> None:
        self._watching = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    async def tunnel(self, request: bytes, tls: ssl.SSLContext, server_hostname: str) -> None:
        """Through a proxy: ask it for a tunnel (``CONNECT``), then speak TLS inside it."""
        self.write(request)
        answer = b""
        while (size := connect_answer(answer)) is None:
            piece = await self.receive()
            if not piece:
                raise TransportError("the proxy closed the connection instead of a tunnel")
            answer += piece
        if answer[size:]:
            raise TransportError("the proxy sent bytes before the tunnel's TLS")
        assert self.transport is not None
        transport = await self._loop.start_tls(
            self.transport, self, tls, server_hostname=server_hostname
        )
        if transport is None:
            raise TransportError("the connection closed while TLS started")
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        self._socket = None  # TLS: no sendfile

    def close(self) -> None:
        """Close after the unsent bytes went out (TLS: with close_notify)."""
        self._cancel_watchdog()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close now, dropping unsent bytes: after a failure, they could hold close() up."""
        self._cancel_watchdog()
        if self.transport is not None:
            self.transport.abort()


class Pool:
    """Open connections to one origin, and the idle ones kept for the next exchange.
    ``limit``: the most connections in use at once (None: no limit); an exchange beyond it
    waits for one to be released."""

    def __init__(
        self,
        origin: Origin,
        tls: ssl.SSLContext | None,
        timeout: float | None,
        limit: int | None = None,
        proxy: Proxy | None = None,
    ) -> None:
        self.origin, self._tls, self._timeout, self._proxy = origin, tls, timeout, proxy
        self._idle: list[Connection] = []
        self._slots = None if limit is None else asyncio.Semaphore(limit)
        self.opened = 0  # connections opened so far

    async def acquire(self, fresh: bool = False) -> Connection:
        if self._slots is not None:
            await self._slots.acquire()
        try:
            while self._idle and not fresh:
                conn = self._idle.pop()
                if conn.usable:
                    conn.reused = True
                    return conn
                conn.abort()
            return await self._open()
        except BaseException:
            if self._slots is not None:
                self._slots.release()
            raise

    def release(self, conn: Connection, reusable: bool) -> None:
        """Give back what ``acquire`` gave (once per ``acquire``)."""
        if self._slots is not None:
            self._slots.release()
        conn.stop_watchdog()
        if reusable and conn.usable and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        elif reusable:
            conn.close()
        else:
            conn.abort()

    async def aclose(self) -> None:
        """Close the idle connections: TLS ones say close_notify first (up to a second)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        if idle:
            await asyncio.wait([conn.lost for conn in idle], timeout=1.0)
        for conn in idle:
            conn.abort()

    async def _open(self) -> Connection:
        loop = asyncio.get_running_loop()
        origin, proxy = self.origin, self._proxy
        inside = self._tls if proxy is not None else None  # TLS in a CONNECT tunnel
        host, port = (origin.host, origin.port) if proxy is None else (proxy.host, proxy.port)
        try:
            async with asyncio.timeout(self._timeout):
                transport, conn = await loop.create_connection(
                    lambda: Connection(self._timeout),
                    host,
                    port,
                    ssl=self._tls if inside is None else None,
                    server_hostname=origin.host if self._tls and inside is None else None,
                )
                if proxy is not None and inside is not None:
                    await conn.tunnel(proxy.connect_request(origin), inside, origin.host)
        except (OSError, TimeoutError, ssl.SSLError) as e:
            reason = str(e) or ("timed out" if isinstance(e, TimeoutError) else type(e).__name__)
            raise TransportError(f"cannot connect to {origin.url}: {reason}") from None
        self.opened += 1
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn
