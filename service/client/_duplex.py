"""A full-duplex HTTP/1.1 exchange with the service: ``exchange`` streams a body up while it
streams the response down.

The exchange is full duplex: the response is read while the request body is still being
sent. The service answers a stream request as the body arrives, so a client that sends the
whole body before reading (httpx/httpcore, requests) fills the socket buffers both ways and
deadlocks after a few MiB. Hence asyncio + h11, which allows a response to start before the
request has ended, instead of httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
from collections.abc import Callable
from typing import IO, Any, Protocol
from urllib.parse import urlsplit

import h11

CHUNK = 256 * 1024
_CONNECT_TIMEOUT = 10.0
EXPECT_WAIT = 1.0  # as curl: a server that ignores Expect still gets the body


class ClientError(Exception):
    """A failure already worded for the user; ``code`` is the exit status a command should use."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Sink(Protocol):
    def write(self, data: bytes) -> None: ...


async def _read_in_daemon(read: Callable[[int], bytes]) -> bytes:
    """read(CHUNK) in a daemon thread. A read blocked on a stalled pipe or a terminal must
    not hold the exit up after a failure or Ctrl-C, as asyncio's executor does (it joins)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[bytes] = loop.create_future()

    def settle(result: bytes | Exception) -> None:
        if fut.done():  # cancelled meanwhile
            return
        if isinstance(result, Exception):
            fut.set_exception(result)
        else:
            fut.set_result(result)

    def work() -> None:
        try:
            result: bytes | Exception = read(CHUNK)
        except Exception as e:
            result = e
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(settle, result)

    threading.Thread(target=work, daemon=True).start()
    return await fut


def _server_error(status: int, body: bytes) -> str:
    try:
        err = json.loads(body)["error"]
        text = f"{status} {err['code']}: {err['message']}"
    except (ValueError, KeyError, TypeError):
        text = f"HTTP {status}"
    # The server's text goes to a terminal: one line, no control characters.
    return "".join(c if c.isprintable() else " " for c in text)[:500]


async def exchange(
    url: str, target: str, headers: list[tuple[str, str]], src: IO[bytes], out: Sink, bar: Any
) -> None:
    """POST src to url + target with headers, writing the 2xx response body to out.

    ``bar.update(n)`` is called as input is sent. Any failure is a ``ClientError``.
    """
    parts = urlsplit(url)
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    port = parts.port or (443 if tls else 80)
    try:
        connect = asyncio.open_connection(parts.hostname, port, ssl=tls, limit=CHUNK)
        reader, writer = await asyncio.wait_for(connect, _CONNECT_TIMEOUT)
    except (OSError, TimeoutError) as e:
        raise ClientError(f"cannot connect to {url}: {e or 'timed out'}") from None
    conn = h11.Connection(h11.CLIENT)
    host = parts.netloc.rpartition("@")[2]
    writer.write(
        conn.send(h11.Request(method="POST", target=target, headers=[("Host", host), *headers]))
    )
    go = asyncio.Event()  # the server wants the body (100 Continue) or has answered already
    status, received, failed, done, error_body = 0, 0, False, False, bytearray()

    read_some = getattr(src, "read1", None) or src.read  # read1: pass pipe data on as it comes

    def read(size: int) -> bytes:
        try:
            return read_some(size)
        except OSError as e:
            raise ClientError(f"cannot read the input: {e}") from None

    async def upload() -> bool:
        """Send the body while the response arrives; True once all of it went out."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(go.wait(), EXPECT_WAIT)
        try:
            while not failed:
                chunk = await _read_in_daemon(read)
                writer.write(conn.send(h11.Data(data=chunk) if chunk else h11.EndOfMessage()))
                await writer.drain()
                if not chunk:
                    return True
                bar.update(len(chunk))
        except OSError:  # the connection is gone: the response loop reports why
            return False
        except Exception as e:
            writer.transport.abort()  # wakes the response loop up, which reports this
            if isinstance(e, h11.LocalProtocolError):  # more or fewer bytes than Content-Length
                raise ClientError("the input changed size while it was being sent") from None
            raise
        return False

    sending = asyncio.create_task(upload())
    try:
        while not isinstance(event := conn.next_event(), h11.EndOfMessage):
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(CHUNK))
            elif isinstance(event, h11.InformationalResponse | h11.Response):
                go.set()
                if isinstance(event, h11.Response):
                    status, failed = event.status_code, not 200 <= event.status_code < 300
            elif isinstance(event, h11.Data) and failed:
                error_body += event.data[: 65536 - len(error_body)]
            elif isinstance(event, h11.Data):
                out.write(event.data)
                received += len(event.data)
            else:
                raise ConnectionError("the server closed the connection")
        if failed:
            raise ClientError(_server_error(status, bytes(error_body)))
        if not await sending:
            raise ClientError("the server answered before it had read the whole input")
        done = True
    except (OSError, h11.ProtocolError) as e:
        if sending.done() and not sending.cancelled() and sending.exception():
            await sending  # our own failure (the input) closed the connection: report it
        if failed:
            raise ClientError(_server_error(status, bytes(error_body))) from None
        # h11 enforces Content-Length and chunked framing, so a stream the server aborted
        # (a later chunk failed to authenticate) lands here, never as a clean end.
        when = f"after {received} bytes of output" if status else "before a response"
        raise ClientError(f"connection lost {when}: {e or type(e).__name__}") from None
    finally:
        sending.cancel()
        if sending.done() and not sending.cancelled():
            sending.exception()  # already reported, or superseded by the response's failure
        # Graceful close (TLS close_notify) only after a complete exchange: after a failure,
        # unsent body bytes would hold close() up for as long as the server does not read.
        writer.close() if done else writer.transport.abort()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), _CONNECT_TIMEOUT)
        writer.transport.abort()
