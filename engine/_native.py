"""The native provider: the provider interface over the bare binding (``_binding``).

A single message or a run of chunks is one binding call with the interface's own arguments,
so those methods are the binding's functions themselves; a batch is handed over as its
buffer and lengths. Contexts, strategies and return codes are the binding's and the C
side's business (native/sealflow_native.c).
"""

from __future__ import annotations

from typing import Any

from . import _binding
from ._records import Records, TextLayout
from ._types import AlgorithmSpec, BytesLike


class NativeProvider:
    """AEAD over the system libcrypto through the cffi extension.

    The C side keeps each thread's contexts in thread-local storage; the
    strategy is pushed to it by ``_strategy``.
    """

    name = "native"

    # The binding takes the interface's own arguments for these: there is nothing to adapt,
    # so they are its functions, with no wrapper adding a Python call to every message.
    seal = staticmethod(_binding.seal)
    open = staticmethod(_binding.open)
    seal_into = staticmethod(_binding.seal_into)
    open_into = staticmethod(_binding.open_into)
    chunks_seal_into = staticmethod(_binding.chunks_seal_into)
    chunks_open_into = staticmethod(_binding.chunks_open_into)

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
        _binding.seal_many(
            spec, key, aad, prefix_len, records.data, records.lengths, records.is_framed,
            framed, out, offsets,
        )  # fmt: skip

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
        _binding.open_many(
            spec, key, aad, prefix_len, records.data, records.lengths, records.is_framed,
            out, offsets, status,
        )  # fmt: skip

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
        _binding.seal_many_text(
            spec, key, aad, records.data, records.lengths, layout.before, layout.after,
            layout.after_lengths, layout.sep, layout.head, layout.tail, out, size,
        )  # fmt: skip
