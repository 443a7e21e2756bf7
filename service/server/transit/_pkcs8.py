"""A signing key imported through Transit's BYOK import (``_import``): OpenBao's recipe wraps
it as a PKCS #8 private key; sealflow holds an ed25519 key as its raw 32 bytes and an ECDSA or
RSA key as PKCS #8 DER (``keystore._key_types``). The key is checked against the type the
import names, and refused in OpenBao's words (its ``parseFromKey``) when it is not one of
them.
"""

from __future__ import annotations

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from . import _wire

SIGNING_TYPES = frozenset(
    ["ed25519", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa-2048", "rsa-3072", "rsa-4096"]
)
_CURVES = {"ecdsa-p256": "P-256", "ecdsa-p384": "P-384", "ecdsa-p521": "P-521"}
_GO_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
_RSA_BYTES = {"rsa-2048": 256, "rsa-3072": 384, "rsa-4096": 512}


def material(kind: str, der: bytes) -> bytes:
    """A signing key's material from an imported PKCS #8 private key (the raw 32-byte key for
    ed25519, PKCS #8 DER for ECDSA and RSA), refused in OpenBao's words if it is not one of
    the type's."""
    try:
        key = serialization.load_der_private_key(der, None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise _wire.user_error("error parsing asymmetric key: not a PKCS #8 private key") from None
    go_type = {
        ed25519.Ed25519PrivateKey: "ed25519.PrivateKey",
        ec.EllipticCurvePrivateKey: "*ecdsa.PrivateKey",
        rsa.RSAPrivateKey: "*rsa.PrivateKey",
    }
    got = next((name for cls, name in go_type.items() if isinstance(key, cls)), type(key).__name__)
    if isinstance(key, ed25519.Ed25519PrivateKey) and kind == "ed25519":
        return key.private_bytes_raw()
    pkcs8 = (serialization.Encoding.DER, serialization.PrivateFormat.PKCS8)
    if isinstance(key, ec.EllipticCurvePrivateKey) and kind in _CURVES:
        curve = _GO_CURVES.get(key.curve.name, key.curve.name)
        if curve != _CURVES[kind]:
            raise _wire.user_error(f"invalid curve: expected {_CURVES[kind]}, got {curve}")
        return key.private_bytes(*pkcs8, serialization.NoEncryption())
    if isinstance(key, rsa.RSAPrivateKey) and kind in _RSA_BYTES:
        size = (key.key_size + 7) // 8
        if size != _RSA_BYTES[kind]:
            raise _wire.user_error(
                f"invalid key size: expected {_RSA_BYTES[kind]} bytes, got {size} bytes"
            )
        return key.private_bytes(*pkcs8, serialization.NoEncryption())
    raise _wire.user_error(f"invalid key type: expected {kind}, got {got}")
