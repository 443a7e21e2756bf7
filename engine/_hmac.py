"""HMAC under one key: of one message, of a stream, and of many records in one native call.

The records form is the blind-index workload's (one tag per value, millions of values per
request): one crossing for a whole batch, the key's inner and outer pad states made once per
call and copied per record (``sf_hmac_many``; docs/BENCHMARKS.md, "HMAC of records"). A stream
(one tag of a body that arrives in pieces) goes through ``cryptography``'s HMAC, whose per-call
cost does not matter for one tag.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as pyca_hmac

from . import _binding
from ._checks import as_bytes_view
from ._records import FRAME_LEN, Records, as_records
from ._types import BytesLike


class Digest(enum.StrEnum):
    """HMAC's hash functions, by Transit's names (the C table's order: ``SF_DIGESTS``)."""

    SHA2_224 = "sha2-224"
    SHA2_256 = "sha2-256"
    SHA2_384 = "sha2-384"
    SHA2_512 = "sha2-512"
    SHA3_224 = "sha3-224"
    SHA3_256 = "sha3-256"
    SHA3_384 = "sha3-384"
    SHA3_512 = "sha3-512"

    @property
    def size(self) -> int:
        """Bytes of its tags."""
        return _SIZES[_INDEX[self]]


_INDEX: dict[str, int] = {d: i for i, d in enumerate(Digest)}  # a Digest is a str
_ONE_MAX = (1 << 32) - 1  # a record's length is a u32
_SIZES = _binding.digest_sizes()
_PYCA: dict[Digest, Callable[[], hashes.HashAlgorithm]] = {
    Digest.SHA2_224: hashes.SHA224,
    Digest.SHA2_256: hashes.SHA256,
    Digest.SHA2_384: hashes.SHA384,
    Digest.SHA2_512: hashes.SHA512,
    Digest.SHA3_224: hashes.SHA3_224,
    Digest.SHA3_256: hashes.SHA3_256,
    Digest.SHA3_384: hashes.SHA3_384,
    Digest.SHA3_512: hashes.SHA3_512,
}


def digest(name: Digest | str) -> Digest:
    """The Digest of that name, or ValueError."""
    try:
        return Digest(name)
    except ValueError:
        raise ValueError(
            f"unknown digest {name!r}; expected one of {[d.value for d in Digest]}"
        ) from None


def hmac_many(
    name: Digest | str,
    key: BytesLike,
    records: Records | Iterable[BytesLike],
    *,
    framed: bool = False,
) -> bytearray:
    """The HMAC of every record under key, tags end to end in record order, each
    ``name``'s size (``Digest.size``) and, with ``framed``, behind its ``u32`` big-endian
    length (then the result is a ``mode=records`` response body as it is)."""
    d = digest(name)
    key = as_bytes_view(key, "key")
    batch = as_records(records)
    each = d.size + (FRAME_LEN if framed else 0)
    out = _binding.new_bytearray(each * len(batch))
    _binding.hmac_many(_INDEX[d], key, batch.data, batch.lengths, batch.is_framed, framed, out)
    return out


def hmac(name: Digest | str, key: BytesLike, data: BytesLike) -> bytes:
    """The HMAC of one message, through the records' loops (``sf_hmac_small``)."""
    index = _INDEX.get(name)  # a StrEnum member hashes and compares as its str: no enum call
    if index is None:
        index = _INDEX[digest(name)]
    key, data = as_bytes_view(key, "key"), as_bytes_view(data, "data")
    if len(data) > _ONE_MAX:
        raise ValueError("hmac: a message of 4 GiB or more takes HmacStream")
    return _binding.hmac_one(index, _SIZES[index], key, data)


class HmacStream:
    """The HMAC of a message that comes in pieces: ``update`` each, then ``finalize`` once."""

    __slots__ = ("_mac",)

    def __init__(self, name: Digest | str, key: BytesLike) -> None:
        self._mac = pyca_hmac.HMAC(bytes(as_bytes_view(key, "key")), _PYCA[digest(name)]())

    def update(self, data: BytesLike) -> None:
        self._mac.update(as_bytes_view(data, "data"))

    def finalize(self) -> bytes:
        return self._mac.finalize()
