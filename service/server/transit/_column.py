"""The common ``batch_input`` of encrypt as one column: read without a Python object per
item, and answered by one engine call that writes the JSON of ``batch_results`` itself.

The common batch is a list of objects that carry a ``plaintext`` string each, maybe a
``reference`` string each, and the same ``key_version`` and ``associated_data`` (or none) on
every item. A single request (``plaintext`` at the top, maybe ``key_version`` and
``associated_data``, nothing else) is the column of one item: the same checks and lease, one
engine seal, and the answer without the batch wrapping.
Two ways in:

- ``from_body``: the request's bytes, unparsed, when they are exactly the usual serialization
  of a batch of plaintexts only (Go's ``encoding/json`` as the Vault CLI and Go clients write
  it, or Python's ``json.dumps`` as hvac sends it): the texts between the fixed bytes are the
  column, and the body need not be parsed at all. The engine's decoder takes base64 characters
  only, so a body it accepts is exactly such a batch: any escape, quote, space or other field
  makes it refuse, and the parsed way is tried.
- ``column``: the parsed body, recognised in a few C-level passes over the list (``map``,
  ``str.join``), the plaintexts' base64 joined by ``\\n``.

``engine.Records.from_base64`` decodes the column in one native call, and
``engine.seal_many_text`` seals every item and writes each result straight into the answer's
bytes. A large batch is a column per group of about ``COLUMN_BYTES`` (``unparsed``; a parsed
body's groups are ``_items``'), each one call of each: memory bounded by a group, not the
batch (docs/TRANSIT.md, Limits). Any other shape (another field type, mixed
versions, base64 that is not canonical) is None here, and ``_encrypt`` goes item by item,
which reports every item's error as before: the answer is the same either way (the tests
compare both paths).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from operator import itemgetter, methodcaller
from typing import Any

import orjson

from sealflow import engine
from sealflow.engine import Algorithm, Records

from . import _groups
from ._ciphertext import PREFIX
from ._wire import Body

_PLAINTEXT = itemgetter("plaintext")
_SEP = "\n"  # never inside canonical base64: a text holding one makes the count differ
_NEWLINE = _SEP.encode()
_NONE = type(None)
# The fixed bytes of a batch of plaintexts only, as the usual encoders write it: (before the
# first text, between two texts, after the last one).
_SERIALIZATIONS = (
    (b'{"batch_input":[{"plaintext":"', b'"},{"plaintext":"', b'"}]}'),  # Go, compact JSON
    (b'{"batch_input": [{"plaintext": "', b'"}, {"plaintext": "', b'"}]}'),  # json.dumps
)
_SINGLE_FIELDS = {"plaintext", "key_version", "associated_data"}
_VERSION = {int, _NONE}  # exact types: True is not a version
_AAD = {str, _NONE}
_GET_AAD = methodcaller("get", "associated_data")
_GET_VERSION = methodcaller("get", "key_version")
_GET_REFERENCE = methodcaller("get", "reference")
_GET_CONTEXT = methodcaller("get", "context")
_JSON_SPACE = b" \t\r\n"
_TRAILING = 8


@dataclass(slots=True, frozen=True)
class Column:
    """A batch in the common shape."""

    texts: bytes | memoryview  # the plaintexts' base64, separated by sep
    count: int | None  # None: as many as the column holds
    sep: bytes
    version: int  # the key_version every item asks for (0: the latest)
    aad: str  # the associated_data (base64) every item carries ("": none)
    references: list[str] | None  # one per item, None when no item has one
    single: bool = False  # a single request: one item, answered as Vault answers one


def from_body(raw: bytes) -> Column | None:
    """The column of a body in one of the usual serializations of a batch of plaintexts only
    (trailing whitespace allowed: Go's encoder ends with a newline), or None. Whether the texts
    are all base64 is for the decoder to say (``engine.Records.from_base64``)."""
    found = frame(raw, _SERIALIZATIONS)
    if found is None:
        return None
    start, end, between = found
    return Column(memoryview(raw)[start:end], None, between, 0, "", None)


def unparsed(raw: bytes) -> Generator[None, None, list[Column] | None]:
    """``from_body``'s column in groups of about ``COLUMN_BYTES``, each cut at a separator, if
    every text of every group is canonical base64; else None (the body is then read item by
    item, ``_items.read``, which reports what is wrong). Pauses between two groups, as
    ``_items.read`` does."""
    found = frame(raw, _SERIALIZATIONS)
    if found is None:
        return None
    start, end, between = found
    view, p = memoryview(raw), start
    groups: list[Column] = []
    while True:
        if groups:
            yield
        mark = p + _groups.COLUMN_BYTES
        cut = raw.find(between, mark, end) if mark < end else -1
        texts = view[p : end if cut < 0 else cut]
        try:  # checked and counted, then let go: decoded again when the group's turn comes
            count = len(engine.Records.from_base64(texts, None, between))
        except ValueError:
            return None
        groups.append(Column(texts, count, between, 0, "", None))
        if cut < 0:
            return groups
        p = cut + len(between)


Serialization = tuple[bytes, bytes, bytes]  # before the first text, between two, after the last


def frame(raw: bytes, serializations: tuple[Serialization, ...]) -> tuple[int, int, bytes] | None:
    """Where the texts of a batch in one of these serializations start and end, and what is
    between two of them (the hmac column's too: ``_hmac_column``)."""
    for head, between, tail in serializations:
        if not raw.startswith(head):
            continue
        # A few bytes of trailing whitespace at most (a long run of it is parsed instead).
        last = raw[-_TRAILING:]
        end = len(raw) - len(last) + len(last.rstrip(_JSON_SPACE))
        if raw.endswith(tail, 0, end) and end >= len(head) + len(tail):
            return len(head), end - len(tail), between
    return None


def entries(column: Column) -> list[dict[str, str]]:
    """A column's items as the parsed body would have them (an unparsed column whose group
    goes item by item: ``_encrypt``)."""
    texts = bytes(column.texts).decode("ascii").split(column.sep.decode())
    return [{"plaintext": text} for text in texts]


def column(body: Body) -> Column | None:
    """The batch, or the single request, as a column; None if it is not in the common shape."""
    batch = body.get("batch_input")
    if type(batch) is not list or not batch:
        return _single(body) if batch is None else None
    try:
        # Every entry an object with a plaintext string (anything else raises), in C loops.
        joined = _SEP.join(map(_PLAINTEXT, batch)).encode("ascii")
    except (KeyError, TypeError, UnicodeEncodeError):
        return None
    if max(map(len, batch)) == 1:  # the usual batch: plaintext only
        return Column(joined, len(batch), _NEWLINE, 0, "", None)
    return _shared(batch, joined)


def _shared(batch: list[dict[str, Any]], joined: bytes) -> Column | None:
    """Items with a reference each, or one key_version and associated_data for all (and no
    context)."""
    # C loops, cheapest refusal first: a batch of several associated_data values (the general
    # path's usual reason) leaves after one pass. Exact types: True is not a version.
    aads = list(map(_GET_AAD, batch))
    if not {*map(type, aads)} <= _AAD or len(set(aads)) != 1:
        return None
    versions = list(map(_GET_VERSION, batch))
    if not {*map(type, versions)} <= _VERSION or len(set(versions)) != 1:
        return None
    references = list(map(_GET_REFERENCE, batch))
    if not {*map(type, references)} <= _AAD:
        return None
    if any(map(_GET_CONTEXT, batch)):  # each context checked, and a derived key's used: items
        return None
    return Column(
        joined,
        len(batch),
        _NEWLINE,
        versions[0] or 0,
        aads[0] or "",
        [r or "" for r in references] if any(references) else None,
    )


def _single(body: Body) -> Column | None:
    """A single request of a plaintext, maybe one key_version and associated_data, as a column
    of one; any other field or type goes the general way (which says what is wrong)."""
    text = body.get("plaintext")
    if type(text) is not str or not body.keys() <= _SINGLE_FIELDS:
        return None
    version, aad = body.get("key_version"), body.get("associated_data")
    if type(version) not in _VERSION or type(aad) not in _AAD:
        return None
    try:
        texts = text.encode("ascii")
    except UnicodeEncodeError:
        return None
    return Column(texts, 1, _NEWLINE, version or 0, aad or "", None, single=True)


def seal(
    alg: Algorithm, key: bytes, aad: bytes, records: Records, version: int, column: Column
) -> bytes:
    """The column's entries of ``batch_results``, with commas between and no brackets, each
    what ``_encrypt``'s item path writes (``ciphertext``, ``key_version``, ``reference``)."""
    before = b'{"ciphertext":"%s%d:' % (PREFIX.encode(), version)
    after: bytes | list[bytes]
    if column.references is None:
        after = b'","key_version":%d,"reference":""}' % version
    else:
        common = b'","key_version":%d,"reference":' % version
        after = [common + orjson.dumps(r) + b"}" for r in column.references]
    return engine.seal_many_text(alg, key, aad, records, before=before, after=after, sep=b",")
