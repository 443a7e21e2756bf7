"""The provider interface: what the native and the ``cryptography`` providers each implement.

Providers trust their arguments (validated once above them, ``_checks``): a provider only
runs the cipher. Which one runs what is ``_selection``'s table.
"""

from __future__ import annotations

from typing import Any, Protocol

from ._records import Records, TextLayout
from ._types import AlgorithmSpec, BytesLike


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
        """Seal each record and write the batch as text into out (a ``_binding.new_bytes``
        pointer to exactly ``layout.size`` bytes), as ``layout`` says."""

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
