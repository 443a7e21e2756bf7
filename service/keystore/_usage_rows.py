"""Usage rows, alike for every store: reservations, give-backs and totals (``_usage`` decides
when; this is what is written), each on the connection and in the transaction it is given.

Every statement names the key's identity (``Slot.born``, the creation time of its row)
beside its name, so what a process reserved of a deleted key never lands on a new key of the
same name (SQLite's ``key_usage`` has no foreign key to stop it).
"""

from __future__ import annotations

from ._base import Slot, VersionUsage
from ._dialect import Connection, Sql
from ._rows import grant
from .errors import KeyNotFound


def reserve(
    db: Connection, sql: Sql, slot: Slot, want: int, limit: int, nbytes: int
) -> tuple[int, int]:
    """Sealings granted (``_rows.grant``) and the total reserved after them, in the caller's
    write transaction; KeyNotFound if the slot's key is gone."""
    name, born, version = slot
    # PostgreSQL locks the key's row FOR SHARE: the key cannot be deleted (delete_key) before
    # this transaction ends. Its row first, then the usage row: delete_key's order (the key's
    # row FOR UPDATE, then usage, then versions), so the two never wait for each other in a
    # circle (long ago, this locked version 1 first: a deadlock with a deletion, a 503).
    if db.execute(sql.same_key, (name, born)).fetchone() is None:
        raise KeyNotFound(f"key {name!r} not found")
    db.execute(sql.usage_row, (name, version))
    # Under the row's lock (PostgreSQL: FOR UPDATE; SQLite: the transaction is the only
    # writer), so the grant is computed from a total no other process changes meanwhile.
    (reserved,) = db.execute(sql.reserved_of, (name, version)).fetchone()
    granted = grant(want, limit, reserved)
    db.execute(sql.reserve, (granted, nbytes, name, version))
    return granted, reserved + granted


def release(db: Connection, sql: Sql, slot: Slot, count: int, nbytes: int) -> None:
    name, born, version = slot
    db.execute(sql.release, (count, nbytes, name, version, name, born))


def reserved(db: Connection, sql: Sql, slots: list[Slot]) -> dict[Slot, int]:
    where, args = sql.slots(slots)
    rows = db.execute(sql.reserved + where, args).fetchall()
    found = {Slot(n, b, v): r for n, b, v, r in rows}
    return {slot: found[slot] for slot in slots if slot in found}


def usage(db: Connection, sql: Sql, name: str) -> dict[int, VersionUsage]:
    return {v: VersionUsage(r, b) for v, r, b in db.execute(sql.usage, (name,)).fetchall()}
