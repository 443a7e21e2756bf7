"""A ``batch_input`` of ``hmac/:name`` as one column, as ``_column`` reads encrypt's: the
inputs decoded in one native call, HMAC'd in one more (``engine.hmac_many``), and the rows of
``batch_results`` written by a few C-level passes over the tags, never a Python step per item.

Two ways in, as encrypt's: ``from_body``, the request's bytes unparsed when they are exactly
the usual serialization of a batch of inputs only (Go's ``encoding/json``, or ``json.dumps`` as
hvac and the benchmark send it); ``from_items``, a parsed batch whose every item is an object
with an ``input`` string and maybe a ``reference`` string. Both give the column only if every
input is canonical base64 (``engine.Records.from_base64``); any other batch is None here and
``_hmac`` goes item by item, which words each item's problem (and accepts what Go's lenient
decoder does). The answer is the same either way (tests/service/transit/test_hmac_column.py).

The tags are base64-encoded together: each is padded with zero bytes to a multiple of 3, so
that no 4-character group spans two tags, and the ``A`` each pad byte becomes is cut off and
written as ``=`` (what encoding the tag alone gives).
"""

from __future__ import annotations

import hmac
import struct
from dataclasses import dataclass
from itertools import accumulate
from operator import itemgetter, methodcaller
from typing import Any

import orjson
import pybase64

from sealflow import engine

from ._column import Serialization, frame

_SERIALIZATIONS: tuple[Serialization, ...] = (
    (b'{"batch_input":[{"input":"', b'"},{"input":"', b'"}]}'),  # Go, compact JSON
    (b'{"batch_input": [{"input": "', b'"}, {"input": "', b'"}]}'),  # json.dumps
)
_SEP = "\n"  # never inside canonical base64: a text holding one makes the count differ
_INPUT = itemgetter("input")
_GET_REFERENCE = methodcaller("get", "reference")
_STRING_OR_NONE = {str, type(None)}
# At most what a row of the answer and its tag take: a tag of 64 bytes, its base64, the row.
ROW_BYTES = 64 + 88 + 64


@dataclass(slots=True, frozen=True)
class Column:
    """An hmac batch's inputs, decoded, and each item's reference (None: none has one)."""

    records: engine.Records
    references: list[str] | None


def from_body(raw: bytes) -> Column | None:
    """The column of a body in one of the usual serializations of a batch of inputs only."""
    found = frame(raw, _SERIALIZATIONS)
    if found is None:
        return None
    start, end, between = found
    try:
        return Column(engine.Records.from_base64(memoryview(raw)[start:end], None, between), None)
    except ValueError:
        return None


def from_items(batch: list[Any]) -> Column | None:
    """The column of a parsed batch whose items all have an input string, and a reference
    string or none."""
    try:
        # Every item an object with an input string (anything else raises), in C loops.
        texts = _SEP.join(map(_INPUT, batch)).encode("ascii")
        references = list(map(_GET_REFERENCE, batch))
    except (KeyError, TypeError, AttributeError, UnicodeEncodeError):
        return None
    if not {*map(type, references)} <= _STRING_OR_NONE:
        return None
    try:
        records = engine.Records.from_base64(texts, len(batch), _SEP.encode())
    except ValueError:
        return None
    return Column(records, [r or "" for r in references] if any(references) else None)


def rows(chosen: str, secret: bytes, prefix: str, column: Column) -> bytes:
    """The column's entries of ``batch_results`` (commas between, no brackets), each what the
    item path writes: ``{"hmac": prefix + base64(tag), "reference": ...}``."""
    tags, size = _tags(chosen, secret, column.records)
    n = len(column.records)
    pad = -size % 3
    if pad:  # each tag and its pad bytes, then the whole encoded at once
        tags = (b"\0" * pad).join(struct.unpack(f"{size}s" * n, tags)) + b"\0" * pad
    width = (size + pad) // 3 * 4
    text = pybase64.b64encode(tags)
    texts = struct.unpack(f"{width - pad}s{pad}x" * n, text)  # each cut before its pad
    end = b"=" * pad + b'","reference":'
    head = b'{"hmac":"' + prefix.encode()
    if column.references is None:
        return head + (end + b'""},' + head).join(texts) + end + b'""}'
    references = map(orjson.dumps, column.references)
    return b",".join([head + t + end + r + b"}" for t, r in zip(texts, references, strict=True)])


def _tags(chosen: str, secret: bytes, records: engine.Records) -> tuple[bytes | bytearray, int]:
    """Every record's tag end to end, and a tag's size: one native call, but for sha1, which
    the engine does not offer (hashlib's HMAC per record)."""
    if chosen != "sha1":
        return engine.hmac_many(chosen, secret, records), engine.Digest(chosen).size
    data, ends = records.data, list(accumulate(records.lengths))
    starts = [0, *ends[:-1]]
    pairs = zip(starts, ends, strict=True)
    tags = b"".join([hmac.digest(secret, data[s:e], "sha1") for s, e in pairs])
    return tags, 20
