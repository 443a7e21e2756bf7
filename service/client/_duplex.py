"""One HTTP/1.1 exchange over a ``Connection``, full duplex: the body goes up while the
response comes down.

The service may answer a stream request while its body is still arriving (it does so when
asked with ``Sealflow-Duplex: 1``, and servers before that header always did), so a client
that sends the whole body before reading (httpx, requests) fills the socket buffers both ways
and stalls after a few MiB. Here the upload is a task of its own and the response is read as
it comes, whichever way the server answers: a request-then-response answer simply arrives
after the upload ended.

Large bodies and bodies of unknown length are sent with ``Expect: 100-continue``, so a refusal
(a bad token, an unknown key) costs no upload. h11 writes the request head and chunked bodies
and parses response heads; response bodies go through ``_framing`` (no copies).

A regular file on a plain TCP connection goes by ``os.sendfile``, 1 MiB per call, on the event
loop: the file's bytes are never copied into Python and out again, a fifth to a quarter of the
client's CPU time for a large file (docs/BENCHMARKS.md, "Client"). Like the output writes,
the file's disk reads then happen on the loop: a local disk is assumed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import cast

import h11

from ._connection import Connection
from ._errors import InputChanged, SealflowError, TransportError, error_from_reply
from ._framing import BodyReader, FramingError
from ._source import CHUNK, Source

EXPECT_WAIT = 1.0  # as curl: a server that ignores Expect still gets the body
EXPECT_ABOVE = 1 << 20  # as curl: smaller bodies go at once (Expect costs a round trip)
_ERROR_BODY_MAX = 64 << 10

Progress = Callable[[int, int], None]


class Exchange:
    """Send one request and read its response; ``async with`` releases everything.

    ``start()`` sends the head and returns the response status; then either ``body()``
    (a 2xx) followed by ``finish()``, or ``error()``. Afterwards ``upload_done`` tells
    whether the whole body went out, ``reusable`` whether the connection can serve again.
    """

    def __init__(
        self,
        conn: Connection,
        host: str,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        source: Source,
        progress: Progress | None,
    ) -> None:
        self.conn, self.source, self._progress = conn, source, progress
        self.sent = self.received = 0
        self.upload_done = False  # all of the body was handed to the transport
        self.responded = False  # a response head arrived
        self.status = 0
        self.reusable = False
        self.upload_error: BaseException | None = None  # the input failed
        self._h11 = h11.Connection(h11.CLIENT)
        length = source.length
        if length is None:
            framing = [("Transfer-Encoding", "chunked")]
        elif length or method != "GET":
            framing = [("Content-Length", str(length))]
        else:
            framing = []
        self._expect = length is None or length > EXPECT_ABOVE
        expect = [("Expect", "100-continue")] if self._expect else []
        self._head = h11.Request(
            method=method, target=target, headers=[("Host", host), *headers, *framing, *expect]
        )
        self._go = asyncio.Event()  # the server wants the body, or has answered already
        self._stopped = False  # the server refused: send no more
        self._upload: asyncio.Task[None] | None = None
        self._body: BodyReader | None = None
        self._rest = b""  # bytes received after the response head
        self._keep_alive = False

    async def __aenter__(self) -> Exchange:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._upload is not None and not self._upload.done():
            self._upload.cancel()
            with contextlib.suppress(BaseException):
                await self._upload
        await self.source.aclose()

    async def start(self) -> int:
        """Send the head, start the upload, and wait for the response's status."""
        self.conn.start_watchdog()
        try:
            self.conn.write(self._h11.send(self._head))
        except OSError as e:
            raise self._lost("before a response", e) from None
        self._upload = asyncio.create_task(self._send())
        event = await self._head_event()
        self.responded = True
        self.status = int(event.status_code)
        self._go.set()
        headers = {name: value for name, value in event.headers}
        if not 200 <= event.status_code < 300:
            self._stop()
        chunked = headers.get(b"transfer-encoding", b"").lower() == b"chunked"
        length = None
        if not chunked and b"content-length" in headers:
            length = int(headers[b"content-length"])  # h11 checked it
        self._body = BodyReader(length, chunked)
        self._rest = self._h11.trailing_data[0]
        connection = headers.get(b"connection", b"").lower()
        self._keep_alive = event.http_version == b"1.1" and b"close" not in connection
        self._keep_alive &= length is not None or chunked
        return self.status

    async def _head_event(self) -> h11.Response:
        """The response head, after any 100 Continue."""
        try:
            while True:
                event = self._h11.next_event()
                if event is h11.NEED_DATA:
                    data = await self._receive()
                    if not data:
                        raise self._lost("before a response", ConnectionError("closed"))
                    self._h11.receive_data(data)
                elif isinstance(event, h11.InformationalResponse):
                    self._go.set()  # 100 Continue (and any other 1xx: nothing to do)
                elif isinstance(event, h11.Response):
                    return event
                else:  # h11 gives nothing else before a response
                    raise self._lost("before a response", ConnectionError(repr(event)))
        except h11.RemoteProtocolError as e:
            raise self._lost("before a response", e) from None

    async def body(self) -> AsyncIterator[memoryview]:
        """The response body as it arrives; TransportError if it is cut off."""
        assert self._body is not None
        data, self._rest = self._rest, b""
        while not self._body.done:
            if not data:
                data = await self._receive()
                if not data:
                    try:
                        self._body.end()
                    except FramingError as e:
                        raise self._lost(f"after {self.received} bytes of output", e) from None
                    break
            try:
                pieces = self._body.feed(data)
            except FramingError as e:
                raise self._lost(f"after {self.received} bytes of output", e) from None
            data = b""
            for piece in pieces:
                self.received += len(piece)
                if self._progress is not None:
                    self._progress(self.sent, self.received)
                yield piece
        if self._body.extra:  # bytes nobody asked for: the connection is out of step
            self._keep_alive = False

    async def finish(self) -> None:
        """After the body: the upload must have ended too (then the connection may serve again)."""
        if not self.upload_done:
            self._stop()
            if self.upload_error is not None:
                raise self.upload_error
            raise TransportError("the server answered before it had read the whole input")
        assert self._upload is not None
        await self._upload
        if self.upload_error is not None:  # found after the last byte went (the file grew)
            raise self.upload_error
        self.reusable = self._keep_alive

    async def error(self) -> SealflowError:
        """The exception for a non-2xx answer, from its body (read up to 64 KiB)."""
        got = bytearray()
        self._progress = None  # an error body is not output
        with contextlib.suppress(TransportError):  # a cut-off error body is still an answer
            async for piece in self.body():
                got += piece[: _ERROR_BODY_MAX - len(got)]
                if len(got) >= _ERROR_BODY_MAX:
                    break
        if self.upload_error is not None:
            raise self.upload_error
        assert self._body is not None
        # Errors found in the body keep the connection (the server read all of it).
        self.reusable = self.upload_done and self._body.done and self._keep_alive
        return error_from_reply(self.status, bytes(got))

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
        if self.conn.stalled:
            return TransportError(f"no progress for {self.conn.timeout:g} s {when}")
        return TransportError(f"connection lost {when}: {e or type(e).__name__}")

    async def _send(self) -> None:
        """The upload: waits for 100 Continue (at most EXPECT_WAIT), then sends the body."""
        if self._expect:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._go.wait(), EXPECT_WAIT)
        if self._stopped:
            return
        conn, h, chunked = self.conn, self._h11, self.source.length is None
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
                if chunked:
                    # h11 passes any bytes-like object through (no copy), whatever its hint
                    # says, between the chunk's size line and CRLF.
                    data = h11.Data(data=cast(bytes, chunk))
                    for piece in h.send_with_data_passthrough(data) or ():
                        conn.write(piece)
                else:  # as it is: h11 would only count it (and sendfile went past it)
                    conn.write(chunk)
                self._count(len(chunk))
                await conn.drain()
            else:
                return
            if chunked:
                conn.write(h.send(h11.EndOfMessage()))
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
