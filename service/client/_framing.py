"""The response of an HTTP/1.1 exchange, sans-IO: its head, then its body by Content-Length,
chunked coding, or to the end of the connection.

``Response`` takes the bytes as they arrive and gives back the body's. Bodies are not parsed
by h11 (the client used it before) because its receive buffer copies every byte three times
(append, slice, slice again): 0.39 s of CPU for a 200 MiB body, as much as the whole transfer
takes with curl (docs/BENCHMARKS.md, "Client"). Here body bytes are passed on as slices of the
pieces the socket delivered, never copied. Heads are parsed here too: h11's events were a
good part of a small call's time (docs/BENCHMARKS.md, "Client: small calls").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_MAX_LINE = 4096  # a chunk-size line or a trailer line; the service sends a few bytes
MAX_HEAD = 16 * 1024  # a response head, as h11's default; the service's are a few hundred bytes
# A response head (RFC 9112): the status line, then fields of a token, a colon and a value, to
# the first empty line. A line folded onto the next (obs-fold) does not match: refused.
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
_VALUE = rb"[\t\x20-\x7e\x80-\xff]*"
_HEAD = re.compile(
    rb"HTTP/1\.([01]) ([1-9][0-9][0-9])(?: " + _VALUE + rb")?\r?\n"
    rb"((?:" + _TOKEN + rb":" + _VALUE + rb"\r?\n)*)\r?\n"
)
_FIELD = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(" + _VALUE + rb")\r?\n")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_DIGITS = re.compile(rb"[0-9]{1,18}")


class FramingError(Exception):
    """The response's framing is broken, or it ended before its body did."""


class StreamError(FramingError):
    """The service cut the body off for ``code`` (an error code such as ``decryption_failed``),
    named in a chunk extension of the chunk-size line it ended with (docs/API.md,
    "Transports")."""

    def __init__(self, code: str) -> None:
        super().__init__(f"the service cut the response off: {code}")
        self.code = code


_SIGNAL = re.compile(rb";[ \t]*sealflow-error=([a-z_]{1,64})[ \t]*(?:;|$)")


class BodyReader:
    """Feed the bytes that follow a response head; get the body's bytes back.

    ``length``: the Content-Length; ``chunked``: Transfer-Encoding: chunked; neither: the
    body runs to the end of the connection. ``done`` once the body ended; bytes after it
    are kept in ``extra``.
    """

    def __init__(self, length: int | None, chunked: bool) -> None:
        self.done = length == 0 and not chunked
        self.extra = b""
        self._left = length  # body bytes (or bytes of the current chunk) still to come
        self._chunked = chunked
        self._state = "size" if chunked else "data"
        self._line = bytearray()

    def feed(self, data: bytes | memoryview) -> list[memoryview]:
        """The body bytes in ``data``, as views of it."""
        view, out = memoryview(data), []
        while view and not self.done:
            if self._state == "data":
                if self._left is None:  # to the end of the connection
                    out.append(view)
                    break
                take = view[: self._left]
                out.append(take)
                self._left -= len(take)
                view = view[len(take) :]
                if self._left == 0:
                    if self._chunked:
                        self._state = "crlf"
                    else:
                        self.done = True
            else:
                view = self._header_bytes(view)
        if self.done and view:
            self.extra = bytes(view)
        return out

    def end(self) -> None:
        """The connection ended: a FramingError unless that completes the body."""
        if self._left is None and not self._chunked:
            self.done = True
        if not self.done:
            raise FramingError("the response ended before its body did")

    def _header_bytes(self, view: memoryview) -> memoryview:
        """Consume a line of the chunked coding (size, the CRLF after data, trailers)."""
        end = bytes(view[: _MAX_LINE + 1]).find(b"\n")
        if end < 0:
            self._line += view
            if len(self._line) > _MAX_LINE:
                raise FramingError("a chunked-coding line is too long")
            return view[len(view) :]
        self._line += view[: end + 1]
        line, self._line = bytes(self._line).rstrip(b"\r\n"), bytearray()
        if len(line) > _MAX_LINE:
            raise FramingError("a chunked-coding line is too long")
        if self._state == "size":
            size, _, extensions = line.partition(b";")
            size = size.strip(b" \t")
            if extensions and (signal := _SIGNAL.search(b";" + extensions)):
                raise StreamError(signal[1].decode("ascii"))
            if not _HEX.fullmatch(size):
                raise FramingError("a chunk size is not hexadecimal")
            self._left = int(size, 16)
            self._state = "data" if self._left else "trailer"
        elif self._state == "crlf":
            if line:
                raise FramingError("a chunk is longer than its size")
            self._state = "size"
        elif not line:  # the empty line after the trailers
            self.done = True
        return view[end + 1 :]


@dataclass(slots=True)
class Head:
    """A response head: the status and how the body is framed. ``length`` is the body's
    Content-Length (0 for a status that has no body), None with ``chunked`` or for a body
    that runs to the end of the connection; ``keep_alive``: the connection may serve again
    once the body is complete."""

    status: int
    length: int | None
    chunked: bool
    keep_alive: bool


def _content_length(value: bytes) -> int:
    """A Content-Length's value; a list of equal values ("5, 5") is one, as h11 reads it."""
    first, *more = value.split(b",")
    first = first.strip(b" \t")
    if not _DIGITS.fullmatch(first) or any(v.strip(b" \t") != first for v in more):
        raise FramingError("a malformed Content-Length")
    return int(first)


def parse_head(data: bytes) -> tuple[Head, int] | None:
    """The response head at the start of ``data`` and how many bytes it took; None while it
    is incomplete; FramingError if it is not an HTTP/1.x response head."""
    match = _HEAD.match(data)
    if match is None:
        if _HEAD_END.search(data, 0, MAX_HEAD + 4):
            raise FramingError("not an HTTP/1.1 response head")
        if len(data) > MAX_HEAD:
            raise FramingError("the response head is too long")
        return None
    status = int(match[2])
    length: int | None = None
    chunked = False
    close = match[1] == b"0"  # HTTP/1.0: one response per connection
    for name, value in _FIELD.findall(match[3]):
        name = name.lower()
        if name == b"content-length":
            number = _content_length(value)
            if length is not None and length != number:
                raise FramingError("two different Content-Lengths")
            length = number
        elif name == b"transfer-encoding":
            if value.rstrip(b" \t").lower() != b"chunked" or chunked:
                raise FramingError("a transfer coding other than chunked")
            chunked = True
        elif name == b"connection":
            close |= b"close" in value.lower().replace(b" ", b"").replace(b"\t", b"").split(b",")
    if status == 101:
        raise FramingError("the server switched protocols")
    if status < 200 or status in (204, 304):
        length, chunked = 0, False
    elif chunked:
        close |= length is not None  # both: the length does not count (RFC 9112, 6.3)
        length = None
    keep_alive = not close and (length is not None or chunked)
    return Head(status, length, chunked, keep_alive), match.end()


class Response:
    """One response, sans-IO: ``feed`` it what the connection delivers, and it gives back the
    body's bytes. ``head`` once the head is complete (1xx answers before it are skipped, and
    ``continued`` says one came), ``done`` once the body is; ``end()`` when the connection
    closed. Bytes after the body are kept in ``extra``."""

    def __init__(self) -> None:
        self.head: Head | None = None
        self.continued = False
        self._buffer = b""
        self._body: BodyReader | None = None

    @property
    def done(self) -> bool:
        return self._body is not None and self._body.done

    @property
    def extra(self) -> bytes:
        return b"" if self._body is None else self._body.extra

    def feed(self, data: bytes) -> list[memoryview]:
        """The body bytes in ``data``, as views of it (none before the head is complete)."""
        if self._body is not None:
            return self._body.feed(data)
        buffer = self._buffer + data if self._buffer else data
        while (found := parse_head(buffer)) is not None:
            head, size = found
            if head.status >= 200:
                self.head, self._buffer = head, b""
                self._body = BodyReader(head.length, head.chunked)
                return self._body.feed(memoryview(buffer)[size:]) if size < len(buffer) else []
            self.continued = True
            buffer = buffer[size:]
        self._buffer = buffer
        return []

    def end(self) -> None:
        """The connection ended: a FramingError unless that completes the response."""
        if self._body is None:
            raise FramingError("the server closed it")
        self._body.end()
