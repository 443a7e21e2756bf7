"""``sealflow encrypt`` / ``sealflow decrypt``: stream stdin or a file through the service.

The exchange is full duplex: the response is read while the request body is still being
sent. The service answers a stream request as the body arrives, so a client that sends the
whole body before reading (httpx/httpcore, requests) fills the socket buffers both ways and
deadlocks after a few MiB. Hence asyncio + h11, which allows a response to start before the
request has ended, instead of httpx.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import errno
import fcntl
import json
import os
import re
import ssl
import stat
import sys
import tempfile
import threading
import types
from collections.abc import Callable
from typing import IO, Any
from urllib.parse import quote, urlsplit

import h11
from tqdm import tqdm  # type: ignore[import-untyped]

_CHUNK = 256 * 1024
_CONNECT_TIMEOUT = 10.0
_EXPECT_WAIT = 1.0  # as curl: a server that ignores Expect still gets the body
_BAR_DELAY = 0.5  # short transfers get no bar
_DEFAULT_URL = "http://127.0.0.1:8080"


# Even a disabled tqdm starts tqdm's monitor thread: without a terminal, use no tqdm at all.
_NO_BAR = types.SimpleNamespace(update=lambda n: None, close=lambda: None)


class _Failure(Exception):
    """A failure already worded for the user; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


async def _read_in_daemon(read: Callable[[int], bytes]) -> bytes:
    """read(_CHUNK) in a daemon thread. A read blocked on a stalled pipe or a terminal must
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
            result: bytes | Exception = read(_CHUNK)
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


async def _exchange(
    url: str, target: str, headers: list[tuple[str, str]], src: IO[bytes], out: _Output, bar: Any
) -> None:
    parts = urlsplit(url)
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    port = parts.port or (443 if tls else 80)
    try:
        connect = asyncio.open_connection(parts.hostname, port, ssl=tls, limit=_CHUNK)
        reader, writer = await asyncio.wait_for(connect, _CONNECT_TIMEOUT)
    except (OSError, TimeoutError) as e:
        raise _Failure(f"cannot connect to {url}: {e or 'timed out'}") from None
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
            raise _Failure(f"cannot read the input: {e}") from None

    async def upload() -> bool:
        """Send the body while the response arrives; True once all of it went out."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(go.wait(), _EXPECT_WAIT)
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
                raise _Failure("the input changed size while it was being sent") from None
            raise
        return False

    sending = asyncio.create_task(upload())
    try:
        while not isinstance(event := conn.next_event(), h11.EndOfMessage):
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(_CHUNK))
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
            raise _Failure(_server_error(status, bytes(error_body)))
        if not await sending:
            raise _Failure("the server answered before it had read the whole input")
        done = True
    except (OSError, h11.ProtocolError) as e:
        if sending.done() and not sending.cancelled() and sending.exception():
            await sending  # our own failure (the input) closed the connection: report it
        if failed:
            raise _Failure(_server_error(status, bytes(error_body))) from None
        # h11 enforces Content-Length and chunked framing, so a stream the server aborted
        # (a later chunk failed to authenticate) lands here, never as a clean end.
        when = f"after {received} bytes of output" if status else "before a response"
        raise _Failure(f"connection lost {when}: {e or type(e).__name__}") from None
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


class _Output:
    """stdout, or a temporary file beside --output that replaces it only on success."""

    def __init__(self, path: str | None) -> None:
        self.path, self.tmp, self.rewind = path, "", -1
        if path is None or path == "-":
            self.f: IO[bytes] = sys.stdout.buffer
            with contextlib.suppress(OSError, ValueError):  # ValueError: no fd (tests)
                fd = self.f.fileno()
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode):
                    # On failure truncate back to where our output starts: `>>` appends.
                    append = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
                    self.rewind = st.st_size if append else self.f.tell()
            return
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        folder, name = os.path.split(os.path.abspath(path))
        fd, self.tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
        self.f = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        try:
            self.f.write(data)
        except OSError as e:
            raise _Failure(f"cannot write the output: {e}") from None

    def commit(self) -> None:
        try:
            self.f.flush()
            if self.path and self.tmp:
                os.fsync(self.f.fileno())
                self.f.close()
                os.replace(self.tmp, self.path)
        except OSError as e:
            raise _Failure(f"cannot write the output: {e}") from None

    def discard(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.tmp:
                self.f.close()
                os.unlink(self.tmp)
            elif self.rewind >= 0:
                self.f.flush()
                self.f.seek(self.rewind)
                self.f.truncate()


def _settings(args: argparse.Namespace) -> tuple[str, list[tuple[str, str]]]:
    """The URL and the request headers, or a usage error."""
    token = os.environ.get("SEALFLOW_TOKEN", "").strip()
    if not token:
        raise _Failure("SEALFLOW_TOKEN is not set (export a token with the needed scope)", 2)
    # h11 would quote a bad header value, the token, in its error: refuse it first.
    if not re.fullmatch(r"[\x21-\x7e]+", token):
        raise _Failure("SEALFLOW_TOKEN has characters not allowed in an HTTP header", 2)
    url = (args.url or os.environ.get("SEALFLOW_URL") or _DEFAULT_URL).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise _Failure(f"the URL must look like http(s)://host[:port][/prefix], not {url!r}", 2)
    headers = [
        ("Authorization", f"Bearer {token}"),
        ("Content-Type", "application/octet-stream"),
        # Lets the server refuse (401, 403, 404) before a large body is sent for nothing.
        ("Expect", "100-continue"),
    ]
    if args.aad is not None:
        # surrogateescape gives back the exact argv bytes when they are not UTF-8.
        aad = args.aad.encode("utf-8", "surrogateescape")
        headers.append(("X-AAD", base64.b64encode(aad).decode()))
    return url, headers


def _run(args: argparse.Namespace, command: str, target: str) -> int:
    src, out, ok = sys.stdin.buffer, None, False
    bar: Any = _NO_BAR
    try:
        url, headers = _settings(args)
        try:
            if args.input not in (None, "-"):
                src = open(args.input, "rb")  # noqa: SIM115 (closed in the finally below)
            out = _Output(args.output)
        except OSError as e:
            raise _Failure(f"cannot open {e.filename!r}: {e.strerror}", 2) from None
        size = None
        with contextlib.suppress(OSError, ValueError):  # ValueError: no fd (a test's BytesIO)
            st = os.fstat(src.fileno())
            # Zero may be a /proc file that does have content: those go chunked.
            size = (st.st_size - src.tell()) or None if stat.S_ISREG(st.st_mode) else None
        headers.append(("Content-Length", str(size)) if size else ("Transfer-Encoding", "chunked"))
        if sys.stderr.isatty():
            bar = tqdm(total=size, unit="B", unit_scale=True, unit_divisor=1024, delay=_BAR_DELAY)
        asyncio.run(_exchange(url, urlsplit(url).path + target, headers, src, out, bar))
        out.commit()
        ok = True
        return 0
    except (_Failure, KeyboardInterrupt) as e:
        bar.close()
        code = e.code if isinstance(e, _Failure) else 130
        what = (
            "" if code == 2 else f"{command} interrupted" if code == 130 else f"{command} failed: "
        )
        print(f"sealflow: {what}{e}", file=sys.stderr)
        return code
    finally:
        bar.close()
        if out is not None and not ok:
            out.discard()
        if src is not sys.stdin.buffer:
            src.close()


def _encrypt(args: argparse.Namespace) -> int:
    return _run(args, "encrypt", f"/v1/keys/{quote(args.key, safe='')}/encrypt?mode={args.mode}")


def _decrypt(args: argparse.Namespace) -> int:
    key = f"/keys/{quote(args.key, safe='')}" if args.key else ""
    return _run(args, "decrypt", f"/v1{key}/decrypt")


def add_client_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``encrypt`` and ``decrypt`` (token from SEALFLOW_TOKEN) on the subparsers."""
    for name, func in (("encrypt", _encrypt), ("decrypt", _decrypt)):
        p = commands.add_parser(
            name,
            help=f"{name} stdin or --input through the service to stdout or --output",
            description=f"{name.capitalize()} through the service; the token is SEALFLOW_TOKEN.",
        )
        if name == "encrypt":
            p.add_argument("--key", required=True, metavar="NAME", help="key to seal under")
            p.add_argument("--mode", choices=("stream", "single"), default="stream")
        else:
            p.add_argument("--key", metavar="NAME", help="require the envelope to use this key")
        p.add_argument("--aad", metavar="TEXT", help="additional authenticated data (UTF-8)")
        p.add_argument("--url", help=f"service URL (default: $SEALFLOW_URL or {_DEFAULT_URL})")
        p.add_argument("-i", "--input", metavar="FILE", help="read FILE instead of stdin")
        p.add_argument("-o", "--output", metavar="FILE", help="write FILE, only on success")
        p.set_defaults(func=func)
