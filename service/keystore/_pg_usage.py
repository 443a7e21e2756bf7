"""The PostgreSQL keystore's usage rows: reservations, give-backs and totals (``_usage`` decides
when; this is the SQL), each inside the caller's transaction.

Every statement names the key's identity (``Slot.born``, the creation time of its version 1)
beside its name, so what a process reserved of a deleted key never lands on a new key of the
same name.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ._base import Slot, VersionUsage
from ._rows import grant
from .errors import KeyNotFound

Db = psycopg.Connection[tuple[Any, ...]]

_SAME_KEY = (
    "SELECT 1 FROM sealflow_key_versions WHERE name = %s AND version = 1 AND created_at = %s"
)


def reserve(db: Db, slot: Slot, want: int, limit: int, nbytes: int) -> tuple[int, int]:
    """Sealings granted (``_rows.grant``) and the total reserved after them; KeyNotFound if the
    slot's key is gone."""
    name, born, version = slot
    # FOR SHARE: the key cannot be deleted (delete_key) before this transaction ends.
    if db.execute(_SAME_KEY + " FOR SHARE", (name, born)).fetchone() is None:
        raise KeyNotFound(f"key {name!r} not found")
    db.execute(
        "INSERT INTO sealflow_usage VALUES (%s, %s, 0, 0) ON CONFLICT DO NOTHING",
        (name, version),
    )
    # The row lock orders reservations of all replicas; the grant is computed under it.
    row = db.execute(
        "SELECT reserved FROM sealflow_usage WHERE name = %s AND version = %s FOR UPDATE",
        (name, version),
    ).fetchone()
    granted = grant(want, limit, int(row[0]) if row else 0)
    after = db.execute(
        "UPDATE sealflow_usage SET reserved = reserved + %s, bytes = bytes + %s"
        " WHERE name = %s AND version = %s RETURNING reserved",
        (granted, nbytes, name, version),
    ).fetchone()
    return granted, int(after[0]) if after else granted


def release(db: Db, slot: Slot, count: int, nbytes: int) -> None:
    name, born, version = slot
    db.execute(
        "UPDATE sealflow_usage SET reserved = reserved - %s, bytes = bytes + %s"
        " WHERE name = %s AND version = %s AND EXISTS (SELECT 1 FROM sealflow_key_versions"
        " WHERE name = %s AND version = 1 AND created_at = %s)",
        (count, nbytes, name, version, name, born),
    )


def reserved(db: Db, slots: list[Slot]) -> dict[Slot, int]:
    rows = db.execute(
        "SELECT u.name, v.created_at, u.version, u.reserved FROM sealflow_usage u"
        " JOIN sealflow_key_versions v ON v.name = u.name AND v.version = 1"
        " WHERE (u.name, u.version) IN (SELECT * FROM unnest(%s::text[], %s::bigint[]))",
        ([s.name for s in slots], [s.version for s in slots]),
    ).fetchall()
    found = {Slot(n, float(b), int(v)): int(r) for n, b, v, r in rows}
    return {slot: found[slot] for slot in slots if slot in found}


def usage(db: Db, name: str) -> dict[int, VersionUsage]:
    rows = db.execute(
        "SELECT version, reserved, bytes FROM sealflow_usage WHERE name = %s", (name,)
    ).fetchall()
    return {int(v): VersionUsage(int(r), int(b)) for v, r, b in rows}
