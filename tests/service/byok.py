"""Wrapping key material for Transit's BYOK import, as a client does it (Vault's documented
recipe, with ``cryptography``): RSA-OAEP of an ephemeral AES-256 key, then AES-KWP."""

from __future__ import annotations

import base64
import os

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.keywrap import aes_key_wrap_with_padding


def wrap_raw(public_pem: str, material: bytes, hash_name: str = "SHA256") -> bytes:
    public = serialization.load_pem_public_key(public_pem.encode())
    assert isinstance(public, rsa.RSAPublicKey)
    algorithm = getattr(hashes, hash_name)()
    ephemeral = os.urandom(32)
    oaep = padding.OAEP(mgf=padding.MGF1(algorithm), algorithm=algorithm, label=None)
    return public.encrypt(ephemeral, oaep) + aes_key_wrap_with_padding(ephemeral, material)


def wrap(public_pem: str, material: bytes, hash_name: str = "SHA256") -> str:
    """The ``ciphertext`` field of an import of ``material`` under this wrapping key."""
    return base64.b64encode(wrap_raw(public_pem, material, hash_name)).decode()


def other_public_pem() -> str:
    """A wrapping key of no server's: an import wrapped for it must be refused."""
    key = rsa.generate_private_key(65537, 4096).public_key()
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
