"""Transit's ``backup/:name`` and ``restore[/:name]``: one key's plaintext dump, and the key made
again from it, with Transit's rules (docs/TRANSIT.md, Backup and restore).

As in Vault the backup is the key in the clear: only a key both ``exportable`` and
``allow_plaintext_backup`` gives one, and only to a token with ``export`` on it (besides
``admin``). The payload is sealflow's own: base64 of a JSON object (``FORMAT``) holding the
key's type, its version rules and flags, and every version's material by number, versions
below ``min_decryption_version`` included (Vault's backup holds them too). A restore makes the
key again under the same version numbers, in one keystore transaction; ``force`` replaces a key
of that name, which sealflow allows only where deleting it is allowed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import time
from collections.abc import Callable

from sealflow.service.keystore import (
    DeletionNotAllowed,
    InvalidRequest,
    KeyExists,
    KeyNotFound,
    KeyStore,
    RestoredKey,
)

from . import _keys, _wire
from ._wire import Body

FORMAT = "sealflow-transit-backup-v1"


def backup(store: KeyStore, name: str) -> bytes:
    """``GET backup/:name``: Vault's refusals in Vault's words (400s here: Vault's are 500s)."""
    try:
        key = store.get_key(name)
    except KeyNotFound:
        raise _wire.user_error(f'key "{name}" not found') from None
    if not key.exportable:
        raise _wire.user_error("exporting is disallowed on the policy")
    if not key.allow_plaintext_backup:
        raise _wire.user_error("plaintext backup is disallowed on the policy")
    aead = key.key_type.aead
    if aead is None or key.key_type.derived:  # the payload holds a plain AEAD key only
        raise _wire.user_error(
            f"backup/:name of a {key.key_type.column.replace(';', ' ')} key is not supported by"
            " sealflow: back up the keystore instead (sealflow keystore backup)"
        )
    record = {
        "format": FORMAT,
        "name": key.name,
        "type": _keys.type_name(aead),
        "exportable": True,
        "allow_plaintext_backup": True,
        "deletion_allowed": key.deletion_allowed,
        "min_decryption_version": key.min_decryption_version,
        "min_encryption_version": key.min_encryption_version,
        "auto_rotate_period": int(key.auto_rotate_period),
        "latest_version": key.latest,
        "backup_time": int(time.time()),
        "keys": {
            str(v.version): {
                "key": base64.b64encode(store.key_material(name, v.version)).decode(),
                "creation_time": int(v.created_at),
            }
            for v in key.versions
        },
    }
    text = json.dumps(record, separators=(",", ":")).encode()
    return _wire.envelope({"backup": base64.b64encode(text).decode()})


async def restore(
    store: KeyStore, name: str | None, body: Body, allow: Callable[[str], None]
) -> str:
    """``POST restore[/:name]``: the key of ``backup`` under ``name``, or the name it was backed
    up under; the name. ``allow`` checks the caller's scope on the name, before anything is
    written."""
    data = _wire.as_str(body, "backup")
    force = _wire.as_bool(body, "force")
    if not data:
        raise _wire.user_error("'backup' must be supplied")
    key = _parse(data)
    if name is not None:
        key = dataclasses.replace(key, name=name)
    _keys.check_name(key.name)
    allow(key.name)
    try:
        await asyncio.to_thread(store.restore_key, key, force)
    except KeyExists:
        raise _wire.user_error(f'key "{key.name}" already exists') from None
    except DeletionNotAllowed:
        raise _wire.user_error(
            f'key "{key.name}" exists and deletion is not allowed for it: force replaces only'
            " a key that may be deleted"
        ) from None
    except InvalidRequest as exc:
        raise _wire.user_error(f"invalid backup: {exc}") from None
    return key.name


def _parse(data: str) -> RestoredKey:
    """The key a backup holds, or a 400 saying what is wrong with it (never its material)."""
    try:
        record = json.loads(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        raise _wire.user_error("invalid backup: not base64 of a sealflow key backup") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise _wire.user_error(f"invalid backup: not a key backup of format {FORMAT}")
    try:
        algorithm = _keys.TYPES[record["type"]]
        versions = record["keys"]
        material = tuple(
            (int(number), base64.b64decode(versions[number]["key"], validate=True))
            for number in sorted(versions, key=int)
        )
        key = RestoredKey(
            _text(record["name"]),
            algorithm,
            material,
            _number(record["min_decryption_version"]),
            _number(record["min_encryption_version"]),
            record["deletion_allowed"] is True,
            record["allow_plaintext_backup"] is True,
            float(_number(record["auto_rotate_period"])),
        )
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise _wire.user_error("invalid backup: a field is missing or malformed") from None
    return key


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _number(value: object) -> int:
    if type(value) is not int:
        raise TypeError("not an integer")
    return value
