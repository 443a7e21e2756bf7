"""AEAD providers and the choice between them.

Two providers implement one small interface: ``native`` (the system libcrypto
through cffi) and ``cryptography`` (pyca's bundled OpenSSL). Which is faster
depends on the algorithm and the message size: on Debian 12's OpenSSL 3.0,
AES-GCM lacks VAES, so ``cryptography`` wins for large AES messages while the
native call's lower per-call cost wins for small ones. A calibration of at most
about 50 ms picks one provider per algorithm and size class; the choice can be
overridden with ``set_provider`` (the service's ``SEALFLOW_PROVIDER``).
"""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ._native import NativeProvider
from ._pyca import CryptographyProvider
from ._types import NONCE_LEN, TAG_LEN, Algorithm, AlgorithmSpec, BytesLike

if TYPE_CHECKING:
    from ._records import Records


class Provider(Protocol):
    name: str

    def seal(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        nonce: BytesLike,
        aad: BytesLike,
        data: BytesLike,
    ) -> bytes:
        """Return ciphertext || tag."""

    def open(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        nonce: BytesLike,
        aad: BytesLike,
        sealed: BytesLike,
    ) -> bytes:
        """Return the plaintext of sealed (ciphertext || tag), or raise DecryptionError."""

    def seal_into(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        nonce: BytesLike,
        aad: BytesLike,
        data: BytesLike,
        out: bytearray | memoryview,
    ) -> None:
        """Write ciphertext || tag (len(data) + 16 bytes) to out, which may be data's own memory."""

    def open_into(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        nonce: BytesLike,
        aad: BytesLike,
        sealed: BytesLike,
        out: bytearray | memoryview,
    ) -> None:
        """Write the plaintext of sealed (ciphertext || tag) to out, or wipe out and raise."""

    def chunks_seal_into(
        self,
        spec: AlgorithmSpec,
        key: bytes,
        base_nonce: bytes,
        counter: int,
        data: BytesLike,
        final: bool,
        out: bytearray | memoryview,
    ) -> None:
        """Seal consecutive C2SP chunks numbered from counter (see native/sealflow_native.c)."""

    def chunks_open_into(
        self,
        spec: AlgorithmSpec,
        key: bytes,
        base_nonce: bytes,
        counter: int,
        sealed: BytesLike,
        final: bool,
        out: bytearray | memoryview,
    ) -> None:
        """Open consecutive C2SP chunks; on failure wipe out and raise DecryptionError."""

    def seal_many(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        aad: BytesLike,
        prefix_len: int,
        records: Records,
        framed: bool,
        out: bytearray,
        offsets: bytearray,
    ) -> None:
        """Seal each record into out as [u32 length] || prefix || nonce || ciphertext || tag.

        prefix is aad[:prefix_len], aad is every record's AAD; out is exactly the size that
        ``records_size`` gives, offsets (uint64 x len(records) + 1) gets where each starts.
        """

    def open_many(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        aad: BytesLike,
        prefix_len: int,
        records: Records,
        out: bytearray,
        offsets: bytearray,
        status: bytearray,
    ) -> None:
        """Open each prefix || nonce || ciphertext || tag record into out (zeroed on entry).

        status gets a RecordStatus per record; a record not OK leaves zeros in out.
        """


class SizeClass(enum.IntEnum):
    SMALL = 0  # single-shot messages below SMALL_LIMIT bytes
    LARGE = 1  # single-shot messages of SMALL_LIMIT bytes or more
    CHUNKS = 2  # batches of C2SP chunks
    RECORDS_SMALL = 3  # seal_many/open_many, records below SMALL_LIMIT bytes on average
    RECORDS_LARGE = 4  # seal_many/open_many, larger records


# Around here the per-call cost stops dominating (and pyca starts releasing the GIL at 2 KiB).
SMALL_LIMIT = 4096

PROVIDERS: dict[str, Provider] = {
    "native": NativeProvider(),
    "cryptography": CryptographyProvider(),
}

# table[algorithm index][size class], filled by calibration or an override.
_table: list[list[Provider]] | None = None
_lock = threading.Lock()


# Per size class: bytes per message (or record), repetitions, records per batch.
_JOBS = {
    SizeClass.SMALL: (1024, 200, 1),
    SizeClass.LARGE: (65536, 8, 1),
    SizeClass.CHUNKS: (16 * 16384, 3, 1),
    SizeClass.RECORDS_SMALL: (256, 3, 64),
    SizeClass.RECORDS_LARGE: (16384, 3, 8),
}


def _measure(provider: Provider, spec: AlgorithmSpec, cls: SizeClass) -> float:
    """Seconds for the best of a few repetitions of a representative job."""
    from ._records import Records  # a cycle at import time: _records needs _aead, which needs us

    key = os.urandom(spec.key_len)
    nonce = os.urandom(NONCE_LEN)
    size, reps, count = _JOBS[cls]
    data = bytes(size)
    job: Callable[[], None]
    if cls in (SizeClass.RECORDS_SMALL, SizeClass.RECORDS_LARGE):
        records = Records.from_lengths(bytes(size * count), [size] * count)
        out = bytearray((size + NONCE_LEN + TAG_LEN) * count)
        offsets = bytearray(8 * (count + 1))

        def job() -> None:
            provider.seal_many(spec, key, b"", 0, records, False, out, offsets)

    elif cls is SizeClass.CHUNKS:
        out = bytearray(size + (size // 16384 + 1) * TAG_LEN)

        def job() -> None:
            provider.chunks_seal_into(spec, key, nonce, 0, data, True, out)

    elif cls is SizeClass.SMALL:

        def job() -> None:
            provider.seal(spec, key, nonce, b"", data)

    else:
        out = bytearray(size + TAG_LEN)

        def job() -> None:
            provider.seal_into(spec, key, nonce, b"", data, out)

    job()  # warm the thread's cached context
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(reps):
            job()
        best = min(best, time.perf_counter() - start)
    return best


def calibrate() -> dict[Algorithm, dict[str, str]]:
    """Time both providers per algorithm and size class and keep the faster (about 30 ms)."""
    global _table
    table = []
    for alg in Algorithm:
        row = []
        for cls in SizeClass:
            timed = {name: _measure(p, alg.spec, cls) for name, p in PROVIDERS.items()}
            row.append(PROVIDERS[min(timed, key=lambda name: timed[name])])
        table.append(row)
    _table = table
    return provider_choice()


def set_provider(name: str | None) -> None:
    """Use one provider for everything ("native" or "cryptography"), or None to calibrate."""
    global _table
    if name is None or name == "auto":
        _table = None
        return
    if name not in PROVIDERS:
        raise ValueError(f"unknown provider {name!r}; expected one of {sorted(PROVIDERS)} or auto")
    _table = [[PROVIDERS[name]] * len(SizeClass) for _ in Algorithm]


def _ensure_table() -> list[list[Provider]]:
    table = _table
    if table is None:
        with _lock:
            if _table is None:
                calibrate()
            table = _table
        assert table is not None
    return table


def select(spec: AlgorithmSpec, cls: SizeClass) -> Provider:
    table = _table
    if table is None:
        table = _ensure_table()
    return table[spec.index][cls]


def provider_choice() -> dict[Algorithm, dict[str, str]]:
    """The provider in use per algorithm and size class (calibrating first if needed)."""
    table = _ensure_table()
    return {
        alg: {cls.name.lower(): table[alg.spec.index][cls].name for cls in SizeClass}
        for alg in Algorithm
    }
