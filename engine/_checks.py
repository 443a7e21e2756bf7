"""Argument checks at the engine's public edge, run once per call before any provider call.

The providers and codecs trust what they are given (JDK-8179098: bounds are checked once per
call, never per block or chunk), so every check of a type, a length or a writable buffer
lives here, below them all, and the API modules call it.
"""

from __future__ import annotations

from ._types import NONCE_LEN, TAG_LEN, Algorithm, AlgorithmSpec, BytesLike

# Keyed by value: an Algorithm member (a StrEnum) and its string find the same entry.
SPECS: dict[str, AlgorithmSpec] = {a.value: a.spec for a in Algorithm}


def as_bytes_view(data: BytesLike | None, what: str) -> bytes | bytearray | memoryview:
    """Accept bytes, bytearray or any C-contiguous buffer; None means empty (for AAD)."""
    if data is None:
        return b""
    if type(data) is bytes or type(data) is bytearray:
        return data
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"{what} must be bytes-like, not {type(data).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"{what} must be a contiguous buffer")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def writable_view(out: bytearray | memoryview, size: int) -> bytearray | memoryview:
    """out itself when it is exactly size bytes, else a view of its first size bytes."""
    if type(out) is not bytearray:
        out = as_bytes_view(out, "out")  # type: ignore[assignment]
        if not isinstance(out, bytearray) and memoryview(out).readonly:
            raise TypeError("output buffer must be writable")
    if len(out) < size:
        raise ValueError(f"output buffer must hold at least {size} bytes")
    return out if len(out) == size else memoryview(out)[:size]


def algorithm_spec(alg: Algorithm | str) -> AlgorithmSpec:
    try:
        return SPECS[alg]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown algorithm {alg!r}; expected one of {[a.value for a in Algorithm]}"
        ) from None


def check_key(spec: AlgorithmSpec, key: BytesLike) -> bytes | bytearray | memoryview:
    key = key if type(key) is bytes else as_bytes_view(key, "key")
    if len(key) != spec.key_len:
        raise ValueError(f"{spec.algorithm.value} needs a {spec.key_len}-byte key")
    return key


def message_args(
    nonce: BytesLike, aad: BytesLike | None, data: BytesLike, what: str
) -> tuple[BytesLike, BytesLike, BytesLike]:
    """A single message's nonce (12 bytes), AAD (None: empty) and data (named `what`)."""
    if type(nonce) is not bytes:
        nonce = as_bytes_view(nonce, "nonce")
    if len(nonce) != NONCE_LEN:
        raise ValueError("nonce must be 12 bytes")
    if type(aad) is not bytes:
        aad = as_bytes_view(aad, "aad")
    if type(data) is not bytes:
        data = as_bytes_view(data, what)
    return nonce, aad, data


def opened_len(sealed: BytesLike) -> int:
    """The plaintext length of ciphertext || tag; ValueError if it is shorter than the tag."""
    if len(sealed) < TAG_LEN:
        raise ValueError("ciphertext_and_tag is shorter than the 16-byte tag")
    return len(sealed) - TAG_LEN
