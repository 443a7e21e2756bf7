"""A batch body cut into groups of items, so that a large ``batch_input`` is never parsed whole.

Parsed whole, a JSON batch becomes Python objects 4 to 20 times the size of its bytes (a dict and
its strings per item; docs/TRANSIT.md, Limits). ``split`` instead finds the ``batch_input`` array
in the body's bytes and cuts it into spans of about ``GROUP_BYTES``, which the caller parses one
at a time (``_items``); the fields around the array are parsed apart (``Split.outside``). Sans-IO:
offsets in the bytes, nothing parsed here.

A span ends at the first ``}`` followed by a comma past ``GROUP_BYTES``: the end of an item in any
body Transit clients write. Such a cut is right exactly when the span parses as the contents of
a JSON array: a cut inside a string leaves the string unterminated, one inside an item leaves a
bracket open, so a span that parses is a run of whole items. Whatever this reading does not
expect (no ``batch_input`` array, the key written twice, a ``}`` in every place a cut was tried)
is None, and so is a span that does not parse for the caller: the body is then parsed whole,
which says what is wrong exactly as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The JSON of a group: a few milliseconds of work item by item (about 700 items), on the event
# loop between two turns of other requests (docs/TRANSIT.md, Limits).
GROUP_BYTES = 64 << 10
# The texts of a group of the unparsed column (``_column.unparsed``): as many milliseconds of work,
# each item no Python step.
COLUMN_BYTES = 1 << 20
_KEY = b'"batch_input"'
# Where the array was, in ``outside``: a key of no meaning to Transit, taken out again.
PLACEHOLDER = ""
_HOLE = b'"":0'
_SPACE = re.compile(rb"[ \t\r\n]*")
# A ``}`` not followed by a comma is tried this many times before a cut gives up: an item's
# strings may hold any number of them, and each costs a step in Python.
_TRIES = 32


@dataclass(slots=True, frozen=True)
class Split:
    """Where a body's ``batch_input`` items are: ``spans`` (start, end) in its bytes, each a
    run of whole items if it parses; ``outside``, the body with the array replaced by a
    placeholder field (``PLACEHOLDER``), to parse for the other top-level fields."""

    outside: bytes
    spans: list[tuple[int, int]]


def split(raw: bytes) -> Split | None:
    """The body's ``batch_input`` array cut into spans, or None (then it is parsed whole)."""
    k = raw.find(_KEY)
    if k < 0 or raw.find(_KEY, k + 1) >= 0:  # none, or twice: a string or a repeated key
        return None
    colon = _skip(raw, k + len(_KEY))
    if raw[colon : colon + 1] != b":":
        return None
    start = _skip(raw, colon + 1)
    end = raw.rfind(b"]")  # the array's end, if the fields after it hold no ``]``
    if raw[start : start + 1] != b"[" or end <= start:
        return None
    spans = _cut(raw, start + 1, end)
    if spans is None:
        return None
    return Split(raw[:k] + _HOLE + raw[end + 1 :], spans)


def _cut(raw: bytes, start: int, end: int) -> list[tuple[int, int]] | None:
    spans = []
    p = _skip(raw, start)
    while True:
        found = _item_end(raw, p + GROUP_BYTES, end)
        if found is None:
            return None
        if not found:  # no item ends past the mark: the rest is the last group
            spans.append((p, end))
            return spans
        cut, comma = found
        spans.append((p, cut + 1))
        p = _skip(raw, comma + 1)


def _item_end(raw: bytes, start: int, end: int) -> tuple[int, int] | tuple[()] | None:
    """The first ``}`` from start followed by a comma (and that comma), before end; ``()`` if
    there is none, None if too many ``}`` were tried first."""
    i = raw.find(b"}", start, end)
    for _ in range(_TRIES):
        if i < 0:
            return ()
        comma = _skip(raw, i + 1)
        if raw[comma : comma + 1] == b",":
            return i, comma
        i = raw.find(b"}", i + 1, end)
    return None


def _skip(raw: bytes, i: int) -> int:
    """Past JSON whitespace from i (a C loop: a body may hold megabytes of it)."""
    match = _SPACE.match(raw, i)
    assert match is not None  # the pattern matches the empty string
    return match.end()
