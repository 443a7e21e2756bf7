"""The sealflow envelope (SPEC section 3), sans-IO: ``prefix || body``.

Prefix: ``magic "SFL1" | mode (1) | algorithm (1) | key version (4, big-endian) |
name length n (1) | key name (n)``. The prefix is authenticated: ``bound_data`` puts it at
the start of the C2SP context (stream mode) or of the AAD (single-shot mode), so any change
to it fails decryption even when it still parses.

Body: a C2SP chunked ciphertext (stream), or ``nonce (12) || ciphertext || tag (16)`` sealed
with the key directly (single-shot).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from sealflow.engine import Algorithm

# Key names (SPEC 3): what the prefix can carry, and so what the keystore accepts.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")

MAGIC = b"SFL1"
FIXED_LEN = 11  # magic, mode, algorithm, version, name length
MAX_PREFIX_LEN = FIXED_LEN + 64


class Mode(enum.IntEnum):
    STREAM = 1
    SINGLE = 2


_ALG_CODES = {
    Algorithm.AES_128_GCM: 1,
    Algorithm.AES_256_GCM: 2,
    Algorithm.CHACHA20_POLY1305: 3,
}
_CODE_ALGS = {code: alg for alg, code in _ALG_CODES.items()}
_MODES = frozenset(Mode)


class MalformedEnvelope(ValueError):
    """The bytes are not a sealflow envelope prefix (bad magic, mode, algorithm or name)."""


@dataclass(frozen=True, slots=True)
class Prefix:
    mode: Mode
    algorithm: Algorithm
    version: int
    name: str

    def encode(self) -> bytes:
        name = self.name.encode("ascii")
        return b"".join(
            (
                MAGIC,
                bytes((self.mode, _ALG_CODES[self.algorithm])),
                self.version.to_bytes(4, "big"),
                bytes((len(name),)),
                name,
            )
        )


def prefix_length(data: bytes | bytearray | memoryview) -> int | None:
    """The length of the prefix that `data` starts with, or None if more bytes are needed.

    Raises ``MalformedEnvelope`` as soon as the bytes seen cannot start a prefix.
    """
    head = bytes(data[:FIXED_LEN])
    if head[:4] != MAGIC[: len(head)]:
        raise MalformedEnvelope("not a sealflow envelope")
    if len(head) < FIXED_LEN:
        return None
    n = head[10]
    if not 1 <= n <= 64:
        raise MalformedEnvelope("bad key name length")
    return FIXED_LEN + n


def parse(data: bytes | bytearray | memoryview) -> Prefix:
    """Decode a whole prefix (exactly ``prefix_length(data)`` bytes)."""
    raw = bytes(data)
    if len(raw) < FIXED_LEN or prefix_length(raw) != len(raw):
        raise MalformedEnvelope("truncated envelope prefix")
    try:
        mode = Mode(raw[4])
    except ValueError:
        raise MalformedEnvelope("unknown envelope mode") from None
    algorithm = _CODE_ALGS.get(raw[5])
    if algorithm is None:
        raise MalformedEnvelope("unknown envelope algorithm")
    version = int.from_bytes(raw[6:10], "big")
    if version < 1:
        raise MalformedEnvelope("bad key version")
    try:
        name = raw[FIXED_LEN:].decode("ascii")
    except UnicodeDecodeError:
        raise MalformedEnvelope("bad key name") from None
    if not valid_name(name):
        raise MalformedEnvelope("bad key name")
    return Prefix(mode, algorithm, version, name)


def valid_name(name: str) -> bool:
    return NAME_RE.fullmatch(name) is not None


def in_native_domain(aad: bytes | bytearray | memoryview) -> bool:
    """Whether an AAD begins as every native AAD does (``bound_data``): the magic, then a mode.

    The single-shot body is Transit's ciphertext layout, under the same key material, so the one
    thing that keeps the two formats apart is the AAD: other AEAD users of these keys (Transit's
    ``associated_data``) are refused an AAD for which this is true, and then no input of theirs
    equals a native envelope's (docs/API.md, Domain separation).
    """
    return len(aad) > len(MAGIC) and aad[: len(MAGIC)] == MAGIC and aad[len(MAGIC)] in _MODES


def bound_data(prefix: bytes, user_aad: bytes) -> bytes:
    """What the body authenticates besides itself: the envelope prefix, then the user's AAD.

    The C2SP context in stream mode, the AEAD's AAD in single-shot mode.
    """
    return prefix + user_aad
