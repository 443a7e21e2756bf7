"""Transit's BYOK import format, unwrapped, and wrapped for ``byok-export``: ``ciphertext`` is
RSA-OAEP (of ``hash_function``, MGF1 with the same hash, no label) under the wrapping key of an
ephemeral AES-256 key, followed by the target key wrapped under that AES key with AES-KWP
(RFC 5649). Refusals use OpenBao's
words (path_import.go, and tink's KWP for the key wrap), as 400s where OpenBao answers most of
them with a 500. Not a hot path: ``cryptography`` does the work."""

from __future__ import annotations

import base64
import binascii
import os
import re

from cryptography.exceptions import InvalidKey
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.keywrap import (
    InvalidUnwrap,
    aes_key_unwrap_with_padding,
    aes_key_wrap_with_padding,
)

from .errors import InvalidRequest

WRAPPING_KEY_BITS = 4096
_RSA_BYTES = WRAPPING_KEY_BITS // 8
HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "SHA1": hashes.SHA1,
    "SHA224": hashes.SHA224,
    "SHA256": hashes.SHA256,
    "SHA384": hashes.SHA384,
    "SHA512": hashes.SHA512,
}
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
# tink's KWP: a wrapped key of 16 bytes or more (24 wrapped), whole 8-byte blocks.
_MIN_WRAPPED = 24


def hash_function(name: str) -> hashes.HashAlgorithm:
    """``hash_function`` as Transit reads it (any case), or InvalidRequest in its words."""
    kind = HASHES.get(name.upper())
    if kind is None:
        raise InvalidRequest(f"unknown hash function: {name}")
    return kind()


def decode(text: str) -> bytes:
    """Standard base64, padded, as Go's StdEncoding reads it; its message otherwise."""
    try:
        if _BASE64.fullmatch(text) is None or len(text) % 4:
            raise binascii.Error
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        bad = next((i for i, c in enumerate(text) if not c.isalnum() and c not in "+/="), None)
        raise InvalidRequest(
            f"illegal base64 data at input byte {len(text) if bad is None else bad}"
        ) from None


def unwrap(private: rsa.RSAPrivateKey, ciphertext: bytes, hash_name: str) -> bytes:
    """The target key of an import ``ciphertext``; InvalidRequest for anything wrong with it."""
    algorithm = hash_function(hash_name)
    if len(ciphertext) <= _RSA_BYTES:
        raise InvalidRequest("provided ciphertext is too short")
    oaep = padding.OAEP(mgf=padding.MGF1(algorithm), algorithm=algorithm, label=None)
    try:
        ephemeral = private.decrypt(ciphertext[:_RSA_BYTES], oaep)
    except ValueError:
        # One answer for every OAEP failure: which check failed is an oracle (Manger).
        raise InvalidRequest("crypto/rsa: decryption error") from None
    if len(ephemeral) != 32:
        raise InvalidRequest("expected ephemeral AES key to be 256-bit")
    wrapped = ciphertext[_RSA_BYTES:]
    if len(wrapped) < _MIN_WRAPPED:
        raise InvalidRequest("kwp: wrapped key size too small")
    if len(wrapped) % 8:
        raise InvalidRequest("kwp: wrapped key size must be a multiple of 8 bytes")
    try:
        return aes_key_unwrap_with_padding(ephemeral, wrapped)
    except (InvalidUnwrap, InvalidKey, ValueError):
        raise InvalidRequest("kwp: unwrap failed integrity check") from None


def wrap(public: rsa.RSAPublicKey, material: bytes, hash_name: str = "SHA256") -> str:
    """``material`` in the import format for the holder of ``public`` (base64, as Transit's
    ``byok-export`` answers it): RSA-OAEP of a fresh AES-256 key, then AES-KWP under it."""
    algorithm = hash_function(hash_name)
    ephemeral = os.urandom(32)
    oaep = padding.OAEP(mgf=padding.MGF1(algorithm), algorithm=algorithm, label=None)
    sealed = public.encrypt(ephemeral, oaep) + aes_key_wrap_with_padding(ephemeral, material)
    return base64.b64encode(sealed).decode()
