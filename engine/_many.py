"""``seal_many``/``open_many``: a batch of small records under one key, in one provider call.

Each record is sealed like the service's single-shot envelope: ``prefix || nonce ||
ciphertext || tag`` with a fresh random nonce and AAD ``prefix || aad``. Every argument and
every size is checked here, once per batch, before any cipher call; the providers trust
what they get.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from . import _binding
from ._checks import algorithm_spec, as_bytes_view, check_key
from ._records import FRAME_LEN, OpenedRecords, Records, SealedRecords, TextLayout, as_records
from ._selection import SMALL_LIMIT, SizeClass, select
from ._types import NONCE_LEN, TAG_LEN, Algorithm, BytesLike

_FIXED = NONCE_LEN + TAG_LEN


def _size_class(records: Records) -> SizeClass:
    n = len(records.lengths)
    small = len(records.data) - (FRAME_LEN * n if records.is_framed else 0) < SMALL_LIMIT * n
    return SizeClass.RECORDS_SMALL if small or n == 0 else SizeClass.RECORDS_LARGE


def _sealed_size(batch: Records, frame: int, fixed: int) -> int:
    """Bytes of the sealed records: frame + fixed + length each. From the buffer's size, with
    no pass over the lengths, when no record can outgrow a ``u32`` length field (none is
    longer than the buffer); the C side checks the layout against the lengths either way."""
    n = len(batch.lengths)
    payload = len(batch.data) - (FRAME_LEN * n if batch.is_framed else 0)
    if payload + fixed <= 0xFFFFFFFF:
        return payload + n * (frame + fixed)
    return _binding.records_size(batch.lengths, frame, fixed, False)


def _bound(prefix: BytesLike | None, aad: BytesLike | None) -> tuple[bytes, int]:
    """The AAD of every record (prefix || aad), and the prefix's length."""
    p, a = as_bytes_view(prefix, "prefix"), as_bytes_view(aad, "aad")
    return bytes(p) + bytes(a), len(p)


def seal_many(
    alg: Algorithm | str,
    key: BytesLike,
    aad: BytesLike | None,
    records: Records | Iterable[BytesLike],
    *,
    prefix: BytesLike | None = None,
    framed: bool = False,
) -> SealedRecords:
    """Seal every record under key, each as ``prefix || nonce || ciphertext || tag``.

    Nonces are fresh from the CSPRNG per record; each record's AAD is ``prefix || aad``.
    With ``framed``, each output record is preceded by its ``u32`` big-endian length.
    """
    spec = algorithm_spec(alg)
    key = check_key(spec, key)
    bound, prefix_len = _bound(prefix, aad)
    batch = as_records(records)
    frame = FRAME_LEN if framed else 0
    # Every byte of out is written (the layout has no gaps), so it need not be zeroed first;
    # a large one comes in huge pages: 4 KiB faults of a fresh 8 MiB batch cost about as much
    # as sealing it (docs/BENCHMARKS.md, "Batches of records").
    out = _binding.new_bytearray(_sealed_size(batch, frame, prefix_len + _FIXED))
    offsets = bytearray(8 * (len(batch) + 1))
    select(spec, _size_class(batch)).seal_many(
        spec, key, bound, prefix_len, batch, framed, out, offsets
    )
    return SealedRecords(out, offsets, frame)


def seal_many_text(
    alg: Algorithm | str,
    key: BytesLike,
    aad: BytesLike | None,
    records: Records | Iterable[BytesLike],
    *,
    before: bytes = b"",
    after: BytesLike | Sequence[BytesLike] = b"",
    sep: bytes = b"",
    head: bytes = b"",
    tail: bytes = b"",
) -> bytes:
    """Seal every record under key and write the batch as text, in one provider call.

    Each record is sealed with a fresh random nonce and AAD aad, and written as ``before ||
    base64(nonce || ciphertext || tag) || after`` (standard padded base64; ``after`` may be a
    list: one suffix per record), with ``sep`` between records, ``head`` before the first
    and ``tail`` after the last. So a caller can have a JSON array, a line per record or any
    such text made with no Python object per record (``Records.from_base64`` is the way in).
    """
    spec = algorithm_spec(alg)
    key = check_key(spec, key)
    batch = as_records(records)
    layout = TextLayout(head, before, after, sep, tail)
    if layout.after_lengths is not None and len(layout.after_lengths) != len(batch):
        raise ValueError("records: one suffix per record")
    size = layout.size(batch.lengths, _FIXED)
    out, p = _binding.new_bytes(size)
    select(spec, _size_class(batch)).seal_many_text(
        spec, key, as_bytes_view(aad, "aad"), batch, layout, p, size
    )
    return out


def open_many(
    alg: Algorithm | str,
    key: BytesLike,
    aad: BytesLike | None,
    records: Records | Iterable[BytesLike],
    *,
    prefix: BytesLike | None = None,
) -> OpenedRecords:
    """Open every ``prefix || nonce || ciphertext || tag`` record, each with AAD ``prefix || aad``.

    Never raises for a bad record: its status says why (``RecordStatus``) and its plaintext
    is not released.
    """
    spec = algorithm_spec(alg)
    key = check_key(spec, key)
    bound, prefix_len = _bound(prefix, aad)
    batch = as_records(records)
    # Not zeroed first either: every record's region is written, with its plaintext or,
    # for a record not OK, with zeros (sf_open_batch and the cryptography provider).
    out = _binding.new_bytearray(_binding.records_size(batch.lengths, 0, prefix_len + _FIXED, True))
    offsets = bytearray(8 * (len(batch) + 1))
    status = bytearray(len(batch))
    select(spec, _size_class(batch)).open_many(
        spec, key, bound, prefix_len, batch, out, offsets, status
    )
    return OpenedRecords(out, offsets, status)
