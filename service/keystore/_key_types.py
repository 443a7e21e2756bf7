"""What a key is (Transit's key types) and the material each type holds.

A key is an AEAD of the engine's (what the native API and Transit encrypt with) or a type
Transit has besides: ``hmac`` (its material is the HMAC key), ``ed25519``, ``ecdsa-p256/384/521``
and ``rsa-2048/3072/4096`` (signing keys; RSA keys also encrypt with OAEP). ``derived`` and
``convergent`` (Transit's ``derived`` and ``convergent_encryption``) are fixed at creation.

The type is stored in the key row's ``algorithm`` column, which the row's MAC covers and which
every version's wrapping AAD binds (``_integrity``): a plain AEAD key keeps the engine's name
there, exactly as every key before this module was stored, so nothing stored changes; any other
key stores Transit's type name with its attributes after ``;`` (``hmac;size=64``,
``aes256-gcm96;derived;convergent``, ``aes256-gcm96;derived;kdf=hmac-sha256-counter``: a
derived key's KDF when it is not the default, HKDF). A release that does not know the form
refuses the key (fails closed) rather than misreading it.

Material per version: raw key bytes for AEAD and ``hmac`` keys; the 32-byte raw private key for
``ed25519``; the PKCS #8 DER private key for ECDSA and RSA.

Every version of every key also has an HMAC key (Transit's ``hmac/:name`` works on every key
type): for ``hmac`` keys the material itself; for the rest an HKDF-SHA256 derivation of the
version's material (RFC 5869, no salt, info ``HMAC_KEY_INFO``), so no stored row changes and
a version's HMAC key lives and dies with its material (docs/TRANSIT.md, HMAC).
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sealflow.engine import Algorithm

from .errors import InvalidRequest

# Transit's names for the engine's AEADs.
AEAD_NAMES: dict[str, Algorithm] = {
    "aes128-gcm96": Algorithm.AES_128_GCM,
    "aes256-gcm96": Algorithm.AES_256_GCM,
    "chacha20-poly1305": Algorithm.CHACHA20_POLY1305,
}
_AEAD_TYPE_NAMES = {alg: name for name, alg in AEAD_NAMES.items()}
_CURVES: dict[str, type[ec.EllipticCurve]] = {
    "ecdsa-p256": ec.SECP256R1,
    "ecdsa-p384": ec.SECP384R1,
    "ecdsa-p521": ec.SECP521R1,
}
_RSA_BITS = {"rsa-2048": 2048, "rsa-3072": 3072, "rsa-4096": 4096}
SIGNING_TYPES = frozenset(["ed25519", *_CURVES, *_RSA_BITS])
TYPE_NAMES = frozenset([*AEAD_NAMES, "hmac", *SIGNING_TYPES])
# Transit's supports_encryption, by type name: one lookup on every sealing's check.
_ENCRYPTING = frozenset([*AEAD_NAMES, *_RSA_BITS])
# Transit's bounds on an hmac key's size, in bytes (HmacMinKeySize, HmacMaxKeySize).
HMAC_MIN_SIZE, HMAC_MAX_SIZE = 32, 512
HMAC_KEY_INFO = b"sealflow transit hmac key v1"
# Transit's key derivation functions: HKDF for every key it makes, and the legacy NIST SP
# 800-108 counter mode over HMAC-SHA256 that its import gives derived keys.
KDF_HKDF, KDF_COUNTER = "hkdf_sha256", "hmac-sha256-counter"


@dataclass(frozen=True, slots=True)
class KeyType:
    """A key's type and its creation-time attributes (see the module docstring)."""

    name: str  # Transit's type name
    key_size: int = 0  # bytes of material: AEAD and hmac keys; 0 for signing keys
    derived: bool = False
    convergent: bool = False
    kdf: str = KDF_HKDF  # a derived key's

    @property
    def aead(self) -> Algorithm | None:
        return AEAD_NAMES.get(self.name)

    @property
    def signs(self) -> bool:
        return self.name in SIGNING_TYPES

    @property
    def rsa(self) -> bool:
        return self.name in _RSA_BITS

    @property
    def encrypts(self) -> bool:
        """Transit's supports_encryption (and decryption): the AEADs and RSA."""
        return self.name in _ENCRYPTING

    @property
    def column(self) -> str:
        """The stored form (the key row's ``algorithm`` column)."""
        aead = self.aead
        if aead is not None and not self.derived:
            return aead.value
        parts = [self.name]
        if self.name == "hmac":
            parts.append(f"size={self.key_size}")
        if self.derived:
            parts.append("derived")
        if self.convergent:
            parts.append("convergent")
        if self.kdf != KDF_HKDF:
            parts.append(f"kdf={self.kdf}")
        return ";".join(parts)


def of(algorithm: Algorithm) -> KeyType:
    """A plain key of one of the engine's AEADs."""
    return KeyType(_AEAD_TYPE_NAMES[algorithm], algorithm.spec.key_len)


def make(
    name: str,
    key_size: int = 0,
    derived: bool = False,
    convergent: bool = False,
    kdf: str = KDF_HKDF,
) -> KeyType:
    """A key type from Transit's creation fields, or InvalidRequest in Transit's words
    (their order is Transit's: convergence, the type, then the size; then the ``kdf``)."""
    if convergent and not derived:
        raise InvalidRequest("convergent encryption requires derivation to be enabled")
    if name not in TYPE_NAMES:
        raise InvalidRequest(f"unknown key type {name}")
    if key_size and name != "hmac":
        raise InvalidRequest(f"key_size is not valid for algorithm {name}")
    if key_size and not HMAC_MIN_SIZE <= key_size <= HMAC_MAX_SIZE:
        raise InvalidRequest(f"invalid key_size {key_size}")
    if name == "ed25519" and convergent:
        raise InvalidRequest(f"convergent encryption not supported for keys of type {name}")
    if name not in AEAD_NAMES and name != "ed25519" and (derived or convergent):
        raise InvalidRequest(
            f"key derivation and convergent encryption not supported for keys of type {name}"
        )
    if name == "hmac" and not key_size:  # as Transit, whose hmac keys have no default size
        raise InvalidRequest(
            f"invalid key size for HMAC key, must be between {HMAC_MIN_SIZE} and"
            f" {HMAC_MAX_SIZE} bytes"
        )
    aead = AEAD_NAMES.get(name)
    size = aead.spec.key_len if aead is not None else key_size
    if kdf != KDF_HKDF:
        _check_counter_kdf(name, derived, convergent, kdf)
    return KeyType(name, size, derived, convergent, kdf)


def _check_counter_kdf(name: str, derived: bool, convergent: bool, kdf: str) -> None:
    """The counter mode makes 32 bytes, all Transit reads of it: enough for an AES-256 or
    ChaCha20 key, not for AES-128 (which Transit seals with but cannot open) nor for a
    convergent key's 32 more (which Transit refuses)."""
    if kdf != KDF_COUNTER:
        raise InvalidRequest(f"unknown kdf {kdf}: {KDF_HKDF} or {KDF_COUNTER}")
    if not derived or convergent or name not in ("aes256-gcm96", "chacha20-poly1305"):
        raise InvalidRequest(
            f"kdf {KDF_COUNTER} is only for derived aes256-gcm96 and chacha20-poly1305 keys"
            " without convergent encryption"
        )


def parse(column: str) -> KeyType | None:
    """The stored form back, or None for one this release does not know (the key is refused)."""
    try:
        return of(Algorithm(column))
    except ValueError:
        pass
    name, *attributes = column.split(";")
    size, derived, convergent, kdf = 0, False, False, KDF_HKDF
    for attribute in attributes:
        if attribute.startswith("size=") and attribute[5:].isdigit() and name == "hmac":
            size = int(attribute[5:])
        elif attribute == "derived" and not derived:
            derived = True
        elif attribute == "convergent" and derived and not convergent:
            convergent = True
        elif attribute == f"kdf={KDF_COUNTER}" and kdf == KDF_HKDF:
            kdf = KDF_COUNTER
        else:
            return None
    try:
        kind = make(name, size, derived, convergent, kdf)
    except InvalidRequest:
        return None
    return kind if kind.column == column else None


def fresh_material(kind: KeyType) -> bytes:
    """A new version's material (see the module docstring for its form)."""
    if kind.key_size:
        return os.urandom(kind.key_size)
    if kind.name == "ed25519":
        return ed25519.Ed25519PrivateKey.generate().private_bytes_raw()
    private: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    if kind.name in _CURVES:
        private = ec.generate_private_key(_CURVES[kind.name]())
    else:
        private = rsa.generate_private_key(65537, _RSA_BITS[kind.name])
    return private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def check_material(kind: KeyType, material: bytes) -> None:
    """InvalidRequest unless ``material`` is a version of this type (an import, a restore)."""
    if kind.key_size:
        if len(material) != kind.key_size:
            raise InvalidRequest(f"the key material is not {kind.key_size} bytes for {kind.name}")
        return
    try:
        private_key(kind, material)
    except (ValueError, TypeError):
        raise InvalidRequest(f"the key material is not a {kind.name} private key") from None


Signer = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def private_key(kind: KeyType, material: bytes) -> Signer:
    """A signing key's private key object; ValueError if the material is not one of its type."""
    if kind.name == "ed25519":
        return ed25519.Ed25519PrivateKey.from_private_bytes(material)
    loaded = serialization.load_der_private_key(material, None)
    curve = _CURVES.get(kind.name)
    if isinstance(loaded, ec.EllipticCurvePrivateKey) and curve and isinstance(loaded.curve, curve):
        return loaded
    bits = _RSA_BITS.get(kind.name)
    if isinstance(loaded, rsa.RSAPrivateKey) and loaded.key_size == bits:
        return loaded
    raise ValueError(f"not a {kind.name} private key")


def public_key(kind: KeyType, material: bytes) -> str:
    """A signing key version's public key as Transit shows it: base64 of the raw key for
    ed25519, PEM (SubjectPublicKeyInfo) for ECDSA and RSA. ValueError for other types."""
    if not kind.signs:
        raise ValueError(f"a {kind.name} key has no public key")
    public = private_key(kind, material).public_key()
    if isinstance(public, ed25519.Ed25519PublicKey):
        return base64.b64encode(public.public_bytes_raw()).decode()
    pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem.decode()


def hmac_key(kind: KeyType, material: bytes) -> bytes:
    """A version's HMAC key (see the module docstring)."""
    if kind.name == "hmac":
        return material
    return HKDF(hashes.SHA256(), 32, None, HMAC_KEY_INFO).derive(material)
