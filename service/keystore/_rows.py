"""Rows as every store reads them: checked key rows into ``KeyInfo``, token rows into
``TokenInfo``; shared by the SQLite and PostgreSQL stores so both decide alike."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from sealflow.engine import Algorithm

from ._base import KeyInfo, KeyVersionInfo, TokenInfo
from ._integrity import KEY_ROW, Integrity, refuse
from .errors import KeyNotFound, KeyStoreCorrupt

ALGORITHMS = {alg.value for alg in Algorithm}
MAX_VERSION = 0xFFFFFFFF  # four bytes in the envelope


def key_info(integrity: Integrity, rows: Sequence[Sequence[Any]], where: str) -> KeyInfo | None:
    """One key from its rows (the KEY_ROW columns, the MAC, then version and its creation time,
    one row per version), or None, logged once, if the key's row fails its check."""
    row, mac = tuple(rows[0][:5]), rows[0][5]
    if integrity.verify(KEY_ROW, row, mac):
        name, algorithm, exportable, min_version, _ = row
        if algorithm in ALGORITHMS:
            return KeyInfo(
                name=name,
                algorithm=Algorithm(algorithm),
                exportable=bool(exportable),
                min_decryption_version=min_version,
                versions=tuple(KeyVersionInfo(r[6], r[7]) for r in rows),
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


def token_info(row: Sequence[Any]) -> TokenInfo:
    token_id, _, scopes, label, created_at, revoked_at = row
    return TokenInfo(token_id, tuple(scopes.split()), label, created_at, revoked_at is not None)


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()
