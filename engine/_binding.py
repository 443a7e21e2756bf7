"""The bare binding: the only module that touches the cffi ``ffi`` and ``lib``.

One Python function per C entry point it uses, after pyca/cryptography's binding: each
checks the return code and turns it into one of the engine's errors, draining OpenSSL's
error queue (``NativeError``). It checks no argument and knows no provider, batch or codec:
the modules above validate once, and ``_native`` maps the provider interface onto it.

Each thread owns one cached ``EVP_CIPHER_CTX`` per algorithm, kept in the C
side's thread-local storage and freed when the thread ends; the context
strategy decides when it is re-keyed or freed (see ``native/sealflow_native.c``).
"""

from __future__ import annotations

import ctypes
from array import array
from typing import Any

from sealflow.native._sealflow_native import ffi, lib

from sealflow.native import MIN_OPENSSL_VERSION_TEXT

from ._errors import DecryptionError, NativeError
from ._types import TAG_LEN, Algorithm, AlgorithmSpec, BytesLike, ContextStrategy, RecordStatus

# Indexed by the C side's SF_EV_* and SF_LAZY/SF_HYBRID/SF_EAGER (native/sealflow_native.h).
EVENTS = ("created", "rekeyed", "reused", "freed")
STRATEGIES = ("lazy", "hybrid", "eager")
# AlgorithmSpec.index is the position in the C cipher table.
if (len(EVENTS), len(STRATEGIES), len(Algorithm), tuple(RecordStatus)) != (
    lib.SF_EVENTS,
    lib.SF_STRATEGIES,
    lib.SF_ALGORITHMS,
    (lib.SF_REC_OK, lib.SF_REC_FAILED, lib.SF_REC_OTHER_PREFIX),
):
    raise ImportError("sealflow.native was built from another sealflow_native.h: rebuild it")


def _drain_errors() -> str:
    messages = []
    buf = ffi.new("char[]", 256)
    while (code := lib.ERR_get_error()) != 0:
        lib.ERR_error_string_n(code, buf, 256)
        messages.append(ffi.string(buf).decode("ascii", "replace"))
    return "; ".join(messages) or "unknown OpenSSL error"


def _raise(rc: int) -> None:
    if rc == lib.SF_ERR_AUTH:
        raise DecryptionError()
    if rc == lib.SF_ERR_OPENSSL:
        raise NativeError(_drain_errors())
    lib.ERR_clear_error()
    if rc == lib.SF_ERR_LIMIT:
        raise ValueError("C2SP chunk counter limit (2**38 chunks) reached")
    raise ValueError("invalid arguments to the native AEAD call")


def _startup() -> None:
    if lib.sf_openssl_version_num() < lib.SF_MIN_OPENSSL_VERSION:
        raise ImportError(f"sealflow needs OpenSSL libcrypto >= {MIN_OPENSSL_VERSION_TEXT}")
    rc = lib.sf_init()
    if rc:
        _raise(rc)


_startup()
_from_buffer = ffi.from_buffer
_seal, _open = lib.sf_seal, lib.sf_open
_chunks_seal, _chunks_open = lib.sf_chunks_seal, lib.sf_chunks_open
_seal_small, _open_small, _unpack = lib.sf_seal_small, lib.sf_open_small, ffi.unpack
_seal_many, _open_many = lib.sf_seal_many, lib.sf_open_many
_base64_column, _seal_many_text = lib.sf_base64_column, lib.sf_seal_many_text
_hmac_many, _hmac_small = lib.sf_hmac_many, lib.sf_hmac_small
NULL = ffi.NULL
# Largest message the small variants take (the C scratch buffer).
SCRATCH_LIMIT = lib.SF_SCRATCH_LEN - TAG_LEN

# A bytes object whose bytes are not written yet: CPython's documented
# PyBytes_FromStringAndSize(NULL, n). The bytes API fills it in place before the object is
# returned, so each result is allocated once and written once (a bytearray and a bytes()
# copy of it took two fresh allocations and a copy: 0.12x of update_into at 1 MiB).
_uninitialized = ctypes.pythonapi.PyBytes_FromStringAndSize
_uninitialized.restype = ctypes.py_object
_uninitialized.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
_uninitialized_array = ctypes.pythonapi.PyByteArray_FromStringAndSize
_uninitialized_array.restype = ctypes.py_object
_uninitialized_array.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
_HUGE_OUTPUT = lib.SF_HUGE_OUTPUT
_buffer = ffi.buffer


def _in(data: BytesLike) -> Any:
    # cffi passes bytes to `const char *` without a copy; other buffers need a view.
    return data if type(data) is bytes else _from_buffer(data)


def new_bytes(size: int) -> tuple[bytes, Any]:
    """A new ``bytes`` of size bytes to fill in place, and a cffi pointer to its bytes.

    The caller writes every byte through the pointer (or ``writable``) before the object is
    seen by anyone else, and drops it (after ``cleanse``) if it cannot. Large ones are asked
    to use huge pages (``sf_advise_huge``).
    """
    out: bytes = _uninitialized(None, size)
    p = _from_buffer(out)
    if size >= _HUGE_OUTPUT:
        lib.sf_advise_huge(p, size)
    return out, p


def new_bytearray(size: int) -> bytearray:
    """A new ``bytearray`` of size bytes that are not zeroed (``bytearray(size)`` zeroes them,
    which faults fresh memory in 4 KiB pages before the huge-page advice could apply): for
    a caller that writes every byte before the buffer is seen, and drops it if it cannot."""
    out: bytearray = _uninitialized_array(None, size)
    if size >= _HUGE_OUTPUT:
        lib.sf_advise_huge(_from_buffer(out), size)
    return out


def writable(p: Any, size: int) -> memoryview:
    """A writable view of size bytes at p (a ``new_bytes`` pointer), for code that fills
    buffers through the buffer protocol (``cryptography``'s ``_into`` calls)."""
    return memoryview(_buffer(p, size))


# One message, or one run of chunks: these take the provider interface's own arguments, so
# that NativeProvider uses them as its methods, with no wrapper adding a call per message.


def seal(
    spec: AlgorithmSpec, key: BytesLike, nonce: BytesLike, aad: BytesLike, data: BytesLike
) -> bytes:
    """ciphertext || tag of data (sf_seal_small through the C scratch buffer, else sf_seal)."""
    n = len(data)
    if n > SCRATCH_LIMIT:
        out, p = new_bytes(n + TAG_LEN)
        rc = _seal(spec.index, _in(key), _in(nonce), _in(aad), len(aad), _in(data), n, p)
        if rc:
            _raise(rc)
        return out
    p = _seal_small(spec.index, _in(key), _in(nonce), _in(aad), len(aad), _in(data), n)
    if p == NULL:
        _raise(lib.sf_scratch_error())
    result: bytes = _unpack(p, n + TAG_LEN)
    return result


def open(
    spec: AlgorithmSpec, key: BytesLike, nonce: BytesLike, aad: BytesLike, sealed: BytesLike
) -> bytes:
    """The plaintext of sealed (ciphertext || tag), or DecryptionError."""
    n = len(sealed) - TAG_LEN
    if n > SCRATCH_LIMIT:
        out, p = new_bytes(n)
        rc = _open(spec.index, _in(key), _in(nonce), _in(aad), len(aad), _in(sealed), n, p)
        if rc:
            lib.sf_cleanse(p, n)  # sf_open wipes on a bad tag, not on an OpenSSL error
            _raise(rc)
        return out
    p = _open_small(spec.index, _in(key), _in(nonce), _in(aad), len(aad), _in(sealed), n)
    if p == NULL:
        _raise(lib.sf_scratch_error())
    result: bytes = _unpack(p, n)
    return result


def seal_into(
    spec: AlgorithmSpec,
    key: BytesLike,
    nonce: BytesLike,
    aad: BytesLike,
    data: BytesLike,
    out: bytearray | memoryview,
) -> None:
    rc = _seal(
        spec.index, _in(key), _in(nonce), _in(aad), len(aad), _in(data), len(data),
        _from_buffer(out),
    )  # fmt: skip
    if rc:
        _raise(rc)


def open_into(
    spec: AlgorithmSpec,
    key: BytesLike,
    nonce: BytesLike,
    aad: BytesLike,
    sealed: BytesLike,
    out: bytearray | memoryview,
) -> None:
    rc = _open(
        spec.index, _in(key), _in(nonce), _in(aad), len(aad), _in(sealed), len(sealed) - TAG_LEN,
        _from_buffer(out),
    )  # fmt: skip
    if rc:
        _raise(rc)


def chunks_seal_into(
    spec: AlgorithmSpec,
    key: bytes,
    base_nonce: bytes,
    counter: int,
    data: BytesLike,
    final: bool,
    out: bytearray | memoryview,
) -> None:
    rc = _chunks_seal(
        spec.index, key, base_nonce, counter, _in(data), len(data), final, _from_buffer(out)
    )
    if rc:
        _raise(rc)


def chunks_open_into(
    spec: AlgorithmSpec,
    key: bytes,
    base_nonce: bytes,
    counter: int,
    sealed: BytesLike,
    final: bool,
    out: bytearray | memoryview,
) -> None:
    rc = _chunks_open(
        spec.index, key, base_nonce, counter, _in(sealed), len(sealed), final, _from_buffer(out)
    )
    if rc:
        _raise(rc)


# Batches: records end to end in data, of these u32 lengths (each behind its own u32 length
# when is_framed); the C side plans every size before the first cipher call (sf_plan).


def seal_many(
    spec: AlgorithmSpec,
    key: BytesLike,
    aad: BytesLike,
    prefix_len: int,
    data: BytesLike,
    lengths: array[int],
    is_framed: bool,
    framed: bool,
    out: bytearray,
    offsets: bytearray,
) -> None:
    rc = _seal_many(
        spec.index, _in(key), _in(aad), len(aad), prefix_len, _in(data), len(data),
        _from_buffer("uint32_t[]", lengths), len(lengths), is_framed, framed,
        _from_buffer(out), len(out), _from_buffer("uint64_t[]", offsets),
    )  # fmt: skip
    if rc:
        _raise(rc)


def open_many(
    spec: AlgorithmSpec,
    key: BytesLike,
    aad: BytesLike,
    prefix_len: int,
    data: BytesLike,
    lengths: array[int],
    is_framed: bool,
    out: bytearray,
    offsets: bytearray,
    status: bytearray,
) -> None:
    rc = _open_many(
        spec.index, _in(key), _in(aad), len(aad), prefix_len, _in(data), len(data),
        _from_buffer("uint32_t[]", lengths), len(lengths), is_framed,
        _from_buffer(out), len(out), _from_buffer("uint64_t[]", offsets),
        _from_buffer("unsigned char[]", status),
    )  # fmt: skip
    if rc:
        _raise(rc)


def seal_many_text(
    spec: AlgorithmSpec,
    key: BytesLike,
    aad: BytesLike,
    data: BytesLike,
    lengths: array[int],
    before: bytes,
    after: BytesLike,
    after_lengths: array[int] | None,
    sep: bytes,
    head: bytes,
    tail: bytes,
    out: Any,
    size: int,
) -> None:
    """Seal each record and write ``head``, each record as ``before || base64(sealed) ||
    suffix`` (``after``, or its next ``after_lengths[i]`` bytes), ``sep`` between records and
    ``tail`` into out: a ``new_bytes`` pointer to exactly ``text_size`` bytes."""
    rc = _seal_many_text(
        spec.index, _in(key), _in(aad), len(aad), _in(data), len(data),
        _from_buffer("uint32_t[]", lengths), len(lengths), before, len(before),
        _in(after), len(after),
        NULL if after_lengths is None else _from_buffer("uint32_t[]", after_lengths),
        sep, len(sep), head, len(head), tail, len(tail), out, size,
    )  # fmt: skip
    if rc:
        _raise(rc)


def hmac_many(
    digest: int,
    key: BytesLike,
    data: BytesLike,
    lengths: array[int],
    is_framed: bool,
    framed: bool,
    out: bytearray,
) -> None:
    """The HMAC of each record (``sf_hmac_many``) into out, one tag after another, each behind
    its ``u32`` big-endian length when framed; out holds exactly that."""
    rc = _hmac_many(
        digest, _in(key), len(key), _in(data), len(data), _from_buffer("uint32_t[]", lengths),
        len(lengths), is_framed, framed, _from_buffer(out), len(out),
    )  # fmt: skip
    if rc:
        _raise(rc)


def hmac_one(digest: int, size: int, key: BytesLike, data: BytesLike) -> bytes:
    """The HMAC of one message of under 4 GiB (``sf_hmac_small``), size bytes (its digest's
    ``sf_digest_size``)."""
    p = _hmac_small(digest, _in(key), len(key), _in(data), len(data))
    if p == NULL:
        _raise(lib.sf_scratch_error())
    tag: bytes = _unpack(p, size)
    return tag


def digest_sizes() -> tuple[int, ...]:
    """The tag size of each HMAC digest, by its index in the C table (``SF_DIGESTS``)."""
    return tuple(int(lib.sf_digest_size(i)) for i in range(lib.SF_DIGESTS))


def base64_column(
    column: BytesLike, count: int | None, sep: bytes
) -> tuple[bytearray, int, array[int]]:
    """Decode the canonical base64 texts that sep separates in column (``sf_base64_column``):
    exactly count of them, or as many as there are (None). A buffer holding them end to end,
    how many of its bytes they take, and their lengths. ValueError if a text is not canonical
    padded base64, a separator is cut short, or the count differs."""
    n = len(column)
    room = count if count is not None else n // len(sep) + 1
    out = new_bytearray(n // 4 * 3)
    lengths = array("I", bytes(4 * room))
    found, used = ffi.new("size_t *"), ffi.new("size_t *")
    if _base64_column(
        _in(column), n, sep, len(sep), room, count is not None, _from_buffer(out), len(out),
        _from_buffer("uint32_t[]", lengths), found, used,
    ):  # fmt: skip
        raise ValueError("records: a text is not canonical padded base64, or the count differs")
    if found[0] != room:
        lengths = lengths[: found[0]]
    return out, int(used[0]), lengths


def text_size(
    lengths: array[int],
    fixed: int,
    before: int,
    after: int,
    after_lengths: array[int] | None,
    sep: int,
    head: int,
    tail: int,
) -> int:
    """Bytes of ``seal_many_text``'s output for records of these lengths, each sealed to fixed
    more bytes, with text pieces of these lengths around them; ValueError if it overflows."""
    total = ffi.new("uint64_t *")
    if lib.sf_text_size(
        _from_buffer("uint32_t[]", lengths), len(lengths), fixed, before, after,
        NULL if after_lengths is None else _from_buffer("uint32_t[]", after_lengths),
        sep, head, tail, total,
    ):  # fmt: skip
        raise ValueError("records: the text is too large")
    return int(total[0])


# Lengths one scan writes at most (256 KiB of them): a batch of 256 KiB takes one call, a
# larger buffer one call per this many records.
_SCAN_ROOM = 1 << 16
_FRAME_LEN = lib.SF_FRAME_LEN
_frames_scan = lib.sf_frames_scan


def scan_frames(data: BytesLike, max_len: int) -> tuple[array[int], int]:
    """The lengths of the ``u32 big-endian length || bytes`` records complete at the start of
    data, and the bytes they take, in one native pass over data (``sf_frames_scan``);
    ValueError as soon as one declares more than max_len bytes."""
    n = len(data)
    room = min(n // _FRAME_LEN, _SCAN_ROOM)
    scratch = new_bytearray(4 * room)  # the C side writes each length before it is read
    found = ffi.new("size_t[2]")
    p, out, lengths, pos = _from_buffer(data), _from_buffer("uint32_t[]", scratch), array("I"), 0
    while True:
        if _frames_scan(p + pos, n - pos, max_len, out, room, found, found + 1):
            raise ValueError(f"records: a record declares more than {max_len} bytes")
        count = found[0]
        lengths.frombytes(memoryview(scratch)[: 4 * count])
        pos += found[1]
        if count < room or count == 0:
            return lengths, pos


def frame_lengths(data: BytesLike) -> array[int]:
    """The lengths of the ``u32 big-endian length || bytes`` records that fill data exactly."""
    lengths, used = scan_frames(data, 0xFFFFFFFF)
    if used != len(data):
        raise ValueError("records: the u32 length framing is truncated or overruns the buffer")
    return lengths


def complete_frames(data: BytesLike, max_len: int) -> tuple[int, int]:
    """How many ``u32 length || bytes`` records are complete at the start of data, and the
    bytes they take; ValueError as soon as one declares more than max_len bytes."""
    found = ffi.new("size_t[2]")
    if _frames_scan(_in(data), len(data), max_len, NULL, 0, found, found + 1):
        raise ValueError(f"records: a record declares more than {max_len} bytes")
    return int(found[0]), int(found[1])


def records_size(lengths: array[int], frame: int, fixed: int, opened: bool) -> int:
    """Bytes of records laid out one after another: frame + fixed + length each, or, opened,
    length - fixed each (0 when shorter); ValueError if it overflows (see sf_plan)."""
    total = ffi.new("uint64_t *")
    if lib.sf_records_size(
        _from_buffer("uint32_t[]", lengths), len(lengths), frame, fixed, opened, total
    ):
        raise ValueError("records: the batch is too large")
    return int(total[0])


def set_strategy(strategy: ContextStrategy) -> None:
    lib.sf_set_strategy(getattr(lib, f"SF_{strategy.name}"))


def context_stats() -> dict[tuple[str, str], int]:
    """Native cipher-context events since process start, by (strategy, event)."""
    raw = ffi.new("uint64_t[]", lib.SF_STRATEGIES * lib.SF_EVENTS)
    lib.sf_stats_read(raw)
    return {
        (s, e): int(raw[i * lib.SF_EVENTS + j])
        for i, s in enumerate(STRATEGIES)
        for j, e in enumerate(EVENTS)
    }


def thread_context_ids() -> tuple[int, ...]:
    """Where this thread's native contexts live (0 if not created yet), per algorithm."""
    return tuple(int(lib.sf_thread_context_id(i)) for i in range(lib.SF_ALGORITHMS))


def release_thread_contexts() -> None:
    """Free this thread's native contexts now, as thread exit does."""
    lib.sf_thread_release()


def hkdf_expand_sha512(key: bytes, info: bytes, length: int) -> bytes:
    """HKDF-Expand (RFC 5869) with HMAC-SHA-512, up to 128 bytes (sf_hkdf_expand_sha512)."""
    out = ffi.new("char[]", length)
    rc = lib.sf_hkdf_expand_sha512(key, len(key), info, len(info), out, length)
    if rc:
        _raise(rc)
    result: bytes = _unpack(out, length)
    lib.sf_cleanse(out, length)
    return result


def cleanse_at(p: Any, size: int) -> None:
    """Overwrite size bytes at p (a ``new_bytes`` pointer) with zeros."""
    if size:
        lib.sf_cleanse(p, size)


def cleanse(buf: bytearray | memoryview, length: int | None = None) -> None:
    """Overwrite buf (or its first `length` bytes) with zeros in a way the compiler keeps."""
    n = len(buf) if length is None else length
    if n:
        lib.sf_cleanse(_from_buffer(buf), n)
