"""A TCP proxy on loopback, for what only the client side can see: how many connections the
client opens, what its request heads say, and proxies that cannot carry full duplex.

Only the first request head of each connection is read (then bytes pass through as they
are), which is all these tests need: a failed attempt never reuses its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

BAD_GATEWAY = (
    b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: 22\r\n"
    b"Connection: close\r\n\r\n<h1>Bad Gateway</h1>\r\n"
)


class Proxy:
    """``mode``: "pass" forwards everything; with "cut", a request asking for full duplex
    (``Sealflow-Duplex: 1``) loses its connection at the first byte of the answer (100
    Continue included), as through a proxy that ends an exchange once the server answers;
    with "502", such a request gets a proxy's HTML error page."""

    def __init__(self, upstream_port: int, mode: str = "pass") -> None:
        self.upstream_port, self.mode = upstream_port, mode
        self.accepted = 0
        self.heads: list[bytes] = []  # the first request head of each connection
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-proxy", daemon=True)
        self._thread.start()
        self._ready.wait()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, limit=1 << 20)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._server = server
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    def close(self) -> None:
        async def shut() -> None:
            self._server.close()
            await self._server.wait_closed()
            tasks = self._handlers - {asyncio.current_task()}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(shut(), self._loop)
        self._thread.join()

    def close_connections(self) -> None:
        """Close every client connection (as a server does to idle keep-alive ones)."""

        async def close() -> None:
            for writer in list(self._open):
                writer.close()
            await asyncio.sleep(0.05)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        self._open.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            duplex = b"\r\nsealflow-duplex: 1\r\n" in head.lower()
            if duplex and self.mode == "502":
                writer.write(BAD_GATEWAY)
                await writer.drain()
                return
            up_reader, upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            upstream.write(head)
            cut = duplex and self.mode == "cut"
            await asyncio.gather(
                self._pump(reader, upstream, cut=False), self._pump(up_reader, writer, cut=cut)
            )
        except (OSError, asyncio.IncompleteReadError, _Cut):
            pass
        finally:
            self._open.discard(writer)
            for w in (writer, upstream):
                if w is not None:
                    w.transport.abort()

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, cut: bool) -> None:
        while data := await src.read(1 << 16):
            if cut:
                raise _Cut
            dst.write(data)
            await dst.drain()
        with contextlib.suppress(OSError):
            dst.write_eof()


class _Cut(Exception):
    pass


@contextmanager
def proxy(upstream_port: int, mode: str = "pass") -> Iterator[Proxy]:
    p = Proxy(upstream_port, mode)
    try:
        yield p
    finally:
        p.close()
