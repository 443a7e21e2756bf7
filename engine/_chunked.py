"""C2SP chunked encryption (c2sp.org/chunked-encryption): the public classes.

``ChunkedEncryptor`` and ``ChunkedDecryptor`` validate arguments and keep the
finished/failed state; the chunks themselves are sealed and opened by a codec
picked from ``CODECS`` by the provider that the calibration (or
``set_provider``) chose for chunks. The codecs trust what these classes give
them, so each argument is checked once, here, and never per chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

from . import _binding
from ._checks import algorithm_spec, as_bytes_view, check_key
from ._cobble import CobbleOpener, CobbleSealer
from ._errors import DecryptionError
from ._framing import FramingOpener, FramingSealer
from ._provider import Provider
from ._selection import SizeClass, select
from ._types import (
    CHUNK_LEN,
    HEADER_LEN,
    SEALED_CHUNK_LEN,
    TAG_LEN,
    Algorithm,
    AlgorithmSpec,
    BytesLike,
)

_FINISHED = "finalize() was already called"


class Codec(Protocol):
    """One direction of one chunked message.

    The caller has validated data, checked that out holds ``update_size(len(data))``
    (or ``finalize_size()``) bytes, and calls nothing after a failure or finalize.
    """

    def update_size(self, n: int) -> int: ...

    def finalize_size(self) -> int: ...

    def update_into(self, data: BytesLike, out: bytearray | memoryview) -> int: ...

    def finalize_into(self, out: bytearray | memoryview) -> int: ...


# (provider, algorithm spec, input key, context) -> a codec for one message.
CodecFactory = Callable[[Provider, AlgorithmSpec, bytes, bytes], Codec]


class Codecs(NamedTuple):
    sealer: CodecFactory
    opener: CodecFactory


_FRAMING = Codecs(FramingSealer, FramingOpener)
_COBBLESTONE = Codecs(CobbleSealer, CobbleOpener)

# Which code runs, by the provider that select(spec, SizeClass.CHUNKS) returns.
# Framing: sealflow's loop over that provider's chunks_seal_into/chunks_open_into
# (one C call per run of chunks with the native provider). Cobblestone: the whole
# AES job in one Rust call per update on the wheel's VAES OpenSSL, where the
# cryptography provider's AEAD classes would need one Python call per chunk.
# Cobblestone is AES only, so ChaCha20-Poly1305 is framed here under both providers.
CODECS: dict[tuple[str, Algorithm], Codecs] = {
    ("native", Algorithm.AES_128_GCM): _FRAMING,
    ("native", Algorithm.AES_256_GCM): _FRAMING,
    ("native", Algorithm.CHACHA20_POLY1305): _FRAMING,
    ("cryptography", Algorithm.AES_128_GCM): _COBBLESTONE,
    ("cryptography", Algorithm.AES_256_GCM): _COBBLESTONE,
    ("cryptography", Algorithm.CHACHA20_POLY1305): _FRAMING,
}


def sealed_size(plaintext_len: int) -> int:
    """Length of the chunked ciphertext of a plaintext of this length."""
    return HEADER_LEN + plaintext_len + (plaintext_len // CHUNK_LEN + 1) * TAG_LEN


def opened_size(sealed_len: int) -> int:
    """Length of the plaintext of a well-formed chunked ciphertext of this length.

    Raises ``DecryptionError`` for a length no valid ciphertext has.
    """
    body = sealed_len - HEADER_LEN
    rest = body % SEALED_CHUNK_LEN
    if body < TAG_LEN or rest < TAG_LEN:
        raise DecryptionError()
    return body - (body // SEALED_CHUNK_LEN + 1) * TAG_LEN


class ChunkedEncryptor:
    """Seal a message of any length in C2SP chunked form, with constant memory."""

    def __init__(
        self, alg: Algorithm | str, key: BytesLike, context: BytesLike | None = b""
    ) -> None:
        spec = algorithm_spec(alg)
        input_key = bytes(check_key(spec, key))
        ctx = bytes(as_bytes_view(context, "context"))
        provider = select(spec, SizeClass.CHUNKS)
        codecs = CODECS[provider.name, spec.algorithm]
        self._codec: Codec = codecs.sealer(provider, spec, input_key, ctx)
        self._finished = False

    def update_size(self, n: int) -> int:
        """Bytes that ``update_into`` writes for n more input bytes."""
        return self._codec.update_size(n)

    def finalize_size(self) -> int:
        return self._codec.finalize_size()

    def update_into(self, data: BytesLike, out: bytearray | memoryview) -> int:
        """Write the header (first call) and every completed chunk to out; return bytes written."""
        if self._finished:
            raise ValueError(_FINISHED)
        view = as_bytes_view(data, "data")
        size = self._codec.update_size(len(view))
        if len(out) < size:  # inline: this runs once per piece of a stream
            raise ValueError(f"output buffer must hold {size} bytes")
        return self._codec.update_into(view, out)

    def update(self, data: BytesLike) -> bytes:
        """The header (first call) and every completed chunk, as one new ``bytes``."""
        if self._finished:
            raise ValueError(_FINISHED)
        view = as_bytes_view(data, "data")
        return _fill(self._codec.update_size(len(view)), self._codec.update_into, view)

    def finalize_into(self, out: bytearray | memoryview) -> int:
        """Seal the short final chunk (possibly empty); return bytes written."""
        if self._finished:
            raise ValueError(_FINISHED)
        _check_room(out, self._codec.finalize_size())
        n = self._codec.finalize_into(out)
        self._finished = True
        return n

    def finalize(self) -> bytes:
        if self._finished:
            raise ValueError(_FINISHED)
        result = _fill(self._codec.finalize_size(), self._codec.finalize_into)
        self._finished = True
        return result


class ChunkedDecryptor:
    """Open a C2SP chunked ciphertext, returning only authenticated plaintext.

    The commitment is checked before any chunk is opened. After any failure,
    every later call raises ``DecryptionError`` again.
    """

    def __init__(
        self, alg: Algorithm | str, key: BytesLike, context: BytesLike | None = b""
    ) -> None:
        spec = algorithm_spec(alg)
        input_key = bytes(check_key(spec, key))
        ctx = bytes(as_bytes_view(context, "context"))
        provider = select(spec, SizeClass.CHUNKS)
        codecs = CODECS[provider.name, spec.algorithm]
        self._codec: Codec = codecs.opener(provider, spec, input_key, ctx)
        self._finished = False
        self._failed = False

    def update_size(self, n: int) -> int:
        """An upper bound on the bytes ``update_into`` writes for n more input bytes."""
        return self._codec.update_size(n)

    def finalize_size(self) -> int:
        return self._codec.finalize_size()

    def update_into(self, data: BytesLike, out: bytearray | memoryview) -> int:
        """Write the plaintext of every completed, authenticated chunk to out."""
        self._check_usable()
        view = as_bytes_view(data, "data")
        size = self._codec.update_size(len(view))
        if len(out) < size:  # inline: this runs once per piece of a stream
            raise ValueError(f"output buffer must hold {size} bytes")
        try:
            return self._codec.update_into(view, out)
        except DecryptionError:
            self._failed = True
            raise

    def update(self, data: BytesLike) -> bytes:
        """The plaintext of every completed, authenticated chunk, as one new ``bytes``."""
        self._check_usable()
        view = as_bytes_view(data, "data")
        try:
            return _fill(self._codec.update_size(len(view)), self._codec.update_into, view)
        except DecryptionError:
            self._failed = True
            raise

    def finalize_into(self, out: bytearray | memoryview) -> int:
        """Open the final chunk; raise ``DecryptionError`` if the message is truncated."""
        self._check_usable()
        _check_room(out, self._codec.finalize_size())
        try:
            n = self._codec.finalize_into(out)
        except DecryptionError:
            self._failed = True
            raise
        self._finished = True
        return n

    def finalize(self) -> bytes:
        self._check_usable()
        try:
            result = _fill(self._codec.finalize_size(), self._codec.finalize_into)
        except DecryptionError:
            self._failed = True
            raise
        self._finished = True
        return result

    def _check_usable(self) -> None:
        if self._failed:
            raise DecryptionError()
        if self._finished:
            raise ValueError(_FINISHED)


def _fill(size: int, write: Callable[..., int], *args: BytesLike) -> bytes:
    """Run write(*args, out) into a new ``bytes`` of size bytes, filled in place: one
    allocation and no copy (the sizes are exact, so the sliced copy is a fallback). On any
    failure the partly written object is wiped before it is dropped."""
    out, p = _binding.new_bytes(size)
    try:
        n = write(*args, _binding.writable(p, size))
    except BaseException:
        _binding.cleanse_at(p, size)
        raise
    return out if n == size else out[:n]


def _check_room(out: bytearray | memoryview, size: int) -> None:
    if len(out) < size:
        raise ValueError(f"output buffer must hold {size} bytes")
