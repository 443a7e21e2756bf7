"""Transit's BYOK import: ``wrapping_key``, ``keys/:name/import`` and ``keys/:name/import_version``
(OpenBao's path_import.go and path_wrapping_key.go), over the keystore's ``Imports``.

Fields are checked in Transit's order and refused with its words, before anything is written;
the ciphertext is unwrapped (``keystore._byok``) only once the request is otherwise valid, and
its material goes straight into the keystore, which wraps it under the master key. The AEADs
(``derived`` and ``convergent_encryption`` too), hmac keys and signing keys (ed25519, ECDSA,
RSA: a wrapped PKCS #8 private key, as OpenBao takes them, checked by ``_pkcs8``) are imported;
a ``public_key`` import (an RSA public key, a byok-export destination) goes to ``_public``.
Keystore work (RSA, one transaction) runs on a thread.
"""

from __future__ import annotations

import asyncio

from sealflow.service.keystore import (
    HMAC_MAX_SIZE,
    HMAC_MIN_SIZE,
    KDF_HKDF,
    SOFT_DELETED,
    InvalidRequest,
    KeyNotFound,
    KeyStore,
    KeyType,
    make_key_type,
)

from ..errors import ApiError
from . import _keys, _pkcs8, _public, _wire
from ._wire import Body


async def wrapping_key(store: KeyStore) -> bytes:
    # The first read makes the key (RSA-4096: a second or so): off the event loop.
    return _wire.envelope({"public_key": await asyncio.to_thread(store.wrapping_public_pem)})


async def import_key(store: KeyStore, name: str, body: Body) -> None:
    if _public.is_public_import(body):
        await _public.import_public(store, name, body)
        return
    _keys.check_name(name)
    allow_rotation = _wire.as_bool(body, "allow_rotation")
    period = _keys.period(body)
    if period and not allow_rotation:
        raise _wire.user_error("allow_rotation must be set to true if auto-rotation is enabled")
    ciphertext = _ciphertext(body)
    kind = _wire.as_str(body, "type", "aes256-gcm96").lower()
    if kind in _keys.UNSUPPORTED:
        raise _wire.user_error(f"key type {kind} is not supported by sealflow")
    if kind not in _IMPORTABLE:
        raise _wire.user_error(f"unknown key type: {kind}")
    exportable = _wire.as_bool(body, "exportable")
    backup = _wire.as_bool(body, "allow_plaintext_backup")
    derived = _wire.as_bool(body, "derived")
    # Taken, where OpenBao refuses it (500): so that a convergent key leaves OpenBao with its
    # ciphertexts (docs/TRANSIT.md, Derived keys and convergent encryption).
    convergent = _wire.as_bool(body, "convergent_encryption")
    if convergent and not derived:
        raise _wire.user_error("convergent encryption requires derivation to be enabled")
    # sealflow's own field: OpenBao's import gives every derived key hmac-sha256-counter.
    kdf = _wire.as_str(body, "kdf", KDF_HKDF) if derived else KDF_HKDF
    if _wire.as_str(body, "context", ""):
        raise _wire.user_error("context is not supported by sealflow")
    if _exists(store, name):
        raise _wire.user_error(
            "the import path cannot be used with an existing key; use import-version to rotate"
            " an existing imported key"
        )
    material = await _unwrap(store, ciphertext, body)
    if kind in _pkcs8.SIGNING_TYPES:  # a PKCS #8 private key: held as the type holds it
        material = _pkcs8.material(kind, material)
    key_type = _type_of(kind, material, derived, convergent, kdf)
    await asyncio.to_thread(
        store.import_key,
        name,
        key_type,
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
    if key.key_type.convergent:  # OpenBao's refusal, kept
        raise _wire.user_error(
            "import_version cannot be used on keys with convergent encryption enabled"
        )
    material = await _unwrap(store, ciphertext, body)
    if key.key_type.signs:
        material = _pkcs8.material(key.key_type.name, material)
    elif key.key_type.key_size:
        _size(material, key.key_type.key_size, _type_label(key.key_type))
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


# The types ``import`` takes: the AEADs, hmac and the signing keys (docs/TRANSIT.md).
_IMPORTABLE = frozenset([*_keys.TYPES, "hmac", *_pkcs8.SIGNING_TYPES])


def _type_of(kind: str, material: bytes, derived: bool, convergent: bool, kdf: str) -> KeyType:
    """The imported key's type: an hmac key's size is its material's, as in Transit."""
    if kind == "hmac":
        if not HMAC_MIN_SIZE <= len(material) <= HMAC_MAX_SIZE:
            raise _bad_size(material, kind)
        size = len(material)
    else:
        size = 0
        if kind in _keys.TYPES:  # a signing key was checked by ``_pkcs8.material``
            _size(material, _keys.TYPES[kind].spec.key_len, kind)
    try:
        return make_key_type(kind, size, derived, convergent, kdf)
    except InvalidRequest as exc:
        raise _wire.user_error(str(exc)) from None


def _type_label(kind: KeyType) -> str:
    return kind.name if kind.aead is None else _keys.type_name(kind.aead)


def _size(material: bytes, wanted: int, kind: str) -> None:
    if len(material) != wanted:
        raise _bad_size(material, kind)


def _bad_size(material: bytes, kind: str) -> ApiError:
    return _wire.user_error(
        f"error importing key: invalid key size {len(material)} bytes for key type {kind}"
    )
