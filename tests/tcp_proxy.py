"""A TCP proxy the tests can cut: a network partition between a process and what it talks to.

``TcpProxy(host, port)`` listens on a free loopback port (``port``) and forwards each connection
to the target, two threads a connection. ``cut()`` ends every open connection both ways (each
side sees its peer close) and, until ``restore()``, closes each new one as soon as it is
accepted; ``restore()`` forwards new connections again (the ones cut stay closed, as after a
real partition). ``mute()`` drops whatever the target sends from then on (the client's bytes
still go through): answers lost on the way back, until ``cut`` or ``restore``. ``close()``
stops it. Only for tests: plain blocking sockets, no limits.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class _Pair:
    """Both ends of one forwarded connection; the last of its two pumps to finish closes them."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.sockets = (client, upstream)
        self._pumps = 2
        self._lock = threading.Lock()

    def shut(self) -> None:
        """Wake both pumps (a blocked recv returns) and send each side its end of stream. Never
        closes: a socket is closed only once no thread uses it (``done``)."""
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def done(self) -> bool:
        """One pump finished; True for the second, which closes both sockets."""
        self.shut()
        with self._lock:
            self._pumps -= 1
            last = self._pumps == 0
        if last:
            for sock in self.sockets:
                sock.close()
        return last


class TcpProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)  # the accept loop checks ``_closed`` this often
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: set[_Pair] = set()
        self._cut = False
        self._muted = False
        self._closed = False
        self.accepted = 0  # connections forwarded, for the tests' own checks
        self.refused = 0  # connections closed at once because the proxy was cut
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        """Every open connection ends both ways; new ones are closed at once until ``restore``."""
        with self._lock:
            self._cut = True
            pairs = list(self._pairs)
        for pair in pairs:
            pair.shut()

    def restore(self) -> None:
        with self._lock:
            self._cut = False
            self._muted = False

    def mute(self) -> None:
        """From now on what the target sends is read and dropped, on every connection."""
        with self._lock:
            self._muted = True

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.cut()
        self._thread.join(timeout=5)
        self._listener.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self._cut:
                self._refuse(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            pair = _Pair(client, upstream)
            with self._lock:
                if self._cut:  # cut while connecting
                    refused = True
                else:
                    refused = False
                    self._pairs.add(pair)
                    self.accepted += 1
            if refused:
                upstream.close()
                self._refuse(client)
                continue
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(pair, src, dst), name="tcp-proxy-pump", daemon=True
                ).start()

    def _refuse(self, client: socket.socket) -> None:
        self.refused += 1
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)
        client.close()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        answers = src is pair.sockets[1]  # the target's side
        try:
            while data := src.recv(65536):
                if not (answers and self._muted):
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            if pair.done():
                with self._lock:
                    self._pairs.discard(pair)
