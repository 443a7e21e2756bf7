"""The SQLite keystore's usage rows: reservations, give-backs and totals (``_usage`` decides
when; this is the SQL), on the store's connection under its lock.

Every statement names the key's identity (``Slot.born``, the creation time of its version 1)
beside its name, so what a process reserved of a deleted key never lands on a new key of the
same name (``key_usage`` has no foreign key to stop it).
"""

from __future__ import annotations

import sqlite3

from ._base import Slot, VersionUsage
from ._rows import grant
from .errors import KeyNotFound

_SAME_KEY = "SELECT 1 FROM key_versions WHERE name = ? AND version = 1 AND created_at = ?"


def reserve(
    db: sqlite3.Connection, slot: Slot, want: int, limit: int, nbytes: int
) -> tuple[int, int]:
    """Sealings granted (``_rows.grant``) and the total reserved after them, in one
    ``BEGIN IMMEDIATE`` transaction; KeyNotFound if the slot's key is gone."""
    name, born, version = slot
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute(_SAME_KEY, (name, born)).fetchone() is None:
            raise KeyNotFound(f"key {name!r} not found")
        db.execute("INSERT OR IGNORE INTO key_usage VALUES (?, ?, 0, 0)", (name, version))
        (reserved,) = db.execute(
            "SELECT reserved FROM key_usage WHERE name = ? AND version = ?", (name, version)
        ).fetchone()
        granted = grant(want, limit, reserved)
        db.execute(
            "UPDATE key_usage SET reserved = reserved + ?, bytes = bytes + ?"
            " WHERE name = ? AND version = ?",
            (granted, nbytes, name, version),
        )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return granted, reserved + granted


def release(db: sqlite3.Connection, slot: Slot, count: int, nbytes: int) -> None:
    name, born, version = slot
    # One statement: the check and the write see the same state of the file.
    db.execute(
        "UPDATE key_usage SET reserved = reserved - ?, bytes = bytes + ?"
        " WHERE name = ? AND version = ? AND EXISTS (SELECT 1 FROM key_versions"
        " WHERE name = ? AND version = 1 AND created_at = ?)",
        (count, nbytes, name, version, name, born),
    )


def reserved(db: sqlite3.Connection, slots: list[Slot]) -> dict[Slot, int]:
    rows = db.execute(
        "SELECT u.name, v.created_at, u.version, u.reserved FROM key_usage u"
        " JOIN key_versions v ON v.name = u.name AND v.version = 1"
    ).fetchall()
    found = {Slot(n, b, v): r for n, b, v, r in rows}
    return {slot: found[slot] for slot in slots if slot in found}


def usage(db: sqlite3.Connection, name: str) -> dict[int, VersionUsage]:
    rows = db.execute(
        "SELECT version, reserved, bytes FROM key_usage WHERE name = ?", (name,)
    ).fetchall()
    return {v: VersionUsage(r, b) for v, r, b in rows}
