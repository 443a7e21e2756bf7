"""Shared names and constants of the engine."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeAlias

# What the public API accepts wherever it takes bytes.
BytesLike: TypeAlias = bytes | bytearray | memoryview

NONCE_LEN = 12
TAG_LEN = 16
CHUNK_LEN = 16384
SEALED_CHUNK_LEN = CHUNK_LEN + TAG_LEN
SALT_LEN = 24
COMMITMENT_LEN = 32
HEADER_LEN = SALT_LEN + COMMITMENT_LEN
MAX_CHUNKS = 1 << 38


class Algorithm(enum.StrEnum):
    AES_128_GCM = "aes-128-gcm"
    AES_256_GCM = "aes-256-gcm"
    CHACHA20_POLY1305 = "chacha20-poly1305"

    @property
    def spec(self) -> AlgorithmSpec:
        return _SPECS[self]


class ContextStrategy(enum.Enum):
    """When a thread's native cipher context is freed (Amazon Corretto Crypto Provider's names).

    EAGER frees it after every operation; HYBRID keeps it while consecutive
    operations use the same key; LAZY keeps it for the thread's life and
    re-keys it in place.
    """

    LAZY = 0
    HYBRID = 1
    EAGER = 2


class RecordStatus(enum.IntEnum):
    """What ``open_many`` made of each record (the C side's SF_REC_* values)."""

    OK = 0
    FAILED = 1  # authentication failed, or too short for nonce and tag
    OTHER_PREFIX = 2  # does not start with the prefix the call was given


@dataclass(frozen=True, slots=True)
class AlgorithmSpec:
    algorithm: Algorithm
    index: int  # position in the native cipher table and the selection table
    key_len: int
    iana_name: bytes  # the AEAD's name in the IANA registry, for C2SP key derivation


_SPECS = {
    Algorithm.AES_128_GCM: AlgorithmSpec(Algorithm.AES_128_GCM, 0, 16, b"AEAD_AES_128_GCM"),
    Algorithm.AES_256_GCM: AlgorithmSpec(Algorithm.AES_256_GCM, 1, 32, b"AEAD_AES_256_GCM"),
    Algorithm.CHACHA20_POLY1305: AlgorithmSpec(
        Algorithm.CHACHA20_POLY1305, 2, 32, b"AEAD_CHACHA20_POLY1305"
    ),
}
