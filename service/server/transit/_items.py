"""A request's items: ``batch_input``, or the one item its top-level fields make.

Transit treats a single request as a batch of one and answers it without the batch wrapping;
``batch_input`` items are read like OpenBao's ``decodeBatchRequestItems`` (a field of the
wrong type is an error naming it, ``null`` counts as absent). Malformed ``batch_input`` is a
400 here, where OpenBao answers 500 (docs/TRANSIT.md).

``read`` reads a request body in groups of items (``_groups`` cuts the bytes; a body it cannot
cut is parsed whole, and its list read in groups) and checks the whole batch before anything is
done with it: the JSON, then the number of items (``max_batch_items``), then every item's
fields. The plans (``_run``) then take the groups one at a time; a group is parsed again when
it comes, so that at most one group's objects exist at once. What parsing takes is paid from
the request's memory budget.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from operator import methodcaller
from typing import Any, TypeVar

import orjson

from .._budget import Hold
from ..errors import ApiError
from . import _groups, _wire
from ._wire import Body

MISSING_BATCH = "missing batch input to process"
# Transit's refusal of a batch whose items do not all carry a context, or all lack one
# (any key: derived or not), before the key is looked up.
CONTEXT_ALL_OR_NONE = "context should be set either in all the request blocks or in none"
_STRING = (str, type(None))
GROUP_ITEMS = 8192  # the items of a group when the body was parsed whole
_FIELDS = ("plaintext", "ciphertext", "associated_data", "reference", "key_version", "context")
Groups = Callable[[], Iterator[tuple[int, list[Any]]]]  # (index of the first item, items)
T = TypeVar("T")
Reading = Generator[None, None, T]  # work in steps, each yield a pause; returns what it read


@dataclass(slots=True)
class Item:
    text: str  # base64 plaintext (encrypt) or a vault:v ciphertext (decrypt, rewrap)
    version: int  # key_version; 0 is the latest
    aad: str  # base64 associated_data
    reference: str
    context: str = ""  # base64 context (a derived key's, else ignored once checked)


@dataclass(slots=True)
class Request:
    """A request body read and checked: its top-level fields (a batch's without
    ``batch_input``), how many items it has, and its ``batch_input`` group by group (None: a
    single request, whose one item is in its fields)."""

    fields: Body
    count: int
    groups: Groups | None


def read(raw: bytes, field: str, hold: Hold, limit: int) -> Reading[Request]:
    """The body's fields and items, every item checked (``field``: ``plaintext`` or
    ``ciphertext``), at most ``limit`` of them; Transit's error for the first problem. A
    generator that pauses between two groups (``_run`` lets other requests run then) and
    returns the request."""
    fields = single(raw, hold)
    if fields is not None:
        return Request(fields, 1, None)
    found = _groups.split(raw)
    request = None if found is None else (yield from _read_split(raw, found, field, hold, limit))
    if request is not None:
        return request
    body = _wire.parse(raw, hold)  # whole, its objects paid for until the request ends
    batch = body.get("batch_input")
    if batch is None:
        return Request(body, 1, None)
    if not isinstance(batch, list):
        raise _parse_error([f"source data must be an array or slice, got {_wire.go_type(batch)}"])
    fields = {name: value for name, value in body.items() if name != "batch_input"}

    def groups() -> Iterator[tuple[int, list[Any]]]:
        for i in range(0, len(batch), GROUP_ITEMS):
            yield i, batch[i : i + GROUP_ITEMS]

    check = _Check(field, limit, deep=len(batch) > GROUP_ITEMS)
    for offset, entries in groups():
        if offset:
            yield
        check.group(offset, entries)
    check.done()
    return Request(fields, len(batch), groups)


def single(raw: bytes, hold: Hold) -> Body | None:
    """The fields of a body that can only be a single request, read as ``read`` reads it (the
    same parse, paid alike, the same errors); None if it may hold a ``batch_input``: a body
    whose bytes have neither that name nor a JSON escape (which could spell it) has none."""
    if b"batch_input" in raw or b"\\" in raw:
        return None
    return _wire.parse(raw, hold)


def too_many_items(limit: int) -> ApiError:
    return _wire.user_error(f"failed to parse batch input: more than {limit} items in one request")


class _Check:
    """The whole batch's checks, group by group, raised once every group is read: the number of
    items first, then the first item that is not an object, else every field problem. A batch
    of one group has its items checked when they are read for their work, before any of it,
    as every request was before groups: ``items`` raises the same errors (``deep=False``)."""

    def __init__(self, field: str, limit: int, deep: bool) -> None:
        self.field = field
        self.limit = limit
        self.deep = deep
        self.count = 0
        self.problems: list[str] = []
        self.error: ApiError | None = None
        self.contexts: set[bool] = set()  # whether items carry a context: one value, or 400

    def group(self, offset: int, entries: list[Any]) -> None:
        self.count += len(entries)
        # An item that is not an object: ``done`` says so first.
        with contextlib.suppress(AttributeError):
            self.contexts |= {*map(bool, map(_GET["context"], entries))}
        # A batch of one group has its items checked later (``items``), unless its contexts
        # mix: then now, since what is wrong with its items is said before that.
        mixed = len(self.contexts) > 1
        if (not self.deep and not mixed) or self.error is not None or self.count > self.limit:
            return
        if not _usual(entries, self.field):
            try:
                _batch(entries, self.field, offset, self.problems)
            except ApiError as exc:  # an item that is not an object: the one error reported
                self.error = exc

    def done(self) -> None:
        if self.count > self.limit:
            raise too_many_items(self.limit)
        if self.error is not None:
            raise self.error
        if self.problems:
            raise _parse_error(self.problems)
        if len(self.contexts) > 1:
            raise _wire.user_error(CONTEXT_ALL_OR_NONE)
        if not self.count:
            raise _wire.user_error(MISSING_BATCH)


_GET = {name: methodcaller("get", name) for name in _FIELDS}
_NONE = type(None)
_STRINGS = {str, _NONE}
_VERSIONS = {int, _NONE}


def _usual(entries: list[Any], field: str) -> bool:
    """Whether ``_batch`` would find nothing wrong for sure: every item an object, its text a
    string (a ciphertext maybe null), its ``associated_data`` and ``reference`` strings or null,
    its ``key_version`` an integer or null. A few C loops over the group, where ``_batch`` takes
    a Python step per item (the request is read twice: ``read``, then the plans)."""
    if {*map(type, entries)} != {dict}:
        return False
    texts = {*map(type, map(_GET[field], entries))}
    if not texts <= ({str} if field == "plaintext" else _STRINGS):
        return False
    strings = {*map(type, map(_GET["associated_data"], entries))}
    strings |= {*map(type, map(_GET["reference"], entries))}
    strings |= {*map(type, map(_GET["context"], entries))}
    return strings <= _STRINGS and {*map(type, map(_GET["key_version"], entries))} <= _VERSIONS


def _read_split(
    raw: bytes, found: _groups.Split, field: str, hold: Hold, limit: int
) -> Reading[Request | None]:
    """The request read through ``found``; None if a part does not parse (then the body is
    parsed whole, which answers what is wrong, or reads what this did not expect)."""
    fields = _parsed(found.outside, hold)
    if not isinstance(fields, dict):
        return None
    fields.pop(_groups.PLACEHOLDER, None)
    if "batch_input" in fields:  # the key again, spelled with an escape
        return None
    check = _Check(field, limit, deep=len(found.spans) > 1)
    for start, end in found.spans:
        if check.count:
            yield
        entries, cost = _span(raw, start, end, hold)
        if not isinstance(entries, list):
            hold.give_back(cost)
            return None
        check.group(check.count, entries)
        if len(found.spans) == 1:  # the usual request: one group, kept rather than parsed again
            check.done()
            return Request(fields, check.count, _one(entries))
        del entries
        hold.give_back(cost)
    check.done()

    def groups() -> Iterator[tuple[int, list[Any]]]:
        offset = 0
        for start, end in found.spans:
            entries, cost = _span(raw, start, end, hold)
            assert isinstance(entries, list)  # it parsed when the request was read
            yield offset, entries
            offset += len(entries)
            del entries  # this group's objects go before the next group's come
            hold.give_back(cost)

    return Request(fields, check.count, groups)


def _one(entries: list[Any]) -> Groups:
    def groups() -> Iterator[tuple[int, list[Any]]]:
        yield 0, entries

    return groups


def _parsed(data: bytes | bytearray, hold: Hold) -> Any:
    """data parsed, its cost taken for good; None if it is not JSON."""
    hold.take(_wire.parse_cost(data))
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _span(raw: bytes, start: int, end: int, hold: Hold) -> tuple[Any, int]:
    """The items of a span, parsed as a JSON array (None if they are not one), and the cost
    taken for them, for the caller to give back once it is done with them."""
    data = bytearray(end - start + 2)  # one copy: ``[`` + span + ``]``
    data[0], data[-1] = 0x5B, 0x5D
    data[1:-1] = memoryview(raw)[start:end]
    cost = _wire.parse_cost(data)
    hold.take(cost)
    try:
        return orjson.loads(data), cost
    except orjson.JSONDecodeError:
        return None, cost


def items(body: Body, field: str, missing: str, offset: int = 0) -> tuple[list[Item], bool]:
    """The request's items and whether they came from ``batch_input``.

    ``field`` is ``plaintext`` or ``ciphertext``; ``missing`` is Transit's message when the
    single request lacks it; ``offset`` numbers the items of a group (``read``) in messages.
    """
    batch = body.get("batch_input")
    if batch is not None:
        parsed = _batch(batch, field, offset)
        if not parsed:
            raise _wire.user_error(MISSING_BATCH)
        return parsed, True
    text = _wire.as_str(body, field)
    if field not in body or body[field] is None or (field == "ciphertext" and not text):
        raise _wire.user_error(missing)
    version = _wire.as_int(body, "key_version")
    aad, context = _wire.as_str(body, "associated_data"), _wire.as_str(body, "context")
    return [Item(text, version, aad, "", context)], False


def _batch(
    raw: object, field: str, offset: int = 0, problems: list[str] | None = None
) -> list[Item]:
    """The items; their problems go to ``problems`` if given, else raise here."""
    if not isinstance(raw, list):
        raise _parse_error([f"source data must be an array or slice, got {_wire.go_type(raw)}"])
    found: list[Item] = []
    own = problems is None
    problems = [] if problems is None else problems
    for i, entry in enumerate(raw, offset):
        if not isinstance(entry, dict):
            raise _parse_error([f"[{i}] expected a map, got '{_wire.go_type(entry)}'"])
        # Inline type checks: this loop runs once per item of batches of thousands.
        text = entry.get(field)
        aad = entry.get("associated_data")
        reference = entry.get("reference")
        context = entry.get("context")
        if (
            type(text) is not str
            or type(aad) not in _STRING
            or type(reference) not in _STRING
            or type(context) not in _STRING
        ):
            context, text, aad, reference = (
                _string(entry, name, i, problems)
                for name in ("context", field, "associated_data", "reference")
            )
            if field not in entry and field == "plaintext":
                problems.append(f"'[{i}].plaintext' missing plaintext to encrypt")
        version = entry.get("key_version")
        if version is not None and type(version) is not int:
            try:
                version = _wire.as_int(entry, "key_version")
            except ApiError:
                problems.append(
                    f"'[{i}].key_version' expected type 'int', got unconvertible type "
                    f"'{_wire.go_type(version)}'"
                )
                version = 0
        found.append(Item(text or "", version or 0, aad or "", reference or "", context or ""))
    if own and problems:
        raise _parse_error(problems)
    return found


def _string(entry: dict[str, Any], name: str, i: int, problems: list[str]) -> str | None:
    value = entry.get(name)
    if value is None or isinstance(value, str):
        return value
    problems.append(
        f"'[{i}].{name}' expected type 'string', got unconvertible type '{_wire.go_type(value)}'"
    )
    return None


def _parse_error(problems: list[str]) -> ApiError:
    return _wire.user_error("failed to parse batch input: " + "; ".join(problems))
