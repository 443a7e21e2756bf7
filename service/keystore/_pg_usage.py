"""The PostgreSQL keystore's usage rows: reservations, give-backs and totals (``_usage`` decides
when; this is the SQL), each inside the caller's transaction."""

from __future__ import annotations

from typing import Any

import psycopg

from ._base import VersionUsage
from ._rows import grant

Db = psycopg.Connection[tuple[Any, ...]]


def reserve(db: Db, name: str, version: int, want: int, limit: int, nbytes: int) -> tuple[int, int]:
    """Sealings granted (``_rows.grant``) and the total reserved after them."""
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


def release(db: Db, name: str, version: int, count: int, nbytes: int) -> None:
    db.execute(
        "UPDATE sealflow_usage SET reserved = reserved - %s, bytes = bytes + %s"
        " WHERE name = %s AND version = %s",
        (count, nbytes, name, version),
    )


def reserved(db: Db, versions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    rows = db.execute(
        "SELECT name, version, reserved FROM sealflow_usage"
        " WHERE (name, version) IN (SELECT * FROM unnest(%s::text[], %s::bigint[]))",
        ([n for n, _ in versions], [v for _, v in versions]),
    ).fetchall()
    return {(n, int(v)): int(r) for n, v, r in rows}


def usage(db: Db, name: str) -> dict[int, VersionUsage]:
    rows = db.execute(
        "SELECT version, reserved, bytes FROM sealflow_usage WHERE name = %s", (name,)
    ).fetchall()
    return {int(v): VersionUsage(int(r), int(b)) for v, r, b in rows}
