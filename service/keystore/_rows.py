"""Rows as every store reads them: checked key rows into ``KeyInfo``, token rows into
``TokenInfo``; shared by the SQLite and PostgreSQL stores so both decide alike."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ._base import KeyInfo, KeyVersionInfo, Slot, TokenInfo
from ._integrity import (
    LIMITS_ROW,
    POLICY_BACKUP_ROW,
    POLICY_EXPORTABLE_ROW,
    POLICY_LIFECYCLE_ROW,
    POLICY_ROW,
    Integrity,
    Row,
    key_row_form,
    refuse,
)
from ._key_types import parse
from .errors import SOFT_DELETED, InvalidRequest, KeyNotFound, KeySoftDeleted, KeyStoreCorrupt

MAX_VERSION = 0xFFFFFFFF  # four bytes in the envelope


def key_info(integrity: Integrity, rows: Sequence[Sequence[Any]], where: str) -> KeyInfo | None:
    """One key from its rows (the KEY_IMPORTED_ROW columns, the MAC, then version and its
    creation time, one row per version), or None, logged once, if the key's row fails its
    check."""
    row, mac = tuple(rows[0][:7]), rows[0][7]
    if integrity.verify(*key_row_form(row), mac):
        name, algorithm, exportable, min_version, created_at, imported, allow_rotation = row
        kind = parse(algorithm)
        if kind is not None:
            return KeyInfo(
                name=name,
                key_type=kind,
                exportable=bool(exportable),
                created_exportable=bool(exportable),
                min_decryption_version=min_version,
                versions=tuple(KeyVersionInfo(r[8], r[9]) for r in rows),
                imported=bool(imported),
                allow_rotation=bool(allow_rotation),
                created_at=created_at,
            )
    refuse(where, f"key {row[0]!r}")
    return None


def present(keys: dict[str, KeyInfo | None], name: str) -> KeyInfo:
    """The key, KeyNotFound, or KeyStoreCorrupt for a key whose row failed its check."""
    if name not in keys:
        raise KeyNotFound(f"key {name!r} not found")
    info = keys[name]
    if info is None:
        raise KeyStoreCorrupt(f"key {name!r} fails its integrity check")
    return info


def usable(info: KeyInfo, version: int, in_use: bool = True) -> None:
    """Refuse a version's material to every caller: KeySoftDeleted for a soft-deleted key
    (unless not ``in_use``: a copy's check), KeyNotFound for a version trimmed (a cache may
    still hold it until its next reload)."""
    if in_use and info.soft_deleted:
        raise KeySoftDeleted(SOFT_DELETED)
    if version < info.min_available_version:
        raise KeyNotFound(f"key {info.name!r} version {version} not found (trimmed)")


def token_info(row: Sequence[Any]) -> TokenInfo:
    """A token from its row (TOKEN_ROW's columns, checked by the caller)."""
    token_id, _, scopes, label, created_at, revoked_at, ttl, expire_at = row[:8]
    explicit_max_ttl, renewable, num_uses, uses, parent, orphan = row[8:]
    return TokenInfo(
        token_id,
        tuple(scopes.split()),
        label,
        created_at,
        revoked_at is not None,
        ttl=ttl,
        expire_time=expire_at,
        explicit_max_ttl=explicit_max_ttl,
        renewable=bool(renewable),
        num_uses=num_uses,
        uses=uses,
        parent=parent,
        orphan=bool(orphan),
    )


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def live_token(tokens: dict[bytes, tuple[bytes, TokenInfo]], secret: str) -> TokenInfo | None:
    """The token with this secret among ``tokens`` (by digest, as ``_tables.Tables.tokens``
    reads them) unless revoked, or None. Expired ones too: the caller refuses them, with
    their own code (``KeyStore.find_token``)."""
    wanted = digest(secret)
    entry = tokens.get(wanted)
    if entry is None:
        return None
    # The lookup is keyed by a SHA-256 digest, so its timing says nothing useful about the
    # secret; the final equality check is still constant-time, as the spec asks.
    stored, info = entry
    return info if hmac.compare_digest(stored, wanted) and not info.revoked else None


def with_limits(
    integrity: Integrity,
    keys: dict[str, KeyInfo | None],
    limit_rows: Sequence[Sequence[Any]],
    where: str,
) -> dict[str, KeyInfo | None]:
    """The keys with their limits rows (name, max_encryptions, auto_rotate_period, mac) applied;
    a key whose limits row fails its check is refused like one whose own row does."""
    for row in limit_rows:
        name = row[0]
        info = keys.get(name)
        if info is None:
            continue
        values = tuple(row[:3])
        if integrity.verify(LIMITS_ROW, values, row[3]):
            keys[name] = replace(info, max_encryptions=row[1], auto_rotate_period=row[2])
        else:
            refuse(where, f"limits of key {name!r}")
            keys[name] = None
    return keys


def limits_row(
    info: KeyInfo, max_encryptions: int | None, auto_rotate_period: float | None
) -> tuple[str, int, float]:
    """The new limits row of a key (None: unchanged), or InvalidRequest."""
    most = info.max_encryptions if max_encryptions is None else max_encryptions
    period = info.auto_rotate_period if auto_rotate_period is None else auto_rotate_period
    if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= 2**32:
        raise InvalidRequest(f"max_encryptions must be an integer from 1 to 2^32, not {most!r}")
    if isinstance(period, bool) or not isinstance(period, int | float):
        raise InvalidRequest(f"auto_rotate_period must be a number of seconds, not {period!r}")
    if period != 0 and not 1 <= period <= 100 * 365 * 86400:
        raise InvalidRequest("auto_rotate_period must be 0 (never) or from 1 s to 100 years")
    return info.name, most, float(period)


def with_policy(
    integrity: Integrity,
    keys: dict[str, KeyInfo | None],
    policy_rows: Sequence[Sequence[Any]],
    where: str,
) -> dict[str, KeyInfo | None]:
    """The keys with their policy rows (``PolicyRow``'s columns, then the mac) applied; a key
    whose policy row fails its check is refused like one whose own row does (a forged
    ``deletion_allowed`` must not let a key be deleted, nor a forged ``made_exportable`` or
    ``plaintext_backup`` its material leave, nor a cleared ``soft_deleted`` a frozen key be
    used)."""
    for row in policy_rows:
        name = row[0]
        info = keys.get(name)
        if info is None:
            continue
        values = tuple(row[:7])
        if integrity.verify(*policy_form(values), row[7]):
            keys[name] = replace(
                info,
                min_encryption_version=row[1],
                deletion_allowed=bool(row[2]),
                exportable=info.created_exportable or bool(row[3]),
                allow_plaintext_backup=bool(row[4]),
                min_available_version=row[5],
                soft_deleted=bool(row[6]),
            )
        else:
            refuse(where, f"policy of key {name!r}")
            keys[name] = None
    return keys


# name, min_encryption_version, deletion_allowed, made_exportable, plaintext_backup,
# min_available_version, soft_deleted: as stored (flags 0 or 1).
PolicyRow = tuple[str, int, int, int, int, int, int]


def policy_form(values: Sequence[Any]) -> tuple[Row, Sequence[Any]]:
    # A row is MAC'd as rows were before the columns it leaves at 0 existed (_integrity).
    if values[5] != 0 or values[6] != 0:
        return POLICY_LIFECYCLE_ROW, values
    if values[4] != 0:
        return POLICY_BACKUP_ROW, values[:5]
    if values[3] != 0:
        return POLICY_EXPORTABLE_ROW, values[:4]
    return POLICY_ROW, values[:3]


def policy_mac(integrity: Integrity, row: PolicyRow) -> bytes:
    return integrity.mac(*policy_form(row))


def policy_row(
    info: KeyInfo,
    min_decryption_version: int,
    min_encryption_version: int | None,
    deletion_allowed: bool | None,
    exportable: bool | None = None,
    plaintext_backup: bool | None = None,
) -> PolicyRow:
    """The new policy row of a key (None: unchanged), or InvalidRequest. Stored as SQLite hands
    it back (``deletion_allowed`` and ``made_exportable`` 0 or 1), so the MAC verifies on
    reading. ``made_exportable`` is set only for a key not created exportable: the creation
    flag stays in the key's row and its wrapping."""
    least = (
        info.min_encryption_version if min_encryption_version is None else min_encryption_version
    )
    allowed = info.deletion_allowed if deletion_allowed is None else deletion_allowed
    if isinstance(least, bool) or not isinstance(least, int) or not 0 <= least <= info.latest:
        raise InvalidRequest(
            f"min_encryption_version must be between 0 and {info.latest}, not {least!r}"
        )
    if least and least < min_decryption_version:
        raise InvalidRequest(
            f"min_encryption_version {least} is below min_decryption_version"
            f" {min_decryption_version}"
        )
    if not isinstance(allowed, bool):
        raise InvalidRequest(f"deletion_allowed must be true or false, not {allowed!r}")
    if exportable is not None and not isinstance(exportable, bool):
        raise InvalidRequest(f"exportable must be true or false, not {exportable!r}")
    if exportable is False and info.exportable:
        raise InvalidRequest(
            f"key {info.name!r} is exportable and stays so: its material may have been"
            " exported already"
        )
    if plaintext_backup is not None and not isinstance(plaintext_backup, bool):
        raise InvalidRequest(
            f"allow_plaintext_backup must be true or false, not {plaintext_backup!r}"
        )
    if plaintext_backup is False and info.allow_plaintext_backup:
        raise InvalidRequest(
            f"key {info.name!r} allows plaintext backup and stays so: a backup of it may have"
            " been taken already"
        )
    if info.min_available_version and least < info.min_available_version:
        raise InvalidRequest("min encryption version should not be less than min available version")
    made = info.exportable or bool(exportable)
    backup = info.allow_plaintext_backup or bool(plaintext_backup)
    return (
        info.name,
        least,
        int(allowed),
        int(made and not info.created_exportable),
        int(backup),
        info.min_available_version,
        int(info.soft_deleted),
    )


def stored_policy(info: KeyInfo) -> PolicyRow:
    """The policy row a key has now (a key without one: the row its defaults make)."""
    return (
        info.name,
        info.min_encryption_version,
        int(info.deletion_allowed),
        int(info.exportable and not info.created_exportable),
        int(info.allow_plaintext_backup),
        info.min_available_version,
        int(info.soft_deleted),
    )


def forget_replaced(material: dict[Slot, bytes], keys: dict[str, KeyInfo | None]) -> None:
    """Drop cached material of keys deleted, or deleted and created again, since it was cached,
    and of versions trimmed.

    Material is cached by ``Slot`` (name, ``KeyInfo.born``, version): a lookup by a key's slot
    never finds another key's material, whatever a reload did meanwhile, so this only frees what
    no present key can ask for. A key refused (None) keeps its material: it is refused on every
    call anyway, and a refusal may be lifted by restoring the row.
    """
    for slot in [s for s in material if _replaced(keys, s)]:
        del material[slot]


def _replaced(keys: dict[str, KeyInfo | None], slot: Slot) -> bool:
    # A version trimmed is gone too: its material is never asked for again.
    if slot.name not in keys:
        return True
    info = keys[slot.name]
    return info is not None and (
        info.born != slot.born or slot.version < info.min_available_version
    )


# Sealings reserved at a time, at most, and the share of what is left one reservation takes.
BLOCK = 65536
SHARE = 16


def grant(want: int, limit: int, reserved: int) -> int:
    """How many of ``want`` sealings one reservation gets: never past ``limit``, and at most a
    sixteenth of what is left, so that near the limit no process holds much that others cannot
    have (docs/SERVICE.md, Usage)."""
    left = limit - reserved
    if left <= 0:
        return 0
    return min(want, max(left // SHARE, 1), left)
