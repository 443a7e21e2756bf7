"""Public-key-only RSA keys on Transit (``keys/:name/import`` with ``type`` rsa-* and
``public_key``, held by ``keystore._public_keys``) and OpenBao's ``byok-export/:destination/
:source[/:version]`` (path_byok.go), which wraps an exportable key's versions for one of them.

Such a key is only ever a byok-export destination: sealflow holds no RSA private key for it and
does no RSA encryption, so every data route, rotation and export refuses it with a 400
(``refuse``), in OpenBao's words where OpenBao has some. byok-export follows the export route's
rules (``export_material``: exportable keys only, versions from ``min_decryption_version`` up)
and answers with OpenBao's words, as 400s where OpenBao answers 500.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import parse_qs

from sealflow.service.keystore import (
    RSA_TYPES,
    KeyNotFound,
    KeyStore,
    NotExportable,
    PublicKeyInfo,
    VersionRetired,
    export_material,
)

from .._logging import AccessRecord
from . import _keys, _wire
from ._wire import Body

_EXISTING = (
    "the import path cannot be used with an existing key; use import-version to rotate an"
    " existing imported key"
)


def is_public_import(body: Body) -> bool:
    """Whether an import names a public key (``public_key`` given, or an RSA ``type`` with no
    ``ciphertext``: a wrapped private key is an RSA key like any other, ``_import``'s)."""
    kind = body.get("type")
    rsa = isinstance(kind, str) and kind in RSA_TYPES and not body.get("ciphertext")
    return body.get("public_key") is not None or rsa


async def import_public(store: KeyStore, name: str, body: Body) -> None:
    _keys.check_name(name)
    kind = _wire.as_str(body, "type", "aes256-gcm96").lower()
    if _wire.as_str(body, "ciphertext", ""):
        if body.get("public_key") is not None:
            raise _wire.user_error(
                "only one of the following fields, ciphertext and public_key, can be set"
            )
        raise _wire.user_error(f"key type {kind} is not supported by sealflow: only public_key")
    if kind not in RSA_TYPES:
        raise _wire.user_error("provided type does not support public_key import")
    # Nothing that would make it more than a destination: refused rather than ignored.
    _keys.refuse_flags(body, "derived", "allow_plaintext_backup", "exportable", "allow_rotation")
    if _keys.period(body):
        raise _wire.user_error("allow_rotation must be set to true if auto-rotation is enabled")
    try:
        store.get_key(name)
    except KeyNotFound:
        pass
    else:
        raise _wire.user_error(_EXISTING)
    pem = _wire.as_str(body, "public_key", "")
    await asyncio.to_thread(store.import_public_key, name, kind, pem)


def policy(key: PublicKeyInfo) -> dict[str, Any]:
    """As Transit's ``GET keys/:name`` shows an imported RSA public key; the ``supports_*``
    flags are sealflow's (it only wraps for such a key)."""
    created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(key.created_at))
    fraction = f"{key.created_at % 1:.9f}"[1:]
    return {
        "allow_plaintext_backup": False,
        "auto_rotate_period": 0,
        "deletion_allowed": key.deletion_allowed,
        "derived": False,
        "exportable": False,
        "imported_key": True,
        "imported_key_allow_rotation": False,
        "keys": {
            "1": {
                "certificate_chain": "",
                "creation_time": f"{created}{fraction}Z",
                "name": key.type,
                "public_key": key.public_key,
            }
        },
        "latest_version": 1,
        "min_available_version": 0,
        "min_decryption_version": 1,
        "min_encryption_version": 0,
        "name": key.name,
        "soft_deleted": False,
        "supports_decryption": False,
        "supports_derivation": False,
        "supports_encryption": False,
        "supports_signing": False,
        "type": key.type,
    }


def refuse(store: KeyStore, name: str, operation: str) -> None:
    """For a name not among the keys: a 400 if a public-key-only key holds it (``operation``
    is the route's kind), else nothing (the caller's not-found answer stands)."""
    key = store.public_key(name)
    if key is None:
        return
    if operation in ("rotate",):
        raise _wire.user_error(f"imported key {name} does not allow rotation within Vault")
    if operation == "export":
        raise _wire.user_error("private key material is not exportable")
    if operation == "decrypt":
        raise _wire.user_error(
            "cannot decrypt ciphertext, key version does not have a private counterpart"
        )
    raise _wire.user_error(
        f"key {name} is a public key ({key.type}): sealflow uses it only as a byok-export"
        " destination"
    )


async def config(store: KeyStore, key: PublicKeyInfo, body: Body) -> bytes:
    """``keys/:name/config`` of a public-key-only key: ``deletion_allowed`` only."""
    for field in sorted(body):
        if field != "deletion_allowed" and body[field] is not None:
            raise _wire.user_error(f"{field} is not supported by sealflow for a public key")
    if _wire.as_bool(body, "deletion_allowed") != key.deletion_allowed:
        wanted = _wire.as_bool(body, "deletion_allowed")
        key = await asyncio.to_thread(store.configure_public_key, key.name, wanted)
    return _wire.envelope(policy(key))


def byok_export(
    store: KeyStore,
    destination: str,
    source: str,
    version: str | None,
    query: bytes,
    log: AccessRecord,
) -> bytes:
    """OpenBao's ``byok-export``: the source's versions (or the one asked, or ``latest``),
    each wrapped for the destination's public key under ``hash`` (default SHA256)."""
    hashes = parse_qs(query.decode("latin-1")).get("hash")
    hash_name = hashes[-1] if hashes else "SHA256"
    target = store.public_key(destination)
    if target is None:
        try:
            kind = store.get_key(destination).key_type.name
        except KeyNotFound:
            raise _wire.user_error("no such destination key to export to") from None
        raise _wire.user_error(
            f"key wrapping (requring message signing) is not supported for key type {kind}"
        )
    try:
        key = export_material(store, source)[0]
    except KeyNotFound:
        if store.public_key(source) is not None:
            raise _wire.user_error("key is not exportable") from None
        raise _wire.user_error("no such source key for export") from None
    except NotExportable:
        raise _wire.user_error("key is not exportable") from None
    if key.key_type.signs:  # an AEAD (derived too) or hmac key's material is its key
        raise _wire.user_error(
            f"byok-export of a {key.key_type.name} key is not supported by sealflow"
        )
    if version is None:
        numbers = [v.version for v in key.versions if v.version >= key.min_decryption_version]
    else:
        wanted = version.removeprefix("v")
        number = key.latest if version == "latest" else _keys.parse_version(wanted)
        if number < key.min_decryption_version:
            raise _wire.user_error("version for export is below minimum decryption version")
        if number not in {v.version for v in key.versions}:
            raise _wire.user_error("version does not exist or cannot be found")
        numbers = [number]
    wrapped = {}
    for number in numbers:
        try:
            material = export_material(store, source, number)[2]
        except (VersionRetired, KeyNotFound):  # retired or gone meanwhile: not exported
            continue
        wrapped[str(number)] = target.wrap(material, hash_name)
        log.used(number)
    return _wire.envelope({"keys": wrapped, "name": source, "type": key.key_type.name})
