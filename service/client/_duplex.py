"""One HTTP/1.1 exchange over a ``Connection``, full duplex: the body goes up while the
response comes down.

The service may answer a stream request while its body is still arriving (it does so when
asked with ``Sealflow-Duplex: 1``, and servers before that header always did), so a client
that sends the whole body before reading (httpx, requests) fills the socket buffers both ways
and stalls after a few MiB. Here the upload is a task of its own and the response is read as
it comes, whichever way the server answers: a request-then-response answer simply arrives
after the upload ended. A small body (``_plan``) is written with the head instead, in one
write and without a task: the service reads all of it before it answers.

The plan says which bodies carry ``Expect: 100-continue`` (large ones and those of unknown
length), so that a refusal (a bad token, an unknown key) costs no upload. Chunked bodies are
framed here; the response goes through ``_framing`` (no copies).

A regular file on a plain TCP connection goes by ``os.sendfile``, 1 MiB per call, on the event
loop: the file's bytes are never copied into Python and out again, a fifth to a quarter of the
client's CPU time for a large file (docs/BENCHMARKS.md, "Client"). Like the output writes,
the file's disk reads then happen on the loop: a local disk is assumed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from ._connection import Connection
from ._errors import (
    ERROR_BODY_MAX,
    ERRORS,
    InputChanged,
    SealflowError,
    TransportError,
    error_from_reply,
)
from ._framing import FramingError, Response, StreamError
from ._plan import Plan
from ._source import CHUNK, Source

EXPECT_WAIT = 1.0  # as curl: a server that ignores Expect still gets the body

Progress = Callable[[int, int], None]


class Exchange:
    """Send one request and read its response; ``async with`` releases everything.

    ``start()`` sends the head and returns the response status; then either ``body()``
    (a 2xx) followed by ``finish()``, or ``error()``. Afterwards ``upload_done`` tells
    whether the whole body went out, ``reusable`` whether the connection can serve again.
    """

    def __init__(
        self, conn: Connection, head: bytes, plan: Plan, source: Source, progress: Progress | None
    ) -> None:
        self.conn, self.source, self._progress = conn, source, progress
        self.sent = self.received = 0
        self.upload_done = False  # all of the body was handed to the transport
        self.responded = False  # a response head arrived
        self.status = 0
        self.reusable = False
        self.upload_error: BaseException | None = None  # the input failed
        self._head = head
        self._small = source.in_memory() if plan.small else None
        self._expect = plan.expect
        self._response = Response()
        self._pending: list[memoryview] = []  # body bytes that came with the head
        # The server wants the body, or has answered already (an upload waits for it).
        self._go = asyncio.Event() if self._small is None else None
        self._stopped = False  # the server refused: send no more
        self._upload: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Exchange:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._upload is not None and not self._upload.done():
            self._upload.cancel()
            with contextlib.suppress(BaseException):
                await self._upload
        await self.source.aclose()

    async def start(self) -> int:
        """Send the head (a small body with it, else start the upload), and wait for the
        response's status."""
        self.conn.start_watchdog()
        try:
            if self._small is None:
                self.conn.write(self._head)
            else:
                # One write: the service gets the request in one piece (a copy of at most
                # SMALL_MAX bytes, against a second send and a second wake-up of the server).
                self.conn.write(self._head + self._small)
        except OSError as e:
            raise self._lost("before a response", e) from None
        if self._small is None:
            self._upload = asyncio.create_task(self._send())
        else:
            self._count(len(self._small))
        response = self._response
        while response.head is None:
            data = await self._receive()
            try:
                if not data:
                    response.end()
                self._pending = response.feed(data)
            except FramingError as e:
                raise self._lost("before a response", e) from None
            if response.continued and self._go is not None:
                self._go.set()  # 100 Continue (and any other 1xx: nothing to do)
        self.responded = True
        self.status = response.head.status
        if self._go is not None:
            self._go.set()
        if not 200 <= self.status < 300:
            self._stop()
        return self.status

    async def body(self) -> AsyncIterator[memoryview]:
        """The response body as it arrives; TransportError if it is cut off."""
        response = self._response
        pieces, self._pending = self._pending, []
        while True:
            for piece in pieces:
                self.received += len(piece)
                if self._progress is not None:
                    self._progress(self.sent, self.received)
                yield piece
            if response.done:
                break
            data = await self._receive()
            try:
                if not data:
                    response.end()
                    break
                pieces = response.feed(data)
            except FramingError as e:
                raise self._lost(f"after {self.received} bytes of output", e) from None

    async def finish(self) -> None:
        """After the body: the upload must have ended too (then the connection may serve again)."""
        if not self.upload_done:
            self._stop()
            if self.upload_error is not None:
                raise self.upload_error
            raise TransportError("the server answered before it had read the whole input")
        if self._upload is not None:
            await self._upload
        if self.upload_error is not None:  # found after the last byte went (the file grew)
            raise self.upload_error
        self.reusable = self._keep_alive()

    async def error(self) -> SealflowError:
        """The exception for a non-2xx answer, from its body (read up to 64 KiB)."""
        got = bytearray()
        self._progress = None  # an error body is not output
        with contextlib.suppress(TransportError):  # a cut-off error body is still an answer
            async for piece in self.body():
                got += piece[: ERROR_BODY_MAX - len(got)]
                if len(got) >= ERROR_BODY_MAX:
                    break
        if self.upload_error is not None:
            raise self.upload_error
        # Errors found in the body keep the connection (the server read all of it).
        self.reusable = self.upload_done and self._response.done and self._keep_alive()
        return error_from_reply(self.status, bytes(got))

    def _keep_alive(self) -> bool:
        """The response allows another exchange, and nothing unasked for came after it."""
        head = self._response.head
        return head is not None and head.keep_alive and not self._response.extra

    async def _receive(self) -> bytes:
        try:
            return await self.conn.receive()
        except OSError as e:
            raise self._lost(f"after {self.received} bytes of output", e) from None

    def _stop(self) -> None:
        self._stopped = True
        if self._upload is not None and not self._upload.done():
            self._upload.cancel()

    def _lost(self, when: str, e: BaseException) -> BaseException:
        """The exception for a connection that ended: the input's own failure if that was
        the cause (the upload aborted the connection), else a TransportError."""
        if self.upload_error is not None:
            return self.upload_error
        if isinstance(e, StreamError):  # the service said why it cut the response off
            message = f"{e.code.replace('_', ' ')} {when}"
            return ERRORS.get(e.code, SealflowError)(message, status=None, code=e.code)
        if self.conn.stalled:
            return TransportError(f"no progress for {self.conn.timeout:g} s {when}")
        return TransportError(f"connection lost {when}: {e or type(e).__name__}")

    async def _send(self) -> None:
        """The upload: waits for 100 Continue (at most EXPECT_WAIT), then sends the body."""
        assert self._go is not None
        if self._expect:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._go.wait(), EXPECT_WAIT)
        if self._stopped:
            return
        conn, chunked = self.conn, self.source.length is None
        try:
            await self._sendfile()
        except OSError as e:
            if isinstance(e, ConnectionError) or not conn.open:
                return  # the connection is gone: the response side reports why
            self.upload_error = e  # the file's (sendfile does both ends): as a read error
            conn.abort()
            return
        except Exception as e:  # the input changed size, or the caller's on_progress failed
            self.upload_error = e
            conn.abort()
            return
        chunks = self.source.chunks()
        try:
            while not self._stopped:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except Exception as e:  # the input failed: end the exchange, which reports it
                    self.upload_error = e
                    conn.abort()
                    return
                if self._stopped:
                    return
                if chunked:  # the chunk between its size line and CRLF, not copied
                    conn.write(b"%x\r\n" % len(chunk))
                    conn.write(chunk)
                    conn.write(b"\r\n")
                else:
                    conn.write(chunk)
                self._count(len(chunk))
                await conn.drain()
            else:
                return
            if chunked:
                conn.write(b"0\r\n\r\n")
            self.upload_done = True
            await conn.drain()
        except OSError:
            return  # the connection is gone: the response side reports why
        except Exception as e:  # the caller's on_progress failed: report it like the input's
            self.upload_error = e
            conn.abort()
        finally:
            await chunks.aclose()

    async def _sendfile(self) -> None:
        """What it can of a regular file, by os.sendfile (no copy through Python); the rest,
        if any, goes by chunks. Plain TCP only: TLS has to encrypt every byte in Python."""
        span = self.source.sendfile_span()
        if span is None or not self.conn.can_sendfile:
            return
        file, offset = span
        length = self.source.length
        assert length is not None  # a regular file's (Content-Length, not chunked)
        try:
            while self.sent < length and not self._stopped:
                count = min(CHUNK, length - self.sent)
                try:
                    sent = await self.conn.sendfile(file, offset + self.sent, count)
                except asyncio.SendfileNotAvailableError:
                    return  # not for this file: the chunks carry on from here
                if sent < count:  # the file's end came early
                    raise InputChanged("the input changed size while it was being sent")
                self._count(sent)
        finally:
            self.source.skip(self.sent)

    def _count(self, n: int) -> None:
        """n more body bytes went out."""
        self.sent += n
        # With Content-Length the end adds no bytes: the server may answer in full while the
        # upload waits for the socket.
        self.upload_done = self.sent == self.source.length
        if self._progress is not None:
            self._progress(self.sent, self.received)
