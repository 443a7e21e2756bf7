"""The body of an HTTP/1.1 response, sans-IO: by Content-Length, chunked coding, or to the end
of the connection.

h11 parses the heads; bodies come through here instead because h11's receive buffer copies
every byte three times (append, slice, slice again): 0.39 s of CPU for a 200 MiB body, as much
as the whole transfer takes with curl (docs/BENCHMARKS.md, "Client"). Here body bytes are
passed on as slices of the pieces the socket delivered, never copied.
"""

from __future__ import annotations

import re

_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_MAX_LINE = 4096  # a chunk-size line or a trailer line; the service sends a few bytes


class FramingError(Exception):
    """The response's framing is broken, or it ended before its body did."""


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

    def feed(self, data: bytes) -> list[memoryview]:
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
            size = line.split(b";", 1)[0].strip(b" \t")
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
