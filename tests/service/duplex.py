"""A full-duplex HTTP/1.1 POST: send the body on one thread, read the reply on another.

sealflow streams its reply while the request body is still arriving, with a
few batches of memory per request. A client that reads nothing until it has
sent everything (httpx, requests and urllib all work that way) therefore stalls
once the reply outgrows the socket buffers: the server waits for the client to
read, the client for the server to read. curl reads while it sends, and so do the
``sealflow`` CLI (asyncio, service/client/) and this module, the tests'
independent client for large bodies (stdlib http.client and a sender thread).
"""

from __future__ import annotations

import http.client
import ssl
import threading
from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import urlsplit


class Reply:
    """The response, readable as it arrives."""

    def __init__(
        self,
        conn: http.client.HTTPConnection,
        sender: threading.Thread,
        failure: list[BaseException],
    ) -> None:
        self._conn = conn
        self._sender = sender
        self._failure = failure
        self.response = conn.getresponse()
        self.status = self.response.status

    @property
    def upload_error(self) -> BaseException | None:
        """Why sending the body stopped early, if it did (read after the body)."""
        return self._failure[0] if self._failure else None

    def header(self, name: str) -> str | None:
        return self.response.getheader(name)

    def pieces(self, size: int = 1 << 18) -> Iterator[bytes]:
        """The body as it arrives; ``http.client.IncompleteRead`` if it was cut off."""
        while piece := self.response.read1(size):
            yield piece
        if self.response.length:  # bytes promised by Content-Length that never came
            raise http.client.IncompleteRead(b"", self.response.length)

    def read(self) -> bytes:
        return b"".join(self.pieces())

    def close(self) -> None:
        self.response.close()
        self._conn.close()
        self._sender.join()

    def __enter__(self) -> Reply:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def post(
    url: str,
    body: Iterable[bytes],
    headers: Mapping[str, str],
    length: int | None = None,
    timeout: float | None = 60.0,
    ssl_context: ssl.SSLContext | None = None,
) -> Reply:
    """POST ``body`` (chunked unless ``length`` is given) and return the reply once it starts."""
    parts = urlsplit(url)
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=timeout, context=ssl_context
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn.putrequest("POST", path, skip_accept_encoding=True)
    for name, value in headers.items():
        conn.putheader(name, value)
    if length is None:
        conn.putheader("Transfer-Encoding", "chunked")
    else:
        conn.putheader("Content-Length", str(length))
    conn.endheaders()
    failure: list[BaseException] = []
    # The socket itself, not conn.send: that would open a new connection once the
    # reader has closed this one.
    sock = conn.sock
    assert sock is not None

    def send() -> None:
        try:
            for piece in body:
                if length is None:
                    if piece:
                        sock.sendall(b"%x\r\n%b\r\n" % (len(piece), piece))
                else:
                    sock.sendall(piece)
            if length is None:
                sock.sendall(b"0\r\n\r\n")
        except OSError as exc:
            # The server answered early (an error) and closed: the reply says why.
            failure.append(exc)
        except BaseException as exc:  # reading the input failed: report it to the caller
            failure.append(exc)
            conn.close()

    sender = threading.Thread(target=send, name="sealflow-upload", daemon=True)
    sender.start()
    try:
        return Reply(conn, sender, failure)
    except BaseException:
        conn.close()
        sender.join()
        raise
