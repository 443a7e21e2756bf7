"""Batches of small records: the input (``Records``) and the outputs of ``seal_many``/``open_many``.

A batch is one buffer and a ``u32`` lengths array, whichever way it came in: a list of
bytes-like objects (joined once), a buffer plus lengths, or a buffer of ``u32 big-endian
length || bytes`` records whose framing the C side parses. The providers then walk that
buffer with no Python object per record. The outputs are one buffer too, with an offsets
table; a record becomes a ``bytes`` object only when it is asked for.

The providers take ``Records`` and ``TextLayout`` as they are, so this module sits below them
and uses nothing but the binding and the argument checks (docs/ENGINE.md, "Layers").
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence

from . import _binding
from ._checks import as_bytes_view
from ._errors import DecryptionError
from ._types import BytesLike, RecordStatus

FRAME_LEN = 4
_BASE64_BYTES = frozenset(
    bytes((c,)) for c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
)
_OK = RecordStatus.OK
_BYTES_LIKE = (bytes, bytearray, memoryview)

if array("I").itemsize != 4:  # the C side reads the lengths as uint32_t
    raise ImportError("sealflow needs a 4-byte C unsigned int")


def _lengths(values: Iterable[int]) -> array[int]:
    try:
        return array("I", values)
    except OverflowError:
        raise ValueError("records: every length must be between 0 and 2**32 - 1") from None


# From this many bytes, a list batch is copied into a buffer of its own rather than joined.
_GATHER_FROM = 4 << 20


def _gather(items: list[BytesLike] | tuple[BytesLike, ...], total: int) -> bytearray | None:
    """items end to end in a new buffer that is not zeroed and comes in huge pages (None if
    an item is not plain bytes-like). ``b"".join`` writes a fresh buffer in 4 KiB page
    faults: once a process's allocator has handed such memory back (as it does between
    batches), 2,100 faults per 8 MiB batch cost more than copying it (docs/BENCHMARKS.md,
    issue 16: 1.07x -> 2.05x of the AESGCM loop at 1 KiB records)."""
    buf = _binding.new_bytearray(total)
    o = 0
    try:
        for item in items:
            end = o + len(item)
            buf[o:end] = item
            o = end
    except (TypeError, ValueError, BufferError):
        return None
    # A memoryview of wider items copies more bytes than its len(): the buffer then grew.
    return buf if o == total == len(buf) else None


class Records:
    """One batch of records over one buffer, validated once: build it with a ``from_`` method."""

    __slots__ = ("data", "is_framed", "lengths")

    def __init__(self, data: BytesLike, lengths: array[int], is_framed: bool) -> None:
        frame = FRAME_LEN if is_framed else 0
        if _binding.records_size(lengths, frame, 0, False) != len(data):
            raise ValueError("records: the lengths do not add up to the buffer's size")
        self.data = data
        self.lengths = lengths
        self.is_framed = is_framed

    @classmethod
    def from_list(cls, items: Iterable[BytesLike]) -> Records:
        """Records from bytes-like objects (joined into one buffer: one copy)."""
        if isinstance(items, (*_BYTES_LIKE, str)):
            raise TypeError(
                "records must be an iterable of bytes-like objects (one buffer: "
                "Records.from_framed or Records.from_lengths)"
            )
        items = items if isinstance(items, (list, tuple)) else list(items)
        try:
            lengths = _lengths(map(len, items))
        except TypeError:
            raise TypeError("records must be bytes-like objects") from None
        total = _binding.records_size(lengths, 0, 0, False)
        data: bytes | bytearray | None = _gather(items, total) if total >= _GATHER_FROM else None
        if data is None:
            try:
                data = b"".join(items)
            except TypeError:
                raise TypeError("records must be bytes-like objects") from None
            if total != len(data):
                # A memoryview of wider items: its len() counts items, join() takes its bytes.
                lengths = _lengths(memoryview(item).nbytes for item in items)
        return cls(data, lengths, False)

    @classmethod
    def from_lengths(cls, data: BytesLike, lengths: Iterable[int]) -> Records:
        """Records laid end to end in data, of these lengths (which must cover data exactly)."""
        return cls(as_bytes_view(data, "records"), _lengths(lengths), False)

    @classmethod
    def from_base64(
        cls, column: BytesLike, count: int | None = None, sep: bytes = b"\n"
    ) -> Records:
        """Records decoded from standard padded base64 texts separated by sep, in one native
        pass: ``b"\\n".join(texts)`` of ``str.encode``d texts, say, or texts between the
        fixed bytes of a serialization (a separator of several bytes). Exactly count texts, or
        as many as there are (None; an empty column is one empty text).

        Canonical base64 only (the alphabet, ``=`` padding to a multiple of 4, zero trailing
        bits); ValueError for anything else, a separator cut short, or another number of
        texts, so that a caller with a more lenient decoder can take such a batch its own way.
        sep must not start with a base64 character (texts end at its first byte).
        """
        if not sep or sep[:1] in _BASE64_BYTES:
            raise ValueError("records: the separator must not start with a base64 character")
        buf, used, lengths = _binding.base64_column(as_bytes_view(column, "column"), count, sep)
        return cls(buf if used == len(buf) else memoryview(buf)[:used], lengths, False)

    @classmethod
    def from_framed(cls, data: BytesLike) -> Records:
        """Records framed as ``u32 big-endian length || bytes``, filling data exactly."""
        data = as_bytes_view(data, "records")
        return cls._parsed(data, _binding.frame_lengths(data))

    @staticmethod
    def complete_frames(data: BytesLike, max_len: int) -> tuple[int, int]:
        """How many framed records are complete at the start of data, and the bytes they take,
        in one native pass and no copy; ValueError as soon as a record declares more than
        max_len bytes (its last, incomplete one too, once its length field is there)."""
        return _binding.complete_frames(as_bytes_view(data, "records"), max_len)

    @classmethod
    def from_stream(cls, data: BytesLike, max_len: int) -> tuple[Records, int]:
        """The framed records complete at the start of data (a stream's batch, whose last
        record may still be arriving), and the bytes they take. ValueError as soon as a
        record declares more than max_len bytes, before its bytes arrive."""
        data = as_bytes_view(data, "records")
        lengths, used = _binding.scan_frames(data, max_len)
        return cls._parsed(data if used == len(data) else memoryview(data)[:used], lengths), used

    @classmethod
    def _parsed(cls, data: BytesLike, lengths: array[int]) -> Records:
        """Framed records whose lengths the C side has just read from data's own framing, in
        the same pass that found where they end: nothing to check again."""
        records = cls.__new__(cls)
        records.data, records.lengths, records.is_framed = data, lengths, True
        return records

    def __len__(self) -> int:
        return len(self.lengths)


def as_records(records: Records | Iterable[BytesLike]) -> Records:
    return records if isinstance(records, Records) else Records.from_list(records)


class TextLayout:
    """How ``seal_many_text`` writes its records: ``head``, then each record as ``before ||
    base64(nonce || ciphertext || tag) || its suffix``, ``sep`` between records, then
    ``tail``. The suffix is ``after`` for every record, or, with ``after_lengths``, the next
    ``after_lengths[i]`` bytes of ``after`` for record i."""

    __slots__ = ("after", "after_lengths", "before", "head", "sep", "tail")

    def __init__(
        self,
        head: bytes,
        before: bytes,
        after: BytesLike | Sequence[BytesLike],
        sep: bytes,
        tail: bytes,
    ) -> None:
        for name, value in (("head", head), ("before", before), ("sep", sep), ("tail", tail)):
            if type(value) is not bytes:
                raise TypeError(f"{name} must be bytes")
        self.head, self.before, self.sep, self.tail = head, before, sep, tail
        self.after_lengths: array[int] | None = None
        if isinstance(after, bytes | bytearray | memoryview):
            self.after = as_bytes_view(after, "after")
        else:
            suffixes = Records.from_list(after)
            self.after, self.after_lengths = suffixes.data, suffixes.lengths

    def size(self, lengths: array[int], fixed: int) -> int:
        """Bytes of the text for records of these lengths, each sealed to fixed more bytes;
        ValueError if it overflows."""
        return _binding.text_size(
            lengths, fixed, len(self.before), len(self.after), self.after_lengths,
            len(self.sep), len(self.head), len(self.tail),
        )  # fmt: skip

    def suffixes(self, count: int) -> list[bytes]:
        """Each record's suffix as bytes (for a provider that writes records one by one)."""
        if self.after_lengths is None:
            return [bytes(self.after)] * count
        view, found, o = memoryview(self.after), [], 0
        for n in self.after_lengths:
            found.append(bytes(view[o : o + n]))
            o += n
        return found


class _Batch:
    __slots__ = ("_header", "_view", "data", "offsets")

    def __init__(self, data: bytearray, offsets: bytearray, header: int) -> None:
        self.data = data
        # offsets[i] is where record i starts in data (its length field first, if framed);
        # offsets[len(self)] is the end.
        self.offsets = memoryview(offsets).cast("Q")
        self._header = header
        self._view = memoryview(data)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _record(self, i: int) -> bytes:
        offsets = self.offsets
        return bytes(self._view[offsets[i] + self._header : offsets[i + 1]])

    def __getitem__(self, i: int) -> bytes:
        return self._record(range(len(self))[i])

    def __iter__(self) -> Iterator[bytes]:
        return (self._record(i) for i in range(len(self)))


class SealedRecords(_Batch):
    """The output of ``seal_many``: each record ``prefix || nonce || ciphertext || tag``.

    ``data`` holds them in order, each behind a ``u32`` big-endian length when the call asked
    for ``framed`` (then ``data`` is a ``mode=records`` response body as it is).
    """

    __slots__ = ()


class OpenedRecords(_Batch):
    """The output of ``open_many``: plaintexts end to end in ``data``, one status per record.

    A record whose status is not OK has only zeros in ``data``, and asking for it (or
    iterating over it) raises ``DecryptionError``.
    """

    __slots__ = ("status",)

    def __init__(self, data: bytearray, offsets: bytearray, status: bytearray) -> None:
        super().__init__(data, offsets, 0)
        self.status = bytes(status)  # a RecordStatus value per record

    def _record(self, i: int) -> bytes:
        if self.status[i] != _OK:
            raise DecryptionError()
        return super()._record(i)

    def indices(self, status: RecordStatus) -> list[int]:
        """The records with this status, in order."""
        found, code, i = [], bytes((status,)), -1
        while (i := self.status.find(code, i + 1)) >= 0:
            found.append(i)
        return found

    def wipe(self) -> None:
        """Overwrite every plaintext with zeros (in a way the compiler keeps)."""
        _binding.cleanse(self.data)
