"""C2SP chunked encryption (c2sp.org/chunked-encryption) as sans-IO state machines.

Header: salt (24 random bytes) || commitment (32 bytes), where
``key || base nonce || commitment = HKDF-Expand-SHA-512(input key,
"c2sp.org/chunked-encryption@v1+" || aead name || 0x00 || salt || context)``.
Body: 16 KiB chunks sealed with nonce = base nonce XOR chunk counter and empty
AAD; the final chunk is always shorter than 16 KiB (possibly empty).

Full chunks are sealed or opened as soon as they are complete: a final chunk is
always short, so a complete 16 KiB (16400 sealed) chunk is never the last one.
Runs of complete chunks go to the provider in one call.
"""

from __future__ import annotations

import hmac
import os

from ._aead import algorithm_spec, as_bytes_view, check_key
from ._cobble import CobbleOpener, CobbleSealer, covers
from ._errors import DecryptionError
from ._providers import SizeClass, select
from ._pyca import CryptographyProvider
from ._types import (
    CHUNK_LEN,
    COMMITMENT_LEN,
    HEADER_LEN,
    MAX_CHUNKS,
    NONCE_LEN,
    SALT_LEN,
    SEALED_CHUNK_LEN,
    TAG_LEN,
    Algorithm,
    AlgorithmSpec,
    BytesLike,
)

_LABEL = b"c2sp.org/chunked-encryption@v1+"


def derive(
    spec: AlgorithmSpec, key: BytesLike, salt: bytes, context: BytesLike
) -> tuple[bytes, bytes, bytes]:
    """HKDF-Expand (SHA-512) into (message key, base nonce, commitment)."""
    info = b"".join((_LABEL, spec.iana_name, b"\x00", salt, bytes(context)))
    length = spec.key_len + NONCE_LEN + COMMITMENT_LEN
    okm, block, i = b"", b"", 1
    while len(okm) < length:
        block = hmac.digest(key, block + info + bytes((i,)), "sha512")
        okm += block
        i += 1
    k, n = spec.key_len, spec.key_len + NONCE_LEN
    return okm[:k], okm[k:n], okm[n:length]


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


class _Chunker:
    """Shared framing: hold back a partial unit, pass runs of whole units to the provider."""

    _unit: int

    def __init__(self, alg: Algorithm | str, key: BytesLike, context: BytesLike | None) -> None:
        self._spec = algorithm_spec(alg)
        self._input_key = bytes(check_key(self._spec, key))
        self._context = bytes(as_bytes_view(context, "context"))
        self._provider = select(self._spec, SizeClass.CHUNKS)
        self._pending = bytearray()
        self._counter = 0
        self._finished = False
        self._key = b""
        self._base_nonce = b""

    def _check_open(self) -> None:
        if self._finished:
            raise ValueError("finalize() was already called")

    def _process(self, data: memoryview, final: bool, out: memoryview) -> int:
        raise NotImplementedError

    def _units(self, data: memoryview, out: memoryview) -> int:
        """Process every complete unit of pending + data; keep the partial rest pending."""
        unit, pending, o = self._unit, self._pending, 0
        if len(pending) + len(data) < unit:
            pending += data
            return 0
        i = 0
        if pending:
            i = unit - len(pending)
            pending += data[:i]
            with memoryview(pending) as whole_unit:
                o += self._process(whole_unit, False, out)
            pending.clear()
        whole = (len(data) - i) // unit * unit
        if whole:
            o += self._process(data[i : i + whole], False, out[o:])
        pending += data[i + whole :]
        return o

    def _check_counter(self, chunks: int) -> None:
        if self._counter + chunks > MAX_CHUNKS:
            raise ValueError("C2SP chunk counter limit (2**38 chunks) reached")


class ChunkedEncryptor(_Chunker):
    """Seal a message of any length in C2SP chunked form, with constant memory."""

    _unit = CHUNK_LEN

    def __new__(
        cls, alg: Algorithm | str, key: BytesLike, context: BytesLike | None = b""
    ) -> ChunkedEncryptor:
        if cls is ChunkedEncryptor and _by_cobblestone(alg):
            return super().__new__(_CobbleEncryptor)
        return super().__new__(cls)

    def __init__(
        self, alg: Algorithm | str, key: BytesLike, context: BytesLike | None = b""
    ) -> None:
        super().__init__(alg, key, context)
        salt = os.urandom(SALT_LEN)
        self._key, self._base_nonce, commitment = derive(
            self._spec, self._input_key, salt, self._context
        )
        self._header: bytes | None = salt + commitment

    def update_size(self, n: int) -> int:
        """Bytes that ``update_into`` writes for n more input bytes."""
        header = HEADER_LEN if self._header is not None else 0
        return header + (len(self._pending) + n) // CHUNK_LEN * SEALED_CHUNK_LEN

    def finalize_size(self) -> int:
        header = HEADER_LEN if self._header is not None else 0
        return header + len(self._pending) + TAG_LEN

    def update_into(self, data: BytesLike, out: bytearray | memoryview) -> int:
        """Write the header (first call) and every completed chunk to out; return bytes written."""
        self._check_open()
        view = memoryview(as_bytes_view(data, "data"))
        if len(out) < self.update_size(len(view)):
            raise ValueError(f"output buffer must hold {self.update_size(len(view))} bytes")
        dst = memoryview(out)
        o = self._write_header(dst)
        return o + self._units(view, dst[o:])

    def update(self, data: BytesLike) -> bytes:
        out = bytearray(self.update_size(len(as_bytes_view(data, "data"))))
        n = self.update_into(data, out)
        return bytes(out) if n == len(out) else bytes(memoryview(out)[:n])

    def finalize_into(self, out: bytearray | memoryview) -> int:
        """Seal the short final chunk (possibly empty); return bytes written."""
        self._check_open()
        if len(out) < self.finalize_size():
            raise ValueError(f"output buffer must hold {self.finalize_size()} bytes")
        dst = memoryview(out)
        o = self._write_header(dst)
        with memoryview(self._pending) as final_chunk:
            o += self._process(final_chunk, True, dst[o:])
        self._finished = True
        self._pending.clear()
        return o

    def finalize(self) -> bytes:
        out = bytearray(self.finalize_size())
        self.finalize_into(out)
        return bytes(out)

    def _write_header(self, out: memoryview) -> int:
        if self._header is None:
            return 0
        out[:HEADER_LEN] = self._header
        self._header = None
        return HEADER_LEN

    def _process(self, data: memoryview, final: bool, out: memoryview) -> int:
        chunks = len(data) // CHUNK_LEN + (1 if final else 0)
        n = len(data) + chunks * TAG_LEN
        self._check_counter(chunks)
        self._provider.chunks_seal_into(
            self._spec, self._key, self._base_nonce, self._counter, data, final, out[:n]
        )
        self._counter += chunks
        return n


class ChunkedDecryptor(_Chunker):
    """Open a C2SP chunked ciphertext, returning only authenticated plaintext.

    The commitment is checked before any chunk is opened. After any failure,
    every later call raises ``DecryptionError`` again.
    """

    _unit = SEALED_CHUNK_LEN

    def __new__(
        cls, alg: Algorithm | str, key: BytesLike, context: BytesLike | None = b""
    ) -> ChunkedDecryptor:
        if cls is ChunkedDecryptor and _by_cobblestone(alg):
            return super().__new__(_CobbleDecryptor)
        return super().__new__(cls)

    def __init__(
        self, alg: Algorithm | str, key: BytesLike, context: BytesLike | None = b""
    ) -> None:
        super().__init__(alg, key, context)
        self._header_buf = bytearray()
        self._failed = False

    def update_size(self, n: int) -> int:
        """An upper bound on the bytes ``update_into`` writes for n more input bytes."""
        return (len(self._pending) + n) // SEALED_CHUNK_LEN * CHUNK_LEN

    def finalize_size(self) -> int:
        return max(len(self._pending) - TAG_LEN, 0)

    def update_into(self, data: BytesLike, out: bytearray | memoryview) -> int:
        """Write the plaintext of every completed, authenticated chunk to out."""
        self._check_usable()
        view = memoryview(as_bytes_view(data, "data"))
        if len(out) < self.update_size(len(view)):
            raise ValueError(f"output buffer must hold {self.update_size(len(view))} bytes")
        try:
            if self._base_nonce == b"":
                view = self._read_header(view)
            return self._units(view, memoryview(out))
        except DecryptionError:
            self._fail()
            raise

    def update(self, data: BytesLike) -> bytes:
        out = bytearray(self.update_size(len(as_bytes_view(data, "data"))))
        n = self.update_into(data, out)
        return bytes(out) if n == len(out) else bytes(memoryview(out)[:n])

    def finalize_into(self, out: bytearray | memoryview) -> int:
        """Open the final chunk; raise ``DecryptionError`` if the message is truncated."""
        self._check_usable()
        if len(out) < self.finalize_size():
            raise ValueError(f"output buffer must hold {self.finalize_size()} bytes")
        try:
            if self._base_nonce == b"" or len(self._pending) < TAG_LEN:
                raise DecryptionError()
            with memoryview(self._pending) as final_chunk:
                n = self._process(final_chunk, True, memoryview(out))
        except DecryptionError:
            self._fail()
            raise
        self._finished = True
        self._pending.clear()
        return n

    def finalize(self) -> bytes:
        out = bytearray(self.finalize_size())
        n = self.finalize_into(out)
        return bytes(memoryview(out)[:n])

    def _check_usable(self) -> None:
        if self._failed:
            raise DecryptionError()
        self._check_open()

    def _fail(self) -> None:
        self._failed = True
        # A new buffer: the failed call's traceback may still hold views of the old one.
        self._pending = bytearray()
        self._key = self._base_nonce = b""

    def _read_header(self, data: memoryview) -> memoryview:
        need = HEADER_LEN - len(self._header_buf)
        self._header_buf += data[:need]
        if len(self._header_buf) < HEADER_LEN:
            return data[len(data) :]
        salt = bytes(self._header_buf[:SALT_LEN])
        key, base_nonce, commitment = derive(self._spec, self._input_key, salt, self._context)
        if not hmac.compare_digest(commitment, self._header_buf[SALT_LEN:]):
            raise DecryptionError()
        self._key, self._base_nonce = key, base_nonce
        return data[need:]

    def _process(self, data: memoryview, final: bool, out: memoryview) -> int:
        chunks = len(data) // SEALED_CHUNK_LEN + (1 if final else 0)
        n = len(data) - chunks * TAG_LEN
        self._check_counter(chunks)
        self._provider.chunks_open_into(
            self._spec, self._key, self._base_nonce, self._counter, data, final, out[:n]
        )
        self._counter += chunks
        return n


def _by_cobblestone(alg: Algorithm | str) -> bool:
    spec = algorithm_spec(alg)
    return covers(spec.algorithm) and isinstance(
        select(spec, SizeClass.CHUNKS), CryptographyProvider
    )


class _CobbleEncryptor(ChunkedEncryptor):
    """ChunkedEncryptor for AES when the cryptography provider does chunks (see _cobble)."""

    def __init__(
        self, alg: Algorithm | str, key: BytesLike, context: BytesLike | None = b""
    ) -> None:
        _Chunker.__init__(self, alg, key, context)
        self._codec = CobbleSealer(self._spec.algorithm, self._input_key, self._context)

    def update_size(self, n: int) -> int:
        return self._codec.update_size(n)

    def finalize_size(self) -> int:
        return self._codec.finalize_size()

    def update_into(self, data: BytesLike, out: bytearray | memoryview) -> int:
        self._check_open()
        view = as_bytes_view(data, "data")
        _check_room(out, self.update_size(len(memoryview(view))))
        return self._codec.update_into(view, out)

    def finalize_into(self, out: bytearray | memoryview) -> int:
        self._check_open()
        _check_room(out, self.finalize_size())
        self._finished = True
        return self._codec.finalize_into(out)


class _CobbleDecryptor(ChunkedDecryptor):
    """ChunkedDecryptor for AES when the cryptography provider does chunks (see _cobble)."""

    def __init__(
        self, alg: Algorithm | str, key: BytesLike, context: BytesLike | None = b""
    ) -> None:
        super().__init__(alg, key, context)
        self._codec = CobbleOpener(self._spec.algorithm, self._input_key, self._context)

    def update_size(self, n: int) -> int:
        return self._codec.update_size(n)

    def finalize_size(self) -> int:
        return self._codec.finalize_size()

    def update_into(self, data: BytesLike, out: bytearray | memoryview) -> int:
        self._check_usable()
        view = as_bytes_view(data, "data")
        _check_room(out, self.update_size(len(memoryview(view))))
        try:
            return self._codec.update_into(view, out)
        except DecryptionError:
            self._failed = True
            raise

    def finalize_into(self, out: bytearray | memoryview) -> int:
        self._check_usable()
        _check_room(out, self.finalize_size())
        try:
            n = self._codec.finalize_into(out)
        except DecryptionError:
            self._failed = True
            raise
        self._finished = True
        return n


def _check_room(out: bytearray | memoryview, size: int) -> None:
    if len(out) < size:
        raise ValueError(f"output buffer must hold {size} bytes")
