"""The sealed key record's row (``_kek.RECORD_META``), read before the store opens (the store
needs the KEK it holds) and written once: at creation, or by the first open of a keystore made
before providers. Each store's errors become keystore errors here, as in the stores."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

import psycopg

from ._kek import RECORD_META
from .errors import DriverErrors


def read_sqlite(path: Path, key: str = RECORD_META) -> tuple[bool, object]:
    """(whether the file holds a keystore, its record's value or None; ``key``: another meta
    row's, such as the next record of a rotation under way)."""
    if not os.path.lexists(path) or os.stat(path).st_size == 0:
        return False, None
    with (
        DriverErrors(sqlite3.Error, f"keystore {path}"),
        closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db,
    ):
        db.execute("PRAGMA busy_timeout = 10000")
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
        if "meta" not in tables:
            return True, None  # not a keystore: the store says so when it opens
        row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return True, None if row is None else row[0]


def write_sqlite(path: Path, value: bytes) -> None:
    """Kept if a record is there (two processes upgrading at once seal the same keys)."""
    with (
        DriverErrors(sqlite3.Error, f"keystore {path}"),
        closing(sqlite3.connect(path, isolation_level=None)) as db,
    ):
        db.execute("PRAGMA busy_timeout = 10000")
        db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (RECORD_META, value))


def read_postgres(url: str, where: str) -> tuple[bool, object]:
    with (
        DriverErrors(psycopg.Error, f"keystore {where}"),
        psycopg.connect(url, connect_timeout=10) as db,
    ):
        exists = db.execute("SELECT to_regclass('sealflow_meta') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return False, None
        row = db.execute(
            "SELECT (SELECT value FROM sealflow_meta WHERE key = 'check'),"
            " (SELECT value FROM sealflow_meta WHERE key = %s)",
            (RECORD_META,),
        ).fetchone()
    if row is None or row[0] is None:
        return False, None
    return True, None if row[1] is None else bytes(row[1])


def write_postgres(url: str, where: str, value: bytes) -> None:
    with (
        DriverErrors(psycopg.Error, f"keystore {where}"),
        psycopg.connect(url, connect_timeout=10) as db,
    ):
        db.execute(
            "INSERT INTO sealflow_meta VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
            (RECORD_META, value),
        )
