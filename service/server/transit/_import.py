"""Transit's BYOK import: ``wrapping_key``, ``keys/:name/import`` and ``keys/:name/import_version``
(OpenBao's path_import.go and path_wrapping_key.go), over the keystore's ``Imports``.

Fields are checked in Transit's order and refused with its words, before anything is written;
the ciphertext is unwrapped (``keystore._byok``) only once the request is otherwise valid, and
its material goes straight into the keystore, which wraps it under the master key. Signing
keys (ed25519, ECDSA, RSA) come as a wrapped PKCS #8 private key, as OpenBao takes them
(``_private_key``: checked against the type, in OpenBao's words). What the keystore cannot hold
(derived keys, Vault's other key types) is refused with a 400 naming it; a ``public_key`` import
(an RSA public key, a byok-export destination) goes to ``_public``.
Keystore work (RSA, one transaction) runs on a thread.
"""

from __future__ import annotations

import asyncio

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    SOFT_DELETED,
    KeyNotFound,
    KeyStore,
    KeyType,
    make_key_type,
)

from . import _keys, _public, _wire
from ._wire import Body


async def wrapping_key(store: KeyStore) -> bytes:
    # The first read makes the key (RSA-4096: a second or so): off the event loop.
    return _wire.envelope({"public_key": await asyncio.to_thread(store.wrapping_public_pem)})


async def import_key(store: KeyStore, name: str, body: Body) -> None:
    if _public.is_public_import(body):
        await _public.import_public(store, name, body)
        return
    _keys.check_name(name)
    if "convergent_encryption" in body:
        raise _wire.user_error("import cannot be used on keys with convergent encryption enabled")
    allow_rotation = _wire.as_bool(body, "allow_rotation")
    period = _keys.period(body)
    if period and not allow_rotation:
        raise _wire.user_error("allow_rotation must be set to true if auto-rotation is enabled")
    ciphertext = _ciphertext(body)
    kind = _wire.as_str(body, "type", "aes256-gcm96").lower()
    algorithm: Algorithm | KeyType | None = _keys.TYPES.get(kind)
    if kind in _SIGNING:
        algorithm = make_key_type(kind)
    if algorithm is None:
        if kind in _keys.UNSUPPORTED:
            raise _wire.user_error(f"key type {kind} is not supported by sealflow")
        raise _wire.user_error(f"unknown key type: {kind}")
    exportable = _wire.as_bool(body, "exportable")
    backup = _wire.as_bool(body, "allow_plaintext_backup")
    _keys.refuse_flags(body, "derived")
    if _wire.as_str(body, "context", ""):
        raise _wire.user_error("context is not supported by sealflow")
    if _exists(store, name):
        raise _wire.user_error(
            "the import path cannot be used with an existing key; use import-version to rotate"
            " an existing imported key"
        )
    material = await _unwrap(store, ciphertext, body)
    if isinstance(algorithm, KeyType):
        material = _private_key(algorithm.name, material)
    else:
        _size(material, algorithm.spec.key_len, kind)
    await asyncio.to_thread(
        store.import_key,
        name,
        algorithm,
        material,
        exportable=exportable,
        allow_rotation=allow_rotation,
        auto_rotate_period=period or None,
        allow_plaintext_backup=backup,
    )


async def import_version(store: KeyStore, name: str, body: Body) -> None:
    ciphertext = _ciphertext(body)
    try:
        key = store.get_key(name)
    except KeyNotFound:
        await asyncio.to_thread(_public.refuse, store, name, "import_version")
        raise _wire.user_error(
            f"no key found with name {name}; to import a new key, use the import/ endpoint"
        ) from None
    if key.soft_deleted:
        raise _wire.user_error(SOFT_DELETED)
    if not key.imported:
        raise _wire.user_error("the import_version endpoint can only be used with an imported key")
    material = await _unwrap(store, ciphertext, body)
    kind = key.key_type
    if kind.signs:
        material = _private_key(kind.name, material)
    else:
        _size(material, kind.key_size, kind.name)
    if body.get("version") is not None:
        # As Transit: only asymmetric keys take a version to fill in; every type here is not.
        wanted = _wire.as_int(body, "version")
        if wanted not in {v.version for v in key.versions}:
            raise _wire.user_error("no such key version")
        raise _wire.user_error("provided type does not support importing key versions")
    await asyncio.to_thread(store.import_version, name, material)


def _exists(store: KeyStore, name: str) -> bool:
    # Checked again in the keystore's transaction; here so no RSA work is spent on it.
    try:
        store.get_key(name)
    except KeyNotFound:
        return False
    return True


def _ciphertext(body: Body) -> str:
    if body.get("public_key") is not None:
        # A public key has one version here (``_public``); no other key takes one.
        raise _wire.user_error("public_key import_version is not supported by sealflow")
    ciphertext = _wire.as_str(body, "ciphertext", "")
    if not ciphertext:
        raise _wire.user_error("provided type does not support public_key import")
    return ciphertext


async def _unwrap(store: KeyStore, ciphertext: str, body: Body) -> bytes:
    hash_function = _wire.as_str(body, "hash_function", "SHA256")
    return await asyncio.to_thread(store.unwrap_import, ciphertext, hash_function)


_SIGNING = frozenset(
    ["ed25519", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa-2048", "rsa-3072", "rsa-4096"]
)
_CURVES = {"ecdsa-p256": "P-256", "ecdsa-p384": "P-384", "ecdsa-p521": "P-521"}
_GO_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
_RSA_BYTES = {"rsa-2048": 256, "rsa-3072": 384, "rsa-4096": 512}


def _private_key(kind: str, der: bytes) -> bytes:
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


def _size(material: bytes, wanted: int, kind: str) -> None:
    if len(material) != wanted:
        raise _wire.user_error(
            f"error importing key: invalid key size {len(material)} bytes for key type {kind}"
        )
