"""A SHA-256 hash chain of JSON lines, a batch per native call (the audit trail's).

Each body (a JSON object without its closing brace) becomes the line
``body + b"," + tail + seq + b',"prev":' + prev + b"}"``, where ``seq`` counts on by one a
line and ``prev`` is the previous line's SHA-256 as a quoted lowercase hex string: what
``sealflow.service.audit``'s ``Chain`` makes a line at a time, here in one C loop
(``sf_chain_lines``: the line built in place, hashed with OpenSSL's SHA-256 fetched once),
so that a batch costs one call and no Python object per line but the line itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import _binding

_PREV_LEN = _binding.CHAIN_PREV_LEN
_FIXED = len(b',,"prev":}')  # the bytes of a line that are neither body, tail, seq nor prev


def chain_lines(
    bodies: Sequence[bytes], tail: bytes, seq: int, prev: bytes
) -> tuple[list[bytes], bytes]:
    """The lines of ``bodies`` chained after the line of seq ``seq`` whose hash is ``prev``
    (as JSON: a quoted hex string, or ``null`` before the first line), and the last line's
    hash as the next ``prev`` (``prev`` itself if there is no body). ValueError if a body,
    the tail or prev holds a newline (a JSON line never does), prev is longer than a quoted hash, or
    seq is out of range."""
    count = len(bodies)
    if not count:
        return [], prev
    data = b"\n".join(bodies)  # the C side finds the bodies by their newlines
    if data.count(b"\n") != count - 1 or b"\n" in tail or b"\n" in prev:
        raise ValueError("a chained line may not hold a newline")
    if len(prev) > _PREV_LEN:
        raise ValueError(f"prev is at most {_PREV_LEN} bytes")
    if seq < 0 or seq + count >= 1 << 64:
        raise ValueError("seq is out of range")
    # The lines (data's newlines and one more end them), then the last hash; every line but
    # the first names a hash as its prev.
    size = (
        len(data)
        + 1
        + count * (_FIXED + len(tail))
        + _digits(seq + 1, seq + count)
        + len(prev)
        + count * _PREV_LEN
    )
    out, p = _binding.new_bytes(size)
    _binding.chain_lines(data, count, tail, seq, prev, p, size)
    lines = out.split(b"\n")
    return lines, lines.pop()


def _digits(first: int, last: int) -> int:
    """The decimal digits of every integer from first to last, both included (first > 0)."""
    total, low, width = 0, first, len(str(first))
    while low <= last:
        high = min(last, 10**width - 1)
        total += (high - low + 1) * width
        low, width = high + 1, width + 1
    return total
