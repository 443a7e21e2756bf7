"""Transit's key routes over the keystore: create, read, list, rotate, config, delete, export.

Keys are the native API's keys: a key made here encrypts on ``/v1/keys/{name}/encrypt`` and
back, unless its name is one of Vault's that an envelope cannot carry (capitals, ``_``): such
a key is used through Transit only, and so is a key of a type the native API has no use for
(hmac, signing keys) or a derived key (it takes a ``context``). ``xchacha20-poly1305`` and
``external-key`` are refused with a 400 naming the type (docs/TRANSIT.md).
``keys/:name/config`` checks every field in Transit's order, with Transit's messages, before it
writes anything; ``exportable`` and ``allow_plaintext_backup`` go false -> true only (the
keystore records them beside the key's wrapping, which keeps the creation flag). Keystore writes
(one fsynced transaction) run on a thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
from typing import Any

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    KDF_COUNTER,
    SOFT_DELETED,
    DeletionNotAllowed,
    InvalidRequest,
    KeyExists,
    KeyInfo,
    KeyNotFound,
    KeyStore,
    KeyType,
    NotExportable,
    VersionRetired,
    VersionUsage,
    export_material,
    hmac_key,
    make_key_type,
    next_rotation,
    valid_key_name,
    version_public_key,
)

from ..errors import ApiError
from . import _public, _wire
from ._wire import Body

TYPES = {
    "aes128-gcm96": Algorithm.AES_128_GCM,
    "aes256-gcm96": Algorithm.AES_256_GCM,
    "chacha20-poly1305": Algorithm.CHACHA20_POLY1305,
}
_TYPE_NAMES = {alg: name for name, alg in TYPES.items()}


# Vault's names that sealflow has no key type for: refused as Transit refuses unknown types.
UNSUPPORTED = frozenset(["xchacha20-poly1305", "external-key"])


async def shown(
    store: KeyStore, key: KeyInfo, usage: dict[int, VersionUsage] | None = None
) -> dict[str, Any]:
    """``policy`` with the key's versions (``versions``: on a thread for a signing key, whose
    public keys need its material)."""
    if key.key_type.signs:
        keys = await asyncio.to_thread(versions, store, key)
    else:
        keys = versions(store, key)
    return policy(key, usage) | keys


def policy(key: KeyInfo, usage: dict[int, VersionUsage] | None = None) -> dict[str, Any]:
    """A key as Transit's ``GET keys/:name`` shows it (versions below
    min_decryption_version left out, as Transit does), with sealflow's usage accounting under
    ``sealflow_usage`` when ``usage`` is given (a field Transit clients ignore)."""
    extra: dict[str, Any] = {}
    if usage is not None:
        when = next_rotation(key)
        latest = usage.get(key.latest, VersionUsage(0, 0))
        extra["sealflow_usage"] = {
            "max_encryptions": key.max_encryptions,
            "encryptions_left": max(key.max_encryptions - latest.encryptions, 0),
            "next_rotation": None if when is None else int(when),
            "versions": {
                str(v): {"encryptions": u.encryptions, "bytes": u.bytes}
                for v, u in sorted(usage.items())
            },
        }
    kind = key.key_type
    return (
        extra
        | _kind_fields(kind)
        | {
            "allow_plaintext_backup": key.allow_plaintext_backup,
            "auto_rotate_period": int(key.auto_rotate_period),
            "deletion_allowed": key.deletion_allowed,
            "derived": kind.derived,
            "exportable": key.exportable,
            "imported_key": key.imported,
            "latest_version": key.latest,
            "min_available_version": key.min_available_version,
            "min_decryption_version": key.min_decryption_version,
            "min_encryption_version": key.min_encryption_version,
            "name": key.name,
            "soft_deleted": key.soft_deleted,
            "supports_decryption": kind.encrypts,
            "supports_derivation": kind.aead is not None or kind.name == "ed25519",
            "supports_encryption": kind.encrypts,
            "supports_signing": kind.signs,
            "type": kind.name,
        }
    )


def _kind_fields(kind: KeyType) -> dict[str, Any]:
    """What Transit shows of a key's type besides its name: its size (hmac keys), how a
    derived key derives."""
    fields: dict[str, Any] = {}
    if kind.name == "hmac":
        fields["key_size"] = kind.key_size
    if kind.derived:
        fields |= {"kdf": kind.kdf, "convergent_encryption": kind.convergent}
        if kind.kdf == KDF_COUNTER:  # OpenBao names the legacy mode twice
            fields["kdf_mode"] = kind.kdf
        if kind.convergent:
            fields["convergent_encryption_version"] = -1  # per version, as OpenBao shows it
    return fields


def versions(store: KeyStore, key: KeyInfo) -> dict[str, Any]:
    """Transit's ``keys`` of a key: each version's creation time (Unix seconds), or for a
    signing key its public key, name and creation time; an hmac key shows none, as Transit.
    Versions below min_decryption_version are left out, as Transit does. Reads material
    (a signing key's public half): call it off the event loop."""
    kind = key.key_type
    shown = [v for v in key.versions if v.version >= key.min_decryption_version]
    if kind.name == "hmac":
        return {}
    if not kind.signs:
        return {"keys": {str(v.version): int(v.created_at) for v in shown}}
    keys: dict[str, Any] = {}
    for v in shown:
        derived_ed25519 = kind.derived  # its public key depends on a context, not shown
        material = b"" if derived_ed25519 else store.material(key.slot(v.version))
        keys[str(v.version)] = {
            "certificate_chain": "",
            "creation_time": _rfc3339(v.created_at),
            "name": _CURVE_NAMES.get(kind.name, kind.name),
            "public_key": "" if derived_ed25519 else version_public_key(kind, material),
        }
    return {"keys": keys}


_CURVE_NAMES = {"ecdsa-p256": "P-256", "ecdsa-p384": "P-384", "ecdsa-p521": "P-521"}


def _rfc3339(when: float) -> str:
    """Go's time.Time in JSON (RFC 3339 with nanoseconds, trailing zeros dropped), UTC."""
    stamp = datetime.datetime.fromtimestamp(when, datetime.UTC)
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def period(body: Body) -> float | None:
    """``auto_rotate_period`` as Transit takes it: seconds, or a duration such as ``"24h"``;
    0 turns it off; otherwise at least an hour, as in Transit. None when not given."""
    value = body.get("auto_rotate_period")
    if value is None:
        return None
    if isinstance(value, str) and value[-1:] in _UNITS and value[:-1].strip().isdigit():
        count = _wire.atoi(value[:-1].strip())
        if count is None:  # beyond an int64: Go's time.ParseDuration overflows too
            raise _wire.user_error(
                'Field validation failed: error converting input for field "auto_rotate_period":'
                f' time: invalid duration "{value}"'
            )
        seconds = count * _UNITS[value[-1]]
    else:
        seconds = _wire.as_int(body, "auto_rotate_period")
    if seconds != 0 and not 3600 <= seconds <= 100 * 365 * 86400:
        raise _wire.user_error("auto rotate period must be 0 to disable or at least an hour")
    return float(seconds)


def type_name(algorithm: Algorithm) -> str:
    return _TYPE_NAMES[algorithm]


def check_name(name: str) -> None:
    if not valid_key_name(name):
        raise _wire.user_error(
            f"invalid key name {name!r}: key names are 1 to 64 ASCII characters, Vault's rule"
            r" \w(([\w-.]+)?\w)? (letters, digits, '_', and '-' or '.' inside) or sealflow's"
            " [a-z0-9][a-z0-9._-]*"
        )


async def read(store: KeyStore, name: str) -> bytes:
    try:
        key = store.get_key(name)
    except KeyNotFound:
        public = await asyncio.to_thread(store.public_key, name)
        if public is None:
            raise _wire.not_found() from None
        return _wire.envelope(_public.policy(public))
    # The usage is read from the keystore: on a thread, never on the event loop.
    return _wire.envelope(await shown(store, key, await asyncio.to_thread(store.usage, name)))


def all_names(store: KeyStore) -> list[str]:
    """Every key's name, sorted (public-key-only keys too)."""
    return sorted([key.name for key in store.list_keys()] + [k.name for k in store.public_keys()])


async def create(store: KeyStore, name: str, body: Body) -> bytes:
    check_name(name)
    kind = key_type(body)
    exportable = _wire.as_bool(body, "exportable")
    backup = _wire.as_bool(body, "allow_plaintext_backup")
    rotate_period = period(body)
    try:
        key = await asyncio.to_thread(
            store.create_key, name, kind, exportable, None, rotate_period or None
        )
    except KeyExists:  # as Transit: the key that exists, unchanged
        public = await asyncio.to_thread(store.public_key, name)
        if public is not None:
            return _wire.envelope(_public.policy(public))
        return _wire.envelope(await shown(store, store.get_key(name)))
    if backup:
        # A second transaction: a failure between the two leaves the flag unset (closed).
        key = await asyncio.to_thread(store.configure, name, plaintext_backup=True)
    return _wire.envelope(await shown(store, key))


def key_type(body: Body) -> KeyType:
    """The key type ``keys/:name`` (and ``import``) asks for: ``type``, ``key_size``,
    ``derived``, ``convergent_encryption``, checked in Transit's order and words."""
    derived = _wire.as_bool(body, "derived")
    convergent = _wire.as_bool(body, "convergent_encryption")
    name = _wire.as_str(body, "type", "aes256-gcm96")
    size = _wire.as_int(body, "key_size") if body.get("key_size") is not None else 0
    if convergent and not derived:
        raise _wire.user_error("convergent encryption requires derivation to be enabled")
    if name in UNSUPPORTED:
        raise _wire.user_error(f"key type {name} is not supported by sealflow")
    try:
        return make_key_type(name, size, derived, convergent)
    except InvalidRequest as exc:
        raise _wire.user_error(str(exc)) from None


async def rotate(store: KeyStore, name: str) -> bytes:
    try:
        key = await asyncio.to_thread(store.rotate_key, name)
    except KeyNotFound:
        await asyncio.to_thread(_public.refuse, store, name, "rotate")
        raise _wire.user_error(f"no existing key named {name} could be found") from None
    return _wire.envelope(await shown(store, key))


async def config(store: KeyStore, name: str, body: Body) -> bytes:
    try:
        key = store.get_key(name)
    except KeyNotFound:
        public = await asyncio.to_thread(store.public_key, name)
        if public is not None:
            return await _public.config(store, public, body)
        raise _wire.user_error(f"no existing key named {name} could be found") from None
    if key.soft_deleted:  # frozen until restored (OpenBao configures one: docs/TRANSIT.md)
        raise _wire.user_error(SOFT_DELETED)
    warnings = []
    min_decryption = key.min_decryption_version
    if _given(body, "min_decryption_version"):
        wanted = _wire.as_int(body, "min_decryption_version")
        if wanted < 0:
            raise _wire.user_error("min decryption version cannot be negative")
        if wanted == 0:
            wanted = 1
            warnings.append(
                "since Vault 0.3, transit key numbering starts at 1; forcing minimum to 1"
            )
        if wanted != min_decryption and wanted > key.latest:
            raise _wire.user_error(
                f"cannot set min decryption version of {wanted}, latest key version is {key.latest}"
            )
        min_decryption = wanted
    min_encryption = key.min_encryption_version
    if _given(body, "min_encryption_version"):
        wanted = _wire.as_int(body, "min_encryption_version")
        if wanted < 0:
            raise _wire.user_error("min encryption version cannot be negative")
        if wanted != min_encryption and wanted > key.latest:
            raise _wire.user_error(
                f"cannot set min encryption version of {wanted}, latest key version is {key.latest}"
            )
        min_encryption = wanted
    # Transit checks the pair as it would be after the call: each may change the other's bound.
    if 0 < min_encryption < min_decryption:
        raise _wire.user_error(
            "cannot set min encryption/decryption values; min encryption version of"
            f" {min_encryption} must be greater than or equal to min decryption version of"
            f" {min_decryption}"
        )
    deletion = key.deletion_allowed
    if _given(body, "deletion_allowed"):
        deletion = _wire.as_bool(body, "deletion_allowed")
    # As Transit: false -> true only; false on an exportable key is ignored (no error), since
    # material once exportable may have left already.
    exportable = _wire.as_bool(body, "exportable") or key.exportable
    # Likewise false -> true only, as Transit: a backup once allowed may have been taken.
    backup = _wire.as_bool(body, "allow_plaintext_backup") or key.allow_plaintext_backup
    rotate_period = period(body)
    # Everything checked: now the writes (the version rules and flags in one transaction).
    rules = (min_decryption, min_encryption, deletion, exportable, backup)
    if rules != (
        key.min_decryption_version,
        key.min_encryption_version,
        key.deletion_allowed,
        key.exportable,
        key.allow_plaintext_backup,
    ):
        # Transit lowers min_decryption_version when asked to; the keystore logs every change.
        key = await asyncio.to_thread(
            store.configure,
            name,
            min_decryption,
            min_encryption,
            deletion,
            True,
            exportable,
            backup,
        )
    if rotate_period is not None and rotate_period != key.auto_rotate_period:
        key = await asyncio.to_thread(store.set_limits, name, None, rotate_period)
    return _wire.envelope(await shown(store, key), warnings)


def asks_export(body: Body) -> bool:
    """Whether a create or ``config`` asks for ``exportable`` or ``allow_plaintext_backup``
    (the export scope's business: either lets material leave). A value Vault would not read as
    a bool is not asking: the route refuses it in its turn."""
    try:
        return _wire.as_bool(body, "exportable") or _wire.as_bool(body, "allow_plaintext_backup")
    except ApiError:
        return False


def _given(body: Body, field: str) -> bool:
    return body.get(field) is not None


async def delete(store: KeyStore, name: str) -> None:
    """Transit's ``DELETE keys/:name``: only once ``deletion_allowed`` was set; the key, every
    version's material, its limits and usage go in one keystore transaction (logged), and
    every replica drops it from its cache (docs/TRANSIT.md, Deleting a key)."""
    try:
        await asyncio.to_thread(store.delete_key, name)
    except KeyNotFound:
        if await asyncio.to_thread(store.public_key, name) is not None:
            await _delete_public(store, name)
            return
        raise _wire.user_error(
            f"error deleting policy {name}: could not delete key; not found"
        ) from None
    except DeletionNotAllowed:
        raise _wire.user_error(
            f"error deleting policy {name}: deletion is not allowed for this key"
        ) from None


async def _delete_public(store: KeyStore, name: str) -> None:
    try:
        await asyncio.to_thread(store.delete_public_key, name)
    except DeletionNotAllowed:
        raise _wire.user_error(
            f"error deleting policy {name}: deletion is not allowed for this key"
        ) from None


def export(store: KeyStore, kind: str, name: str, version: str | None) -> bytes:
    """``export/encryption-key|hmac-key/:name[/:version]`` under the keystore's export rules,
    the native export's (``export_material``: exportable keys only, no version below
    min_decryption_version), in Transit's order and words; every version that may leave when
    none is named. An hmac-key is the version's HMAC key (``hmac_key``), of any key type."""
    if kind not in ("encryption-key", "hmac-key"):
        raise _wire.user_error(f"invalid export type: {kind}")
    try:
        key = export_material(store, name)[0]
    except KeyNotFound:
        _public.refuse(store, name, "export")
        raise _wire.not_found() from None
    except NotExportable:
        raise _wire.user_error("private key material is not exportable") from None
    if kind == "encryption-key" and key.key_type.aead is None:
        raise _wire.user_error("encryption not supported for the key")

    def shown(number: int) -> str:
        material = export_material(store, name, number)[2]
        return _b64(material if kind == "encryption-key" else hmac_key(key.key_type, material))

    if version is None:
        keys = {}
        for v in key.versions:
            try:
                keys[str(v.version)] = shown(v.version)
            except VersionRetired:
                continue
    else:
        number = key.latest if version == "latest" else parse_version(version.removeprefix("v"))
        try:
            keys = {str(number): shown(number)}
        except VersionRetired:
            raise _wire.user_error(
                "version for export is below minimum decryption version"
            ) from None
        except KeyNotFound:
            raise _wire.user_error("version does not exist or cannot be found") from None
    return _wire.envelope({"keys": keys, "name": name, "type": key.key_type.name})


def _b64(material: bytes) -> str:
    return base64.b64encode(material).decode()


def parse_version(text: str) -> int:
    number = _wire.atoi(text)
    if number is None:
        raise _wire.user_error("invalid key version")
    return number


def refuse_flags(body: Body, *flags: str) -> None:
    for flag in flags:
        if _wire.as_bool(body, flag):
            raise _wire.user_error(f"{flag} is not supported by sealflow")
