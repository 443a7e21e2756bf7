"""Keystore files made by hand: one of schema 1, and damaged ones.

The schema-1 file is what sealflow wrote before rows were authenticated (up to c62b1f6), built
without sealflow's code from the old layout: its schema, statements and wrapping (AES-256-GCM
under the master key, AAD = label, name and version), with `cryptography`'s AESGCM.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

V1_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS keys (name TEXT PRIMARY KEY, algorithm TEXT NOT NULL,"
    " exportable INTEGER NOT NULL, min_decryption_version INTEGER NOT NULL,"
    " created_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS key_versions (name TEXT NOT NULL, version INTEGER NOT NULL,"
    " wrapped BLOB NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (name, version))",
    "CREATE TABLE IF NOT EXISTS tokens (id TEXT PRIMARY KEY, digest BLOB NOT NULL UNIQUE,"
    " scopes TEXT NOT NULL, label TEXT NOT NULL, created_at REAL NOT NULL, revoked_at REAL)",
)
# Undoes PostgreSQL migration 6 (token lifetimes): the table as the releases before it left it.
PG_UNDO_MIGRATION_6 = (
    "ALTER TABLE sealflow_tokens DROP COLUMN ttl, DROP COLUMN expire_at,"
    " DROP COLUMN explicit_max_ttl, DROP COLUMN renewable, DROP COLUMN num_uses,"
    " DROP COLUMN uses, DROP COLUMN parent, DROP COLUMN orphan"
)
# The tables migration 7 made (AppRole), dropped to make a database of an earlier release.
PG_UNDO_MIGRATION_7 = "DROP TABLE sealflow_approle_secret_ids, sealflow_approle_roles"
PG_UNDO_MIGRATION_8 = (
    "ALTER TABLE sealflow_keys DROP COLUMN imported, DROP COLUMN allow_rotation;"
    " DELETE FROM sealflow_meta WHERE key = 'import_wrapping_key'"
)
# The table migration 9 made (certificate roles), likewise.
PG_UNDO_MIGRATION_9 = "DROP TABLE sealflow_cert_roles"
# The column migration 10 added (Transit's allow_plaintext_backup), likewise.
PG_UNDO_MIGRATION_10 = "ALTER TABLE sealflow_key_policy DROP COLUMN plaintext_backup"
# The columns migration 11 added (Transit's trim and soft delete), likewise.
PG_UNDO_MIGRATION_11 = (
    "ALTER TABLE sealflow_key_policy DROP COLUMN min_available_version, DROP COLUMN soft_deleted"
)
KEY_LEN = {"aes-128-gcm": 16, "aes-256-gcm": 32, "chacha20-poly1305": 32}


def v1_aad(name: str, version: int) -> bytes:
    return b"sealflow-key-v1\x00" + name.encode() + b"\x00" + version.to_bytes(4, "big")


def v1_wrap(master: bytes, name: str, version: int, material: bytes) -> bytes:
    nonce = os.urandom(12)
    return nonce + AESGCM(master).encrypt(nonce, material, v1_aad(name, version))


@dataclass
class V1Store:
    """What a schema-1 file holds, in the clear, to compare with after the upgrade."""

    materials: dict[tuple[str, int], bytes] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)  # token label -> secret


# (name, algorithm, exportable, versions, min_decryption_version)
KEYS = [
    ("default", "aes-256-gcm", False, 1, 1),
    ("orders", "aes-256-gcm", False, 3, 2),
    ("export.me", "chacha20-poly1305", True, 2, 1),
    ("small", "aes-128-gcm", True, 1, 1),
]
# (label, scopes, revoked)
TOKENS = [
    ("root", "admin encrypt:* decrypt:*", False),
    ("app", "encrypt:orders decrypt:orders", False),
    ("gone", "admin", True),
]


def build_v1(path: Path, master: bytes) -> V1Store:
    """A schema-1 keystore at ``path`` (WAL, 0600, as the old code made it) with KEYS and TOKENS."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    made = V1Store()
    now = time.time()
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("BEGIN IMMEDIATE")
        for statement in V1_SCHEMA:
            db.execute(statement)
        check = v1_wrap(master, "!check", 0, b"sealflow master key check")
        db.executemany("INSERT INTO meta VALUES (?, ?)", [("schema_version", 1), ("check", check)])
        for name, algorithm, exportable, versions, min_version in KEYS:
            db.execute(
                "INSERT INTO keys VALUES (?, ?, ?, ?, ?)",
                (name, algorithm, exportable, min_version, now),
            )
            for version in range(1, versions + 1):
                material = os.urandom(KEY_LEN[algorithm])
                made.materials[name, version] = material
                wrapped = v1_wrap(master, name, version, material)
                db.execute(
                    "INSERT INTO key_versions VALUES (?, ?, ?, ?)",
                    (name, version, wrapped, now + version),
                )
        for label, scopes, revoked in TOKENS:
            secret = secrets.token_urlsafe(32)
            made.secrets[label] = secret
            digest = hashlib.sha256(secret.encode()).digest()
            row = (
                "tok_" + secrets.token_hex(8),
                digest,
                scopes,
                label,
                now,
                now if revoked else None,
            )
            db.execute("INSERT INTO tokens VALUES (?, ?, ?, ?, ?, ?)", row)
        db.execute("COMMIT")
    return made


def dump(path: Path) -> list[tuple[object, ...]]:
    """Every table's rows and the schema, to show a file did not change."""
    with closing(sqlite3.connect(path)) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master ORDER BY name")]
        rows: list[tuple[object, ...]] = [
            ("schema", *db.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall())
        ]
        for table in tables:
            if not table.startswith("sqlite_"):
                rows += db.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()  # noqa: S608
        return rows


def checkpoint(path: Path) -> None:
    """Move every committed page from the WAL into the file itself."""
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def corrupt_free_space(path: Path, table: str) -> None:
    """Point the first freeblock of the table's root page past the page's end.

    SQLite still reads the table; ``PRAGMA quick_check`` reports "free space corruption".
    """
    checkpoint(path)
    with closing(sqlite3.connect(path)) as db:
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
        sql = "SELECT rootpage FROM sqlite_master WHERE name = ?"
        (root,) = db.execute(sql, (table,)).fetchone()
    with path.open("r+b") as f:
        f.seek((root - 1) * page_size + 1)
        f.write(b"\xff\xf0")
