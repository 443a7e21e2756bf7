"""Which key-encryption key a stored blob or MAC is under: its KEK generation, written in
front of it, so a reader picks the one key it needs and never tries two.

Generation 0 is every keystore's KEK until its first ``rotate-master``: its blobs and MACs are
stored as they always were, with nothing in front. Each rotation makes the next generation,
whose values start with ``sfk`` and the generation (4 bytes, big-endian). A value is read as
generation g only if it starts with g's head and the reader holds g; anything else is
generation 0, so a value written before rotations existed is misread only if its first 7
(random) bytes happen to be a held generation's head: about 2^-56 per row (docs/SERVICE.md,
The key hierarchy).
"""

from __future__ import annotations

from collections.abc import Container

_MARKER = b"sfk"
HEAD_LEN = len(_MARKER) + 4


def head(generation: int) -> bytes:
    """What a value of ``generation`` (>= 1) starts with."""
    return _MARKER + generation.to_bytes(4, "big")


def tag(generation: int, value: bytes) -> bytes:
    return value if generation == 0 else head(generation) + value


def split(value: bytes, held: Container[int]) -> tuple[int, bytes]:
    """(the generation ``value`` is under, the value without its head)."""
    if len(value) > HEAD_LEN and value[: len(_MARKER)] == _MARKER:
        generation = int.from_bytes(value[len(_MARKER) : HEAD_LEN], "big")
        if generation and generation in held:
            return generation, value[HEAD_LEN:]
    return 0, value
