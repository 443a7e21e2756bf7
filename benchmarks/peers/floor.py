"""The floor: an HTTP/1.1 server that does no work, for the 256 MiB rows of benchmarks/http.py.

It reads a POST's body into one reused buffer and answers as many bytes from another: no
framework, no crypto, no copy it can avoid, blocking sockets. No server that has to produce
its answer can be faster, so what a client takes against it is that client's own limit,
and its time against the peer's is the most any server could reach in the same run.

    taskset -c 0 python -m benchmarks.peers.floor 8082
"""

from __future__ import annotations

import os
import socket
import sys
import threading

PIECE = 1 << 20


def serve(conn: socket.socket) -> None:
    body = memoryview(bytearray(PIECE))
    answer = os.urandom(PIECE)
    pending = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in pending:
                more = conn.recv(65536)
                if not more:
                    return
                pending += more
            head, pending = pending.split(b"\r\n\r\n", 1)
            fields = dict(
                line.split(b":", 1) for line in head.lower().split(b"\r\n")[1:] if b":" in line
            )
            length = int(fields.get(b"content-length", b"0"))
            if fields.get(b"expect", b"").strip() == b"100-continue":
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            got, pending = len(pending), b""
            while got < length:
                n = conn.recv_into(body, min(PIECE, length - got))
                if not n:
                    return
                got += n
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % length)
            left = length
            while left:
                n = min(left, PIECE)
                conn.sendall(answer if n == PIECE else answer[:n])
                left -= n


def main(port: int) -> None:
    with socket.create_server(("127.0.0.1", port), backlog=64) as server:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main(int(sys.argv[1]))
