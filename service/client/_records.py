"""Batches of small records (``mode=records``, docs/API.md), sans-IO: values cut into
batches, a batch framed as one request body, an answer read back into one result per record.

Framing and parsing are a value's whole client-side cost, so neither loops in Python per
value where it can be helped: a body is one join, one copy of the values (values of one
length: the request head and the values joined with their shared 4-byte prefix as the
separator; others: interleaved with ``struct``-packed prefixes by two slice assignments,
then joined), and an answer whose records all have the expected length
is cut by one ``struct.unpack`` of a repeated format (its length fields then checked); any
other answer by a loop of ``unpack_from`` and slices. One copy per result either way
(docs/BENCHMARKS.md, "Client: batches of records").
"""

from __future__ import annotations

import bisect
import functools
import itertools
import struct
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Literal

from ._errors import (
    DecryptionFailed,
    KeyNotFound,
    MalformedEnvelope,
    SealflowError,
    TransportError,
    VersionRetired,
)
from ._plan import Plan, plan

# A batch's bounds: the body bytes and the records of one request. 1 MiB keeps a body below
# the size that asks for 100 Continue (``_plan.EXPECT_ABOVE``) and is past the point where the
# per-request cost stops mattering (docs/BENCHMARKS.md, "Client: batches of records").
BATCH_BYTES = 1 << 20
BATCH_RECORDS = 65_536
DEPTH = 2  # requests in flight per call: the service seals one while the client reads another

Value = bytes | bytearray | memoryview
Errors = Literal["raise", "return"]

_U32 = struct.Struct(">I")
_STATUS_LENGTH = struct.Struct(">BI")

# A decrypted record's status byte (docs/API.md): its exception, code and HTTP status as the
# single-record call would have answered.
_FAILURES: dict[int, tuple[type[SealflowError], str, int, str]] = {
    1: (DecryptionFailed, "decryption_failed", 400, "decryption failed"),
    2: (MalformedEnvelope, "malformed_envelope", 400, "not a single-shot sealflow envelope"),
    3: (VersionRetired, "version_retired", 403, "the key version is retired"),
    4: (KeyNotFound, "key_not_found", 404, "no such key or key version"),
}


def not_bytes(values: list[Any]) -> TypeError:
    wrong = {type(v).__name__ for v in values if not isinstance(v, Value)}
    return TypeError(f"values must be bytes-like, not {', '.join(sorted(wrong))}")


def checked_limits(max_bytes: int, max_records: int) -> tuple[int, int]:
    if max_bytes < 1 or max_records < 1:
        raise ValueError("batch_bytes and batch_records must be at least 1")
    return max_bytes, max_records


Group = tuple[list[Value], list[int]]  # a batch's values and their lengths


def batches(
    values: Iterable[Value], max_bytes: int = BATCH_BYTES, max_records: int = BATCH_RECORDS
) -> Iterator[Group]:
    """The values in order, in groups of at most ``max_records`` values and ``max_bytes`` of
    body (but a single larger value alone), pulled from ``values`` a group at a time."""
    values = iter(values)
    carry: list[Value] = []
    want = max_records  # what to pull next: what the last cut group held, so none carries
    while True:
        batch = carry + list(itertools.islice(values, max(want - len(carry), 0)))
        if not batch:
            return
        try:
            lengths = list(map(len, batch))
        except TypeError:
            raise not_bytes(batch) from None
        size = sum(lengths) + 4 * len(batch)
        if size <= max_bytes:
            if size < max_bytes - max_bytes // 8:  # room for more next time
                want = min(2 * want, max_records)
            carry = []
            yield batch, lengths
            continue
        # The first record whose end passes max_bytes starts the next group (at least one).
        ends = list(itertools.accumulate(lengths))
        cut = bisect.bisect_right(range(len(batch)), max_bytes, key=lambda i: ends[i] + 4 * i + 4)
        cut = max(cut, 1)
        carry, want = batch[cut:], cut
        yield batch[:cut], lengths[:cut]


async def abatches(
    values: Iterable[Value] | AsyncIterable[Value],
    max_bytes: int = BATCH_BYTES,
    max_records: int = BATCH_RECORDS,
) -> AsyncGenerator[Group, None]:
    """``batches`` of an iterable or an async iterable."""
    if not isinstance(values, AsyncIterable):
        for group in batches(values, max_bytes, max_records):
            yield group
        return
    batch: list[Value] = []
    lengths: list[int] = []
    size = 0
    async for value in values:
        if not isinstance(value, Value):
            raise not_bytes([value])
        n = len(value)
        if batch and (size + 4 + n > max_bytes or len(batch) >= max_records):
            yield batch, lengths
            batch, lengths, size = [], [], 0
        batch.append(value)
        lengths.append(n)
        size += 4 + n
    if batch:
        yield batch, lengths


class Batch:
    """One batch: its values' count and the index of its first, the request (``head(length)``
    then the body from ``start``), and what its answer should hold: ``same`` is the one
    length all its values have, if they do, ``overhead`` what sealing adds to a value."""

    __slots__ = ("body", "count", "first", "overhead", "same", "start")

    def __init__(
        self, head: Callable[[int], bytes], group: Group, first: int, overhead: int | None
    ) -> None:
        values, lengths = group
        self.count, self.first, self.overhead = len(values), first, overhead
        try:
            if not self._frame(head, values, lengths):
                # A memoryview of wider items: its len() counts items, the join takes its
                # bytes (the framing would have declared fewer than it sent).
                self._frame(head, values, [memoryview(v).nbytes for v in values])
        except TypeError:
            raise not_bytes(values) from None

    def _frame(self, head: Callable[[int], bytes], values: list[Value], lengths: list[int]) -> bool:
        """Frame the body; whether its values held the bytes ``lengths`` says."""
        count = self.count
        self.same = lengths[0] if count and lengths.count(lengths[0]) == count else None
        size = sum(lengths) + 4 * count
        first_part = head(size)
        self.start = len(first_part)
        if self.same is not None:
            # The one prefix between the head and each value: one join with it as the
            # separator writes the body in one copy (a join of a join made two).
            parts: list[Value] = [first_part]
            parts += values
            self.body = _U32.pack(self.same).join(parts)
        else:
            # head, then prefix and value by turns: two slice assignments, one join.
            parts = [first_part] * (2 * count + 1)
            parts[1::2] = map(_U32.pack, lengths)
            parts[2::2] = values
            self.body = b"".join(parts)
        return len(self.body) == self.start + size


def overhead(key: str) -> int:
    """What a single-shot envelope adds to its plaintext under ``key``: the prefix (11 bytes
    and the name), the nonce and the tag (docs/API.md, "The envelope")."""
    return 11 + len(key.encode()) + 12 + 16


def envelope_overhead(envelope: Value) -> int | None:
    """``overhead`` as an envelope's prefix says it (its name length is its 11th byte)."""
    return 11 + envelope[10] + 12 + 16 if len(envelope) > 10 else None


@functools.lru_cache(maxsize=8)
def _layout(unit: str, count: int) -> struct.Struct:
    return struct.Struct(">" + unit * count)


def _cut(answer: bytes, unit: str, count: int) -> tuple[Any, ...] | None:
    """The answer unpacked at once when each record is laid out as ``unit`` (records of one
    length): every field of every record, or None when it is not so laid out."""
    layout = _layout(unit, count)
    if layout.size != len(answer):
        return None
    return layout.unpack(answer)


def sealed(answer: bytes, batch: Batch) -> Sequence[bytes]:
    """The envelopes of an encrypt's answer: ``u32 length || envelope`` per record. With
    values of one length and the batch's ``overhead`` (a guess, checked), the answer is cut
    by one ``struct`` call."""
    count, overhead = batch.count, batch.overhead
    if batch.same is not None and overhead is not None:
        n = batch.same + overhead
        fields = _cut(answer, f"I{n}s", count)
        if fields is not None and fields[0::2].count(n) == count:
            return fields[1::2]  # a tuple: the caller only iterates over it
    out: list[bytes] = []
    unpack = _U32.unpack_from
    append, offset, end = out.append, 0, len(answer)
    try:
        for _ in range(count):
            (n,) = unpack(answer, offset)
            offset += 4
            append(answer[offset : offset + n])
            offset += n
    except struct.error:
        offset = end + 1
    if offset != end:
        raise TransportError(f"the service answered a batch of {count} records wrongly")
    return out


def opened(
    answer: bytes, batch: Batch, errors: Errors
) -> tuple[Sequence[bytes | SealflowError], SealflowError | None]:
    """The plaintexts of a decrypt's answer (``u8 status || u32 length || bytes`` each); a
    failed record's exception in its place, named by its index; when ``errors`` is "raise",
    the records before the first failure and its exception (to raise once they are given).
    With the batch's ``overhead`` (as for ``sealed``), envelopes of one length that all
    opened are cut by one ``struct`` call."""
    count, overhead = batch.count, batch.overhead
    if batch.same is not None and overhead is not None and batch.same >= overhead:
        n = batch.same - overhead
        fields = _cut(answer, f"BI{n}s", count)
        if fields is not None and fields[0::3].count(0) == count and fields[1::3].count(n) == count:
            return fields[2::3], None  # a tuple, as in sealed()
    out: list[bytes | SealflowError] = []
    unpack = _STATUS_LENGTH.unpack_from
    append, offset, end = out.append, 0, len(answer)
    first = batch.first
    try:
        for i in range(count):
            status, n = unpack(answer, offset)
            offset += 5
            if status:
                error = record_error(status, first + i)
                if errors == "raise":
                    return out, error
                append(error)
            else:
                append(answer[offset : offset + n])
            offset += n
    except struct.error:
        offset = end + 1
    if offset != end:
        raise TransportError(f"the service answered a batch of {count} records wrongly")
    return out, None


def record_error(status: int, index: int) -> SealflowError:
    """The exception of a record that failed, with its index (``.index``)."""
    found = _FAILURES.get(status)
    if found is None:
        return SealflowError(f"record {index}: unknown status {status}", index=index)
    kind, code, http, message = found
    return kind(f"record {index}: {message}", status=http, code=code, index=index)


@dataclass(frozen=True)
class Records:
    """One ``encrypt_many`` or ``decrypt_many`` call: where its batches go and how their
    answers read. ``key``: an encrypt's (None for a decrypt)."""

    path: str
    headers: bytes
    key: str | None
    errors: Errors = "raise"

    def plan(self, length: int) -> Plan:
        """A batch's request: its body is in memory, sent with the head in one write, and
        answered whole after it (no full duplex)."""
        return plan("POST", self.path, length, self.headers, small_max=length)

    def batch(self, prefix: str, prelude: bytes, group: Group, first: int) -> Batch:
        """The batch's body, after its request head (``Batch.start`` says where it begins)."""

        def head(length: int) -> bytes:
            return self.plan(length).head(prefix, prelude)

        values = group[0]
        guess = overhead(self.key) if self.key is not None else envelope_overhead(values[0])
        return Batch(head, group, first, guess)

    def results(self, answer: bytes, batch: Batch) -> tuple[Sequence[Any], SealflowError | None]:
        """The batch's results, and the exception to raise after them (if any)."""
        if self.key is not None:
            return sealed(answer, batch), None
        return opened(answer, batch, self.errors)
