"""Transit's derived keys, sans-IO: the per-context key of a ``derived`` key version and the
nonce of convergent encryption, as OpenBao makes them (``sdk/helper/keysutil/policy.go``:
``DeriveKey``, ``EncryptWithFactory``, ``SymmetricEncryptRaw``), so that the same material
gives the same keys and ciphertexts on both (docs/TRANSIT.md, Derived keys and convergent
encryption).

- The key for a ``context``: HKDF-SHA256 (RFC 5869) with the version's material as input
  keying material, no salt (HKDF's default: 32 zero bytes), ``info`` = the decoded context,
  the first ``key_len`` bytes of its output (OpenBao's ``kdf`` ``hkdf_sha256``, the only one
  it makes for new keys). A key imported with ``kdf`` ``hmac-sha256-counter`` (what OpenBao's
  import gives a derived key) uses NIST SP 800-108's counter mode over HMAC-SHA256 as OpenBao
  does (``sdk/helper/kdf``): HMAC-SHA256 keyed with the material of ``be32(0) || context ||
  be32(256)``, 32 bytes, all it reads.
- Convergent encryption (OpenBao's convergent version 3): the same HKDF output read on for 32
  more bytes, the nonce-HMAC key (its own per context: not the version's HMAC key); the nonce
  is the first 12 bytes of HMAC-SHA256 under it of the plaintext, and the ciphertext carries it
  as every Transit ciphertext does (``nonce || ciphertext || tag``).

Every operation on a derived key goes through ``derive``: its material is never used as it is
(the keystore's usage meter refuses it unless the caller says it derives). OpenBao derives a
derived ed25519 key's signing seed the same way (the first 32 bytes of the HKDF output), but
with Go's 64-byte private key (seed || public key) as the input keying material.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from sealflow.service.keystore import KDF_COUNTER, KDF_HKDF

from . import _ciphertext

MISSING_CONTEXT = (
    "missing 'context' for key derivation; the key was created using a derived key, which means"
    " additional, per-request information must be included in order to perform operations with"
    " the key"
)
NONCE_KEY_LEN = 32
_COUNTER_BITS = struct.pack(">I", 256)
_ZERO_SALT = bytes(hashlib.sha256().digest_size)


class ContextError(ValueError):
    """A request that cannot have its key derived; the message is Transit's."""


def derive(material: bytes, context: bytes, size: int, kdf: str = KDF_HKDF) -> bytes:
    """The first ``size`` bytes of HKDF-SHA256(material, salt none, info context), or of the
    counter mode's 32 (``kdf``: see the module docstring)."""
    if not context:
        raise ContextError(MISSING_CONTEXT)
    if kdf == KDF_COUNTER:
        if size > len(_ZERO_SALT):  # one HMAC's output; the key type refuses more (``make``)
            raise ValueError(f"{KDF_COUNTER} makes 32 bytes, not {size}")
        return hmac.digest(material, bytes(4) + context + _COUNTER_BITS, "sha256")[:size]
    prk = hmac.digest(_ZERO_SALT, material, "sha256")
    out, block, counter = b"", b"", 1
    while len(out) < size:
        block = hmac.digest(prk, block + context + bytes([counter]), "sha256")
        out += block
        counter += 1
    return out[:size]


class ContextKey:
    """A key version's key for one context: the AEAD key, and for a convergent key the key its
    nonces come from (both from one HKDF output, as OpenBao reads them)."""

    __slots__ = ("aead", "nonce_key")

    def __init__(
        self,
        material: bytes,
        context: bytes,
        key_len: int,
        convergent: bool,
        kdf: str = KDF_HKDF,
    ) -> None:
        extra = NONCE_KEY_LEN if convergent else 0
        out = derive(material, context, key_len + extra, kdf)
        self.aead = out[:key_len]
        self.nonce_key = out[key_len:] if convergent else None

    def nonce_for(self, plaintext: bytes) -> bytes:
        """The convergent nonce of a plaintext under this context."""
        assert self.nonce_key is not None
        digest = hmac.digest(self.nonce_key, plaintext, "sha256")
        return digest[: _ciphertext.NONCE_LEN]
