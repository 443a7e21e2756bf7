"""Request ids: the client's own when it is well-formed, else one made here.

A client (or the proxy in front) may name its request with ``X-Request-Id``; the same id is
then on the response and in the access-log line, so one request can be followed through every
hop. A value that is not 1 to 128 characters of ``[A-Za-z0-9._-]``, or that came twice, is
replaced, never passed on: the id reaches log lines and headers as it is.

A made id is this process's random prefix and a counter: unique without a random draw per
request (16 bytes of ``os.urandom`` cost a system call and about three times as much), and
without a lock (one C call under the GIL). A forked child draws a prefix of its own.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable

MAX_LENGTH = 128
# Characters an id may have: deleting them from a well-formed id leaves nothing.
_ALLOWED = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
HEADER = b"x-request-id"


def well_formed(value: bytes) -> bool:
    return 0 < len(value) <= MAX_LENGTH and not value.translate(None, _ALLOWED)


def _reseed() -> None:
    global new
    # 64 random bits per process: two processes share a prefix about once in 10^19 pairs.
    prefix = os.urandom(8).hex() + "-"
    # The prefix and the count in decimal, made in C: no Python frame and no format spec per
    # id (with them, about 500 instructions more a request; docs/SERVICE.md, Small requests).
    new = functools.partial(next, map(prefix.__add__, map(str, itertools.count(1))))


# A new id: 16 hex digits of this process's prefix, a dash, the count.
new: Callable[[], str]
_reseed()
os.register_at_fork(after_in_child=_reseed)


def line(request_id: str) -> bytes:
    """The response's header line that names the request."""
    return b"x-request-id: %s\r\n" % request_id.encode("ascii")
