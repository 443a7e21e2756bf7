"""What one call sends, decided once from the call and the length of its input: the route's
mode, the body's framing, ``Expect`` and ``Sealflow-Duplex``; the request head's bytes; and
what to try next after a failure. Sans-IO: ``Client`` and ``AsyncClient`` run the same plans.

A body of known length up to SMALL_MAX (an envelope: up to SMALL_MAX plus a single-shot
envelope's overhead) is *small*: it goes with the head in one write, without full duplex, and
the answer is read after it. The service answers such a body whole either way (a decrypt all
or nothing), and a single-shot one at once from its parser, without the ASGI app: which is
why an encrypt that names no mode asks for single-shot (``mode=single``) up to SMALL_MAX; its
envelope opens as any other (the prefix says the mode). An explicit mode is honoured. Larger
bodies and bodies of unknown length ask for full duplex, and above EXPECT_ABOVE or of unknown
length for 100 Continue.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ._errors import SealflowError

# The service's whole-body limit: the largest body it answers at once from its parser
# (WHOLE_MAX in the server's data/_transfer.py; the client does not import the server).
SMALL_MAX = 64 * 1024
# A single-shot envelope's bytes beyond its plaintext: the longest prefix (a 64-character key
# name), the nonce and the tag. Envelopes of small plaintexts are small decrypts.
ENVELOPE_OVERHEAD = 11 + 64 + 12 + 16
EXPECT_ABOVE = 1 << 20  # as curl: smaller bodies go at once (Expect costs a round trip)

Mode = Literal["stream", "single"]
MODES = ("stream", "single")


@dataclass(slots=True)
class Plan:
    """One try of a call (a value: ``retry`` makes another). ``length`` is the body's, None
    when unknown (sent chunked); ``mode`` an encrypt's (None on other routes); ``auto`` when
    the client chose it."""

    method: str
    path: str
    headers: bytes  # the call's own header lines (Content-Type, X-AAD), each with its CRLF
    length: int | None
    small: bool
    mode: Mode | None = None
    auto: bool = False
    duplex: bool = False
    stale_retry: bool = True  # may go once more when a kept-alive connection was found closed
    fresh: bool = False  # on a new connection

    @property
    def expect(self) -> bool:
        return self.length is None or self.length > EXPECT_ABOVE

    def head(self, prefix: str, prelude: bytes) -> bytes:
        """The request head: request line, ``prelude`` (Host, Authorization), then the rest."""
        target = prefix + self.path
        if self.mode is not None:
            target += "?mode=" + self.mode
        if self.length is None:
            framing = b"Transfer-Encoding: chunked\r\n"
        elif self.length or self.method != "GET":
            framing = b"Content-Length: %d\r\n" % self.length
        else:
            framing = b""
        extra = b"Expect: 100-continue\r\n" if self.expect else b""
        if self.duplex:
            extra += b"Sealflow-Duplex: 1\r\n"
        line = f"{self.method} {target} HTTP/1.1\r\n".encode("ascii")
        return b"".join((line, prelude, self.headers, framing, extra, b"\r\n"))

    def retry(self, error: SealflowError, *, stale: bool, cut_short: bool) -> Plan | None:
        """The plan of one more try after ``error``, or None: raise it. The caller checks that
        the input can be sent again and that no output has reached its caller.

        ``stale``: a kept-alive connection the server had closed (no answer came): once more
        on a new one. ``cut_short``: the connection closed, or the answer ended, before the
        upload was complete; when full duplex was asked for and the answer (if any) is not
        the service's JSON error, a proxy that cannot carry it is the likely cause: once more
        without. A single-shot encrypt the client chose that the service finds too large
        (its single-shot limit set below SMALL_MAX): once more in stream mode.
        """
        if stale and self.stale_retry:
            return replace(self, stale_retry=False, fresh=True)
        if self.duplex and cut_short and error.code is None:
            return replace(self, duplex=False)
        if self.auto and error.code == "too_large":
            return replace(self, mode="stream", auto=False)
        return None


def plan(
    method: str,
    path: str,
    length: int | None,
    headers: bytes = b"",
    *,
    duplex: bool = False,
    idempotent: bool = True,
    small_max: int = SMALL_MAX,
) -> Plan:
    """The first try of a call that is not an encrypt. ``duplex``: the client may ask for it
    (data routes), which it does for bodies that are not small."""
    small = length is not None and length <= small_max
    return Plan(
        method, path, headers, length, small, duplex=duplex and not small, stale_retry=idempotent
    )


def decrypt_plan(path: str, length: int | None, headers: bytes, duplex: bool) -> Plan:
    return plan(
        "POST", path, length, headers, duplex=duplex, small_max=SMALL_MAX + ENVELOPE_OVERHEAD
    )


def encrypt_plan(
    path: str, length: int | None, headers: bytes, mode: Mode | None, duplex: bool
) -> Plan:
    """The first try of an encrypt: the caller's ``mode``; with None, single-shot for a small
    body, stream mode for any other."""
    small = length is not None and length <= SMALL_MAX
    if mode is None:
        mode = "single" if small else "stream"
        auto = small
    elif mode in MODES:
        auto = False
    else:
        raise ValueError(f"mode must be 'stream' or 'single', not {mode!r}")
    return Plan("POST", path, headers, length, small, mode, auto, duplex and not small)
