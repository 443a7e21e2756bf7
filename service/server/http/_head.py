"""A request's head, scanned once: what every later decision about the request reads.

The protocol fills one ``Head`` per request once its parser has handed over the request line and
every header (``add_all``, one call for the whole head); an ASGI scope that did not come through
the protocol is scanned the same way (``from_scope``). Nothing else walks a request's headers to
decide something about it.

A header that must appear once (``Authorization``, ``X-Vault-Token``, ``X-AAD``,
``Content-Length``, ``Host``) appearing twice makes the head ``error``: refused with 400 before
anything reads either value, since a proxy's rule may have checked the one that is not used.

Every head has a ``request_id`` once complete: the client's ``X-Request-Id`` when it is
well-formed, else a new one (``_request_id``). ``peer`` is the address of the connection's other
end; ``Forwarded`` and ``X-Forwarded-For`` are kept as they came, read only when that peer is a
trusted proxy (the app's ``_forwarded``). ``peer_cert`` is the connection's verified TLS client
certificate (``_peer.PeerCert``: subject, SANs, issuer, fingerprint), read once when the
connection was made; None without TLS, without ``--tls-client-ca`` or when the client sent none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from . import _request_id
from ._peer import PeerCert

# The headers that must appear at most once, and the slot each fills.
_ONCE = {
    b"authorization": "authorization",
    b"x-vault-token": "vault_token",
    b"x-aad": "x_aad",
    b"content-length": "content_length",
    b"host": "host",
}
DUPLEX = b"sealflow-duplex"
# The other headers the head notes, each by a number: one lookup for a header it does not.
_DUPLEX, _CHUNKED, _EXPECT, _ID, _FORWARDED, _FORWARDED_FOR = range(6)
_NOTED = {
    DUPLEX: _DUPLEX,
    b"transfer-encoding": _CHUNKED,
    b"expect": _EXPECT,
    _request_id.HEADER: _ID,
    b"forwarded": _FORWARDED,
    b"x-forwarded-for": _FORWARDED_FOR,
}
# Where a second X-Request-Id leaves the first: a value no id can have, so both are replaced.
_TWICE = b"\n"


class Head:
    """The request line and headers of one request, with the fields decisions read."""

    __slots__ = (
        "authorization",
        "chunked",
        "content_length",
        "continue_",
        "duplex",
        "error",
        "forwarded",
        "forwarded_for",
        "given_id",
        "headers",
        "host",
        "length",
        "method",
        "path",
        "peer",
        "peer_cert",
        "query",
        "raw_path",
        "request_id",
        "size",
        "vault_token",
        "x_aad",
    )
    request_id: str  # set by ``complete``

    def __init__(
        self,
        method: str,
        raw_path: bytes,
        query: bytes,
        path: str,
        peer: str | None = None,
        peer_cert: PeerCert | None = None,
    ) -> None:
        self.method = method
        self.raw_path = raw_path
        self.query = query
        self.path = path  # percent-decoded
        self.peer = peer  # the connection's other end (an IP address), if known
        self.peer_cert = peer_cert  # its verified TLS client certificate, if it sent one
        self.headers: list[tuple[bytes, bytes]] = []  # names lowercased, in order
        self.size = 0  # bytes of header names and values
        self.authorization: bytes | None = None
        self.vault_token: bytes | None = None
        self.x_aad: bytes | None = None
        self.content_length: bytes | None = None
        self.host: bytes | None = None
        self.chunked = False  # Transfer-Encoding present (the parser refuses it with a length)
        self.duplex = False  # Sealflow-Duplex: 1
        self.continue_ = False  # Expect: 100-continue
        self.error: str | None = None  # why the head is refused (400), if it is
        self.given_id: bytes | None = None  # X-Request-Id as it came
        self.forwarded: bytes | None = None  # Forwarded, its fields joined by commas
        self.forwarded_for: bytes | None = None  # X-Forwarded-For, the same
        # The body's declared length; None when it has none or is chunked (``complete``).
        self.length: int | None = None

    def add(self, name: bytes, value: bytes) -> None:
        """One header, its name lowercased."""
        self.add_all(((name, value),))

    def add_all(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """Headers in order, their names lowercased: the protocol's whole head in one call
        (a call per header cost more than its checks)."""
        headers = self.headers
        size = self.size
        for name, value in pairs:
            headers.append((name, value))
            size += len(name) + len(value)
            slot = _ONCE.get(name)
            if slot is not None:
                if getattr(self, slot) is not None:
                    self.error = f"more than one {name.decode('latin-1')} header"
                else:
                    setattr(self, slot, value)
                continue
            noted = _NOTED.get(name)
            if noted is not None:
                self._note(noted, value)
        self.size = size

    def _note(self, noted: int, value: bytes) -> None:
        if noted == _DUPLEX:
            self.duplex = value.strip() == b"1"
        elif noted == _CHUNKED:
            self.chunked = True
        elif noted == _EXPECT:
            self.continue_ = value.strip().lower() == b"100-continue"
        elif noted == _ID:
            self.given_id = value if self.given_id is None else _TWICE
        elif noted == _FORWARDED:
            # Fields of a list header, in order, are one list (RFC 9110 section 5.3).
            old = self.forwarded
            self.forwarded = value if old is None else old + b"," + value
        else:
            old = self.forwarded_for
            self.forwarded_for = value if old is None else old + b"," + value

    def complete(self) -> Head:
        """The head is whole: what its headers say of the body, read once."""
        value = self.content_length
        # The parser took digits only, of a value that fits 64 bits, but any number of leading
        # zeros: int() refuses more than 4,300 digits.
        self.length = None if value is None or self.chunked else int(value.lstrip(b"0") or b"0")
        given = self.given_id
        if given is not None and _request_id.well_formed(given):
            self.request_id = given.decode("ascii")
        else:
            self.request_id = _request_id.new()
        return self

    @property
    def has_body(self) -> bool:
        return self.chunked or bool(self.length)

    @classmethod
    def from_scope(cls, scope: Mapping[str, Any]) -> Head:
        """The head of a request that came as an ASGI scope (an in-process client)."""
        client = scope.get("client")
        head = cls(
            scope["method"],
            scope.get("raw_path") or b"",
            scope["query_string"],
            scope["path"],
            None if not client else str(client[0]),
        )
        head.add_all(scope["headers"])
        return head.complete()
