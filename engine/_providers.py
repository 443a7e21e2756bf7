"""AEAD providers and the choice between them.

Two providers implement one small interface: ``native`` (the system libcrypto
through cffi) and ``cryptography`` (pyca's bundled OpenSSL). Which is faster
depends on the algorithm and the message size: on Debian 12's OpenSSL 3.0,
AES-GCM lacks VAES, so ``cryptography`` wins for large AES messages while the
native call's lower per-call cost wins for small ones, and under concurrency the
provider that releases the GIL wins. A calibration of about 50 ms (``_calibration``)
picks one provider per algorithm and size class for the concurrency the process runs;
the choice can be overridden with ``set_provider`` (the service's ``SEALFLOW_PROVIDER``).
"""

from __future__ import annotations

import enum
import threading
from typing import TYPE_CHECKING, Any, Protocol

from ._native import NativeProvider
from ._pool import parallelism
from ._pyca import CryptographyProvider
from ._types import Algorithm, AlgorithmSpec, BytesLike

if TYPE_CHECKING:
    from ._calibration import Calibration
    from ._records import Records, TextLayout


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

    def seal_many_text(
        self,
        spec: AlgorithmSpec,
        key: BytesLike,
        aad: BytesLike,
        records: Records,
        layout: TextLayout,
        out: Any,
        size: int,
    ) -> None:
        """Seal each record and write the batch as text into out (a ``_native.new_bytes``
        pointer to exactly ``_native.text_size`` bytes), as ``layout`` says."""

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
        """Open each prefix || nonce || ciphertext || tag record into out.

        out is not zeroed on entry: every byte of it is written, a record's plaintext or, for
        a record not OK, zeros. status gets a RecordStatus per record.
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


# The concurrency to calibrate for (None: what a default CryptoPool runs), and what the last
# calibration measured (None before the first and while set_provider forces a choice).
_threads: int | None = None
_calibration: Calibration | None = None


def calibrate(threads: int | None = None) -> dict[Algorithm, dict[str, str]]:
    """Time both providers per algorithm and size class and keep the faster (20-70 ms).

    threads: how many crypto jobs the process runs at once (``CryptoPool.parallelism``);
    by default what a default ``CryptoPool`` runs on this process's cores. With more than
    one, every class but ``small`` (inline on the event loop) is chosen by the throughput
    of that many threads together (see ``_calibration``). The number is kept for later
    calibrations (``set_provider(None)``).
    """
    global _table, _threads, _calibration
    from ._calibration import measure  # it needs _chunked and _records, which need us

    if threads is not None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        _threads = threads
    result = measure(_threads or parallelism())
    choice = result.choice()
    _table = [[PROVIDERS[choice[alg, cls]] for cls in SizeClass] for alg in Algorithm]
    _calibration = result
    return provider_choice()


def calibration() -> Calibration | None:
    """What the calibration in use measured (None while ``set_provider`` forces a provider)."""
    _ensure_table()
    return _calibration


def set_provider(name: str | None) -> None:
    """Use one provider for everything ("native" or "cryptography"), or None to calibrate."""
    global _table, _calibration
    if name is None or name == "auto":
        _table = _calibration = None
        return
    if name not in PROVIDERS:
        raise ValueError(f"unknown provider {name!r}; expected one of {sorted(PROVIDERS)} or auto")
    _table = [[PROVIDERS[name]] * len(SizeClass) for _ in Algorithm]
    _calibration = None


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
