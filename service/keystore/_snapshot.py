"""A keystore's rows as stored, read from one snapshot and written back, for either store.

What ``sealflow keystore backup`` saves and ``restore`` puts back (``_backup``): every table
whose rows decide something, verbatim (wrapped material, MACs, digests, times, ids), the import
wrapping key (wrapped), and the keystore's check value (``Integrity.check_blob``), whose digest
is the keystore's id. Both stores authenticate the same columns with the same Python types
(``_pg_schema``), so a row read from one is valid in the other under the same master key:
nothing is unwrapped, rewrapped or re-signed, and a row that was refused before stays refused.

Left out: the change counter and migrations (each store keeps its own), the markers of
one-time upgrades (a store that opens makes them), and the audit trail (``sealflow_audit``
is an append-only record of the past, not state; docs/OPERATIONS.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._dialect import Connection
from ._integrity import CERT_ROLE_ROW, ROLE_ROW, SECRET_ID_ROW, TOKEN_ROW
from .errors import BackupRefused, KeyStoreCorrupt

Rows = list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Table:
    """A table by its SQLite name (PostgreSQL's are ``Store.name``'s), its columns, its order."""

    name: str
    columns: tuple[str, ...]
    order: str
    # Some rows only (the meta table's that are state), kept out of the emptiness check.
    where: str = ""


# In an order that PostgreSQL's foreign keys accept on insert (keys before what refers to them).
TABLES = (
    Table(
        "keys",
        (
            "name",
            "algorithm",
            "exportable",
            "min_decryption_version",
            "created_at",
            "imported",
            "allow_rotation",
            "mac",
        ),
        "name",
    ),
    Table("key_versions", ("name", "version", "wrapped", "created_at"), "name, version"),
    # Creation order: a restored store numbers them again in the same order (rowid, seq).
    Table("tokens", (*TOKEN_ROW.columns, "mac"), "{creation_order}"),
    Table("key_limits", ("name", "max_encryptions", "auto_rotate_period", "mac"), "name"),
    Table("key_usage", ("name", "version", "reserved", "bytes"), "name, version"),
    Table(
        "key_policy",
        (
            "name",
            "min_encryption_version",
            "deletion_allowed",
            "made_exportable",
            "plaintext_backup",
            "min_available_version",
            "soft_deleted",
            "mac",
        ),
        "name",
    ),
    Table("approle_roles", (*ROLE_ROW.columns, "mac"), "name"),
    Table("approle_secret_ids", (*SECRET_ID_ROW.columns, "mac"), "accessor"),
    Table("cert_roles", (*CERT_ROLE_ROW.columns, "mac"), "name"),
    # The import wrapping key's private half, wrapped under the master key (``_imports``), and
    # the public-key-only keys, MAC'd (``_public_keys``: ``public-key/<name>``), and the sealed
    # key record (``_kek``), so that a restored keystore has the KEK its rows are wrapped under;
    # taken while a rotate-master runs, also the next record and the copy of the next KEK
    # (``_rotation``), so that the rows already rewrapped open too, and the rotation resumes.
    Table(
        "meta",
        ("key", "value"),
        "key",
        where="key = 'import_wrapping_key' OR key LIKE 'public-key/%'"
        " OR key IN ('master_seal', 'master_seal_next', 'master_kek_next')",
    ),
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The check value, then every table's rows in ``TABLES``'s order."""

    check: bytes
    tables: tuple[Rows, ...]

    @property
    def keystore_id(self) -> bytes:
        """16 bytes naming the keystore: random when it was made, kept by a restore."""
        return hashlib.sha256(self.check).digest()[:16]

    def count(self, table: str) -> int:
        return len(self.tables[[t.name for t in TABLES].index(table)])


class Store:
    """A store's dialect of the snapshot's SQL, made once: its placeholder, its table names
    (``name`` of a SQLite name), its order of creation, its meta table, and how a restore keeps
    other writers out (``lock``; none where a write transaction is the only writer anyway,
    SQLite's BEGIN IMMEDIATE)."""

    __slots__ = ("_check", "_count", "_delete", "_insert", "_lock", "_put_check", "_select")

    def __init__(
        self, param: str, name: Callable[[str], str], creation_order: str, lock: str = ""
    ) -> None:
        def sql(template: str, table: Table | None = None, **more: str) -> str:
            names = {"meta": name("meta"), "p": param, "creation_order": creation_order, **more}
            if table is not None:
                names |= {
                    "table": name(table.name),
                    "where": f" WHERE {table.where}" if table.where else "",
                    "columns": ", ".join(table.columns),
                    "marks": ", ".join([param] * len(table.columns)),
                    "order": table.order.format_map(names),
                }
            return template.format_map(names)

        every = ", ".join(name(t.name) for t in TABLES)
        self._lock = sql(lock, tables=every) if lock else ""
        self._check = sql("SELECT value FROM {meta} WHERE key = 'check'")
        self._put_check = sql("UPDATE {meta} SET value = {p} WHERE key = 'check'")
        counts = " + ".join(sql("(SELECT count(*) FROM {table})", t) for t in TABLES if not t.where)
        self._count = "SELECT " + counts
        self._select = [
            sql("SELECT {columns} FROM {table}{where} ORDER BY {order}", t) for t in TABLES
        ]
        self._insert = [sql("INSERT INTO {table} ({columns}) VALUES ({marks})", t) for t in TABLES]
        self._delete = [sql("DELETE FROM {table}{where}", t) for t in reversed(TABLES)]

    def read(self, db: Connection) -> Snapshot:
        """Every table, inside the caller's transaction: one snapshot when the caller's
        transaction gives one (SQLite: one read transaction; PostgreSQL: REPEATABLE READ)."""
        row = db.execute(self._check).fetchone()
        tables = tuple(list(map(tuple, db.execute(s).fetchall())) for s in self._select)
        return Snapshot(bytes(row[0]), tables)

    def put(self, db: Connection, snapshot: Snapshot, replace: bool, where: str) -> None:
        """A restore, inside the caller's write transaction: refused (BackupRefused) if the
        store holds rows and ``replace`` is not set (with it, they are deleted first); the rows
        written, then read back and compared (KeyStoreCorrupt, for the caller to roll back, if
        they differ)."""
        if self._lock:
            db.execute(self._lock)
        held = int(db.execute(self._count).fetchone()[0])
        if held and not replace:
            raise BackupRefused(
                f"keystore {where} is not empty ({held} rows): restore into a new keystore, or"
                " replace everything in it with --replace-existing; nothing was restored"
            )
        # An empty store's deletes delete nothing of its own but state made at open (meta).
        for statement in self._delete:
            db.execute(statement)
        for statement, rows in zip(self._insert, snapshot.tables, strict=True):
            for row in rows:
                db.execute(statement, row)
        db.execute(self._put_check, (snapshot.check,))
        if self.read(db) != snapshot:
            raise KeyStoreCorrupt(f"keystore {where} does not read back as restored; rolled back")
