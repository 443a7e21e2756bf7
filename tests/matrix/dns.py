"""A one-name DNS server on loopback, standing in for Docker's embedded DNS (127.0.0.11).

The shipped proxy configurations find the replicas by asking DNS for ``sealflow``; the tests
run them unchanged but for the resolver's address, so HAProxy's ``server-template ... resolvers``
and nginx's ``resolver`` are exercised as compose runs them. It answers A queries for one name
with one address, other types of that name with no records, and other names with NXDOMAIN.
"""

from __future__ import annotations

import socket
import struct
import threading

_A, _IN = 1, 1
_NXDOMAIN = 3


def _question(query: bytes) -> tuple[str, int, int]:
    """(name, qtype, offset after the question) of a query's first question."""
    labels, i = [], 12
    while length := query[i]:
        labels.append(query[i + 1 : i + 1 + length].decode("ascii").lower())
        i += 1 + length
    qtype, _ = struct.unpack_from("!HH", query, i + 1)
    return ".".join(labels), qtype, i + 5


def answer(query: bytes, name: str, address: str) -> bytes:
    """The reply to ``query``: the question echoed, then at most one A record."""
    (ident, flags) = struct.unpack_from("!HH", query)
    asked, qtype, end = _question(query)
    found = asked.rstrip(".") == name
    records = b""
    if found and qtype == _A:
        # A pointer to the name in the question (offset 12), type A, class IN, TTL 5 s.
        records = struct.pack("!HHHIH", 0xC00C, _A, _IN, 5, 4) + socket.inet_aton(address)
    rcode = 0 if found else _NXDOMAIN
    # QR (response), the query's opcode and RD, AA, RA; one question, 0 or 1 answers.
    head = struct.pack(
        "!HHHHHH",
        ident,
        0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode,
        1,
        len(records) and 1,
        0,
        0,
    )
    return head + query[12:end] + records


class StubDns:
    """Serves ``name -> address`` on a free UDP port of 127.0.0.1 until closed."""

    def __init__(self, name: str, address: str = "127.0.0.1") -> None:
        self.name, self.address = name, address
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.sock.settimeout(0.1)  # so that close() is seen
        self.queries = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="stub-dns", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                query, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            try:
                reply = answer(query, self.name, self.address)
            except (IndexError, struct.error, UnicodeDecodeError):
                continue  # not a query this server understands: no answer, as a lossy network
            self.queries += 1
            self.sock.sendto(reply, peer)

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        self.sock.close()
