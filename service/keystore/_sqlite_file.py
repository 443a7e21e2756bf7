"""The SQLite keystore's file: created in one step, checked at every open, upgraded from schema 1.

A keystore file is created whole or not at all. The schema, and whatever the first start puts
in it, is written to a temporary file in the same directory, which is then hard-linked into
place: a link never replaces a file, so of several processes creating one keystore exactly one
wins, and a file at the keystore's path is always a complete keystore. Anything else found
there (an empty file, another database, a damaged one) stops the opening with a message saying
so, and is left as it is.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from sealflow.engine import Algorithm

from ._integrity import KEY_ROW, LEGACY_TOKEN_ROW, SCHEMA_VERSION, Integrity
from ._masterkey import KeyWrapper
from .errors import KeyStoreCorrupt, KeyStoreUnavailable

log = logging.getLogger("sealflow.keystore")

SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
    # mac: _integrity's MAC over the other columns, in KEY_ROW.columns order.
    "CREATE TABLE keys (name TEXT PRIMARY KEY, algorithm TEXT NOT NULL,"
    " exportable INTEGER NOT NULL, min_decryption_version INTEGER NOT NULL,"
    " created_at REAL NOT NULL, mac BLOB NOT NULL)",
    # Rows are deleted only with their key (delete_key, deletion_allowed set); never changed:
    # `wrapped` is rewritten only by the upgrade from schema 1, with the same material.
    "CREATE TABLE key_versions (name TEXT NOT NULL, version INTEGER NOT NULL,"
    " wrapped BLOB NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (name, version))",
    # mac: over the other columns, in TOKEN_ROW.columns order (the lifetime columns are
    # USAGE_COLUMNS', added at every open).
    "CREATE TABLE tokens (id TEXT PRIMARY KEY, digest BLOB NOT NULL UNIQUE,"
    " scopes TEXT NOT NULL, label TEXT NOT NULL, created_at REAL NOT NULL, revoked_at REAL,"
    " mac BLOB NOT NULL)",
)

# Added after schema 2, and created where missing at every open: older releases ignore them.
USAGE_SCHEMA = (
    # mac: over the other columns, in LIMITS_ROW.columns order. No row: the default limits.
    "CREATE TABLE IF NOT EXISTS key_limits (name TEXT PRIMARY KEY,"
    " max_encryptions INTEGER NOT NULL, auto_rotate_period REAL NOT NULL, mac BLOB NOT NULL)",
    # Sealings reserved per version (never fewer than made) and plaintext bytes; no MAC: a
    # counter that UPDATE raises cannot carry one (docs/SERVICE.md, Usage).
    "CREATE TABLE IF NOT EXISTS key_usage (name TEXT NOT NULL, version INTEGER NOT NULL,"
    " reserved INTEGER NOT NULL, bytes INTEGER NOT NULL, PRIMARY KEY (name, version))",
    # mac: over the other columns, in POLICY_ROW.columns order, or POLICY_EXPORTABLE_ROW's
    # when made_exportable is set, or POLICY_LIFECYCLE_ROW's when min_available_version or
    # soft_deleted is. No row: min_encryption_version 0, deletion not allowed, exportable as
    # created (what every key had before this table), never trimmed nor soft-deleted.
    "CREATE TABLE IF NOT EXISTS key_policy (name TEXT PRIMARY KEY,"
    " min_encryption_version INTEGER NOT NULL, deletion_allowed INTEGER NOT NULL,"
    " mac BLOB NOT NULL, made_exportable INTEGER NOT NULL DEFAULT 0,"
    " min_available_version INTEGER NOT NULL DEFAULT 0,"
    " soft_deleted INTEGER NOT NULL DEFAULT 0)",
    # AppRole (``_approle_rows``); mac: over the other columns, in ROLE_ROW.columns order.
    "CREATE TABLE IF NOT EXISTS approle_roles (name TEXT PRIMARY KEY,"
    " role_id TEXT NOT NULL UNIQUE, policies TEXT NOT NULL, token_ttl INTEGER NOT NULL,"
    " token_max_ttl INTEGER NOT NULL, token_num_uses INTEGER NOT NULL,"
    " secret_id_ttl INTEGER NOT NULL, secret_id_num_uses INTEGER NOT NULL,"
    " secret_id_bound_cidrs TEXT NOT NULL, token_bound_cidrs TEXT NOT NULL,"
    " bind_secret_id INTEGER NOT NULL, created_at REAL NOT NULL, mac BLOB NOT NULL)",
    # mac: in SECRET_ID_ROW.columns order; digest: SHA-256 of the secret id, never the secret.
    "CREATE TABLE IF NOT EXISTS approle_secret_ids (accessor TEXT PRIMARY KEY,"
    " role TEXT NOT NULL, role_born REAL NOT NULL, digest BLOB NOT NULL UNIQUE,"
    " created_at REAL NOT NULL, expire_at REAL, num_uses INTEGER NOT NULL,"
    " uses INTEGER NOT NULL, cidrs TEXT NOT NULL, metadata TEXT NOT NULL, mac BLOB NOT NULL)",
    # Certificate roles (``_cert_rows``); mac: over the other columns, in CERT_ROLE_ROW.columns
    # order; the allowed_* rules are JSON lists of globs.
    "CREATE TABLE IF NOT EXISTS cert_roles (name TEXT PRIMARY KEY, certificate TEXT NOT NULL,"
    " allowed_common_names TEXT NOT NULL, allowed_dns_sans TEXT NOT NULL,"
    " allowed_email_sans TEXT NOT NULL, allowed_uri_sans TEXT NOT NULL,"
    " allowed_organizational_units TEXT NOT NULL, policies TEXT NOT NULL,"
    " token_ttl INTEGER NOT NULL, token_max_ttl INTEGER NOT NULL, display_name TEXT NOT NULL,"
    " created_at REAL NOT NULL, mac BLOB NOT NULL)",
)
# Columns added to those tables since; a file whose table lacks one gets it at open (its rows
# take the default, which is what they meant). The tokens' lifetime columns (TOKEN_ROW's; no
# expiry, no use limit, no parent: what a token made before them was) are in the MAC, which
# ``_token_lifetimes`` rewrites once for rows written before them.
USAGE_COLUMNS = (
    ("key_policy", "made_exportable", "INTEGER NOT NULL DEFAULT 0"),
    # Transit's trim and soft delete: in the policy row's MAC when set (POLICY_LIFECYCLE_ROW).
    ("key_policy", "min_available_version", "INTEGER NOT NULL DEFAULT 0"),
    ("key_policy", "soft_deleted", "INTEGER NOT NULL DEFAULT 0"),
    # A key imported (Transit's BYOK import): in the key row's MAC when set (KEY_IMPORTED_ROW).
    ("keys", "imported", "INTEGER NOT NULL DEFAULT 0"),
    ("keys", "allow_rotation", "INTEGER NOT NULL DEFAULT 0"),
    ("key_policy", "plaintext_backup", "INTEGER NOT NULL DEFAULT 0"),
    ("tokens", "ttl", "INTEGER NOT NULL DEFAULT 0"),
    ("tokens", "expire_at", "REAL"),
    ("tokens", "explicit_max_ttl", "INTEGER NOT NULL DEFAULT 0"),
    ("tokens", "renewable", "INTEGER NOT NULL DEFAULT 0"),
    ("tokens", "num_uses", "INTEGER NOT NULL DEFAULT 0"),
    ("tokens", "uses", "INTEGER NOT NULL DEFAULT 0"),
    ("tokens", "parent", "TEXT NOT NULL DEFAULT ''"),
    ("tokens", "orphan", "INTEGER NOT NULL DEFAULT 1"),
)


def create(
    path: Path,
    integrity: Integrity,
    fill: Callable[[Path], None] | None = None,
    meta: Mapping[str, bytes] | None = None,
) -> bool:
    """Create the keystore at ``path``, with ``meta``'s rows (the sealed key record) and what
    ``fill`` writes into it first, in one step.

    False (and nothing written) if a file appeared there first, e.g. from another process.
    sqlite3's errors are left to the caller's mapping (``_sqlite._errors``).
    """
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    except OSError as exc:
        raise KeyStoreUnavailable(f"cannot create keystore {path}: {exc.strerror}") from None
    os.close(fd)  # mkstemp made it 0600; SQLite gives its -wal and -shm the same mode
    tmp = Path(name)
    try:
        with closing(sqlite3.connect(tmp, isolation_level=None)) as db:
            db.execute("PRAGMA synchronous = FULL")
            db.execute("BEGIN")
            for statement in SCHEMA:
                db.execute(statement)
            rows = [("schema_version", SCHEMA_VERSION), ("check", integrity.check_blob())]
            db.executemany("INSERT INTO meta VALUES (?, ?)", [*rows, *(meta or {}).items()])
            db.execute("COMMIT")
        if fill is not None:
            fill(tmp)
            with closing(sqlite3.connect(tmp, isolation_level=None)) as db:
                # Out of WAL mode: everything in the one file that is linked into place.
                db.execute("PRAGMA journal_mode = DELETE")
        _fsync(tmp)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        _fsync(path.parent)  # the new name, too, must survive a power cut
        return True
    except OSError as exc:
        raise KeyStoreUnavailable(f"cannot create keystore {path}: {exc.strerror}") from None
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_file(db: sqlite3.Connection, path: Path) -> None:
    """KeyStoreCorrupt unless the file is a keystore SQLite finds undamaged; writes nothing."""
    if os.stat(path).st_size == 0:
        raise KeyStoreCorrupt(
            f"keystore {path} is an empty file; it is not replaced: restore it from a backup,"
            " or remove it to start a new keystore"
        )
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    if not {"meta", "keys", "key_versions", "tokens"} <= tables:
        raise KeyStoreCorrupt(
            f"{path} is not a sealflow keystore (an SQLite file without its tables); it is not"
            " replaced: restore the keystore from a backup, or move the file away"
        )
    problems = [row[0] for row in db.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        first = " ".join(str(problems[0]).split())[:200]
        raise KeyStoreCorrupt(
            f"keystore {path} is damaged (SQLite quick_check: {first}); restore it from a backup"
        )


def read_meta(db: sqlite3.Connection) -> dict[str, Any]:
    return dict(db.execute("SELECT key, value FROM meta").fetchall())


def open_file(db: sqlite3.Connection, path: Path, integrity: Integrity, legacy: KeyWrapper) -> None:
    """Ready a connection to an existing file, or raise saying what is wrong with the file.

    ``legacy`` is the master key as schema 1 used it, for the upgrade.
    """
    db.execute("PRAGMA busy_timeout = 10000")
    # Before anything that writes: an empty file would otherwise become a database.
    check_file(db, path)
    _enable_wal(db)
    # Writes are rare and a lost key version loses data: pay for an fsync per commit.
    db.execute("PRAGMA synchronous = FULL")
    # A deleted key's wrapped material is overwritten in the file, not left in free pages.
    db.execute("PRAGMA secure_delete = ON")
    meta = read_meta(db)
    if meta.get("schema_version") == 1:
        meta = _upgrade_once(db, path, integrity, legacy)
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise KeyStoreUnavailable(f"keystore {path} has an unknown schema version")
    if not integrity.opens(meta.get("check")):
        raise KeyStoreUnavailable(f"the master key does not open keystore {path}")
    for statement in USAGE_SCHEMA:
        db.execute(statement)
    _add_columns(db)


def _add_columns(db: sqlite3.Connection) -> None:
    """Add what USAGE_COLUMNS lists where it is missing, once, whoever opens the file first."""

    def missing() -> list[tuple[str, str, str]]:
        return [
            (table, column, kind)
            for table, column, kind in USAGE_COLUMNS
            if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        ]

    if not missing():
        return
    db.execute("BEGIN IMMEDIATE")  # another process may be adding it too
    try:
        for table, column, kind in missing():
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _enable_wal(db: sqlite3.Connection) -> None:
    # Turning a new file to WAL needs it to itself and SQLite does not wait for that (no busy
    # handler), so processes opening a new keystore together retry; later opens are no-ops.
    for attempt in range(200):
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or attempt == 199:
                raise
        time.sleep(0.05)


def _upgrade_once(
    db: sqlite3.Connection, path: Path, integrity: Integrity, legacy: KeyWrapper
) -> dict[str, Any]:
    db.execute("BEGIN IMMEDIATE")
    try:
        meta = read_meta(db)  # another process may have upgraded it meanwhile
        upgraded = None
        if meta.get("schema_version") == 1:
            upgraded = upgrade(db, path, integrity, legacy)
            meta = read_meta(db)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    if upgraded is not None:
        log.warning(
            "keystore %s upgraded from schema 1 to %d: %d key versions rewrapped, %d keys and %d"
            " tokens authenticated; older sealflow releases cannot open it",
            path,
            SCHEMA_VERSION,
            *upgraded,
        )
    return meta


# -- schema 1: no MACs; the wrapping AAD bound the key name and version only.

_V1_CHECK = ("!check", 0, b"sealflow master key check")


def _v1_aad(name: str, version: int) -> bytes:
    return b"sealflow-key-v1\x00" + name.encode() + b"\x00" + version.to_bytes(4, "big")


def upgrade(
    db: sqlite3.Connection, path: Path, integrity: Integrity, legacy: KeyWrapper
) -> tuple[int, int, int]:
    """Schema 1 -> 2 inside the caller's transaction; returns (versions, keys, tokens) upgraded.

    Every version is rewrapped under the AAD that binds algorithm and exportability, with its
    material checked to be the same; every key and token row gets its MAC; the check value is
    replaced. Anything that does not unwrap stops the upgrade, and the caller's rollback leaves
    the file as it was: a version is never lost or changed. The rows are trusted as they are:
    schema 1 could not tell a changed row.
    """
    check_name, check_version, check_value = _V1_CHECK
    try:
        opens = legacy.unwrap(_v1_aad(check_name, check_version), read_meta(db)["check"])
    except (KeyError, KeyStoreCorrupt):
        opens = b""
    if opens != check_value:
        raise KeyStoreUnavailable(f"the master key does not open keystore {path}")
    for table in ("keys", "tokens"):
        # An empty MAC never verifies, so a row this loop missed would be refused, not trusted.
        db.execute(f"ALTER TABLE {table} ADD COLUMN mac BLOB NOT NULL DEFAULT x''")
    versions = 0
    keys = db.execute(
        "SELECT name, algorithm, exportable, min_decryption_version, created_at FROM keys"
    ).fetchall()
    for key in keys:
        versions += _rewrap(db, path, integrity, legacy, key)
        db.execute("UPDATE keys SET mac = ? WHERE name = ?", (integrity.mac(KEY_ROW, key), key[0]))
    tokens = db.execute(
        "SELECT id, digest, scopes, label, created_at, revoked_at FROM tokens"
    ).fetchall()
    for token in tokens:
        # As rows were MAC'd then; the first open after this MACs them over their lifetime
        # columns too (``_token_lifetimes``).
        mac = integrity.mac(LEGACY_TOKEN_ROW, token)
        db.execute("UPDATE tokens SET mac = ? WHERE id = ?", (mac, token[0]))
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION,))
    db.execute("UPDATE meta SET value = ? WHERE key = 'check'", (integrity.check_blob(),))
    return versions, len(keys), len(tokens)


def _rewrap(
    db: sqlite3.Connection,
    path: Path,
    integrity: Integrity,
    legacy: KeyWrapper,
    key: tuple[Any, ...],
) -> int:
    name, algorithm_value, exportable = key[0], key[1], bool(key[2])
    try:
        algorithm = Algorithm(algorithm_value)
    except ValueError:
        raise KeyStoreCorrupt(
            f"cannot upgrade keystore {path}: key {name!r} has an unknown algorithm"
        ) from None
    rows = db.execute("SELECT version, wrapped FROM key_versions WHERE name = ?", (name,))
    count = 0
    for version, blob in rows.fetchall():
        try:
            material = legacy.unwrap(_v1_aad(name, version), blob)
        except (KeyStoreCorrupt, AttributeError, OverflowError, TypeError):  # odd values
            material = b""
        if len(material) != algorithm.spec.key_len:
            raise KeyStoreCorrupt(
                f"cannot upgrade keystore {path}: key {name!r} version {version} does not"
                " unwrap; nothing was changed"
            )
        wrapped = integrity.wrap(name, version, algorithm, exportable, material)
        if integrity.unwrap(name, version, algorithm, exportable, wrapped) != material:
            raise KeyStoreCorrupt(f"cannot upgrade keystore {path}: rewrapping failed")
        db.execute(
            "UPDATE key_versions SET wrapped = ? WHERE name = ? AND version = ?",
            (wrapped, name, version),
        )
        count += 1
    return count
