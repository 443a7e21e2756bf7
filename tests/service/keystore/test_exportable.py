"""A key made exportable after its creation (Transit's ``keys/:name/config`` false -> true):
every version, old and new, exports the material it was created with; the wrapping keeps the
creation flag; the flag is under the master key's MAC, survives reopening and ``keystore
migrate``, and keystores written before the flag existed still open and verify."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    InvalidRequest,
    KeyStore,
    KeyStoreCorrupt,
    NotExportable,
    PostgresKeyStore,
    SQLiteKeyStore,
    _pg_schema,
    export_material,
    migrate_keystore,
)

from .files import (
    PG_UNDO_MIGRATION_6,
    PG_UNDO_MIGRATION_7,
    PG_UNDO_MIGRATION_8,
    PG_UNDO_MIGRATION_9,
    PG_UNDO_MIGRATION_10,
    PG_UNDO_MIGRATION_11,
)
from .test_postgres import eventually

Opener = Callable[[bytes], KeyStore]


def sealed_with_versions(store: KeyStore, name: str = "orders") -> dict[int, bytes]:
    """A key not created exportable, with three versions; their material."""
    store.create_key(name, Algorithm.AES_256_GCM)
    store.rotate_key(name)
    store.rotate_key(name)
    return {v: store.key_material(name, v) for v in (1, 2, 3)}


def test_a_key_made_exportable_exports_every_version(
    store: KeyStore, open_store: Opener, master_key: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    material = sealed_with_versions(store)
    other = open_store(master_key)
    assert other.get_key("orders").exportable is False
    with pytest.raises(NotExportable):
        export_material(store, "orders", 1)
    with caplog.at_level(logging.INFO, logger="sealflow.keystore"):
        key = store.configure("orders", exportable=True)
    assert (key.exportable, key.created_exportable, key.latest) == (True, False, 3)
    assert any(
        r.levelno == logging.WARNING and "exportable of key 'orders'" in r.getMessage()
        for r in caplog.records
    )
    for version, expected in material.items():
        assert export_material(store, "orders", version)[2] == expected
    # A rotation after the flip is wrapped as the versions before it, and exports too.
    store.rotate_key("orders")
    fourth = export_material(store, "orders", 4)[2]
    assert len(fourth) == 32
    assert fourth not in material.values()
    # Another instance (another process) and a fresh open see the flag and unwrap every version.
    eventually(lambda: other.get_key("orders").latest == 4, within=2.0)
    assert other.get_key("orders").exportable is True
    fresh = open_store(master_key)
    for version, expected in {**material, 4: fourth}.items():
        assert export_material(fresh, "orders", version)[2] == expected
        assert other.key_material("orders", version) == expected
    # Never back: the material may have left already.
    with pytest.raises(InvalidRequest, match="stays so"):
        store.configure("orders", exportable=False)
    with pytest.raises(InvalidRequest, match="true or false"):
        store.configure("orders", exportable="yes")  # type: ignore[arg-type]
    assert fresh.get_key("orders").exportable is True


def test_the_flag_keeps_the_other_rules_and_they_keep_it(store: KeyStore) -> None:
    sealed_with_versions(store)
    store.configure("orders", min_encryption_version=2, deletion_allowed=True)
    key = store.configure("orders", exportable=True)
    assert (key.min_encryption_version, key.deletion_allowed, key.exportable) == (2, True, True)
    key = store.configure("orders", min_decryption_version=2, min_encryption_version=3)
    assert (key.min_decryption_version, key.min_encryption_version) == (2, 3)
    assert (key.deletion_allowed, key.exportable) == (True, True)
    # Asking again changes nothing; false on a key that is not exportable neither.
    assert store.configure("orders", exportable=True) == key
    store.create_key("sealed", Algorithm.CHACHA20_POLY1305)
    assert store.configure("sealed", exportable=False).exportable is False
    # A key created exportable stays as it was created: nothing is recorded beside it.
    created = store.create_key("open", Algorithm.AES_128_GCM, exportable=True)
    assert store.configure("open", exportable=True) == created
    with pytest.raises(InvalidRequest):
        store.configure("open", exportable=False)


# -- the MAC covers the flag


def _execute(backend: str, where: str, sql: str) -> None:
    if backend == "sqlite":
        with closing(sqlite3.connect(where)) as db:
            db.execute(sql)
            db.commit()
    else:
        with psycopg.connect(where) as conn:
            conn.execute(sql.replace("key_policy", "sealflow_key_policy"))


ATTACKS = {
    # A policy row of today's code (three-column MAC) given the flag.
    "flag set": "UPDATE key_policy SET made_exportable = 1 WHERE name = 'orders'",
    # The row of a key made exportable, copied onto another key.
    "row copied": "INSERT INTO key_policy (name, min_encryption_version, deletion_allowed,"
    " made_exportable, mac) SELECT 'plain', min_encryption_version, deletion_allowed,"
    " made_exportable, mac FROM key_policy WHERE name = 'made'",
    # The flag of a key made exportable, cleared (refused too: the row no longer verifies).
    "flag cleared": "UPDATE key_policy SET made_exportable = 0 WHERE name = 'made'",
}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_forged_made_exportable_refuses_the_key(
    backend: str, attack: str, db_path: Path, master_key: bytes, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres").new_database() if backend == "postgresql" else ""

    def opened() -> KeyStore:
        if backend == "sqlite":
            return SQLiteKeyStore(db_path, master_key)
        return PostgresKeyStore(url, master_key, watch=False)

    victim = {"flag set": "orders", "row copied": "plain", "flag cleared": "made"}[attack]
    with closing(opened()) as store:
        sealed_with_versions(store)
        store.configure("orders", deletion_allowed=True)  # a policy row without the flag
        store.create_key("plain", Algorithm.AES_256_GCM)
        store.create_key("made", Algorithm.AES_256_GCM)
        store.configure("made", exportable=True)
    _execute(backend, str(db_path) if backend == "sqlite" else url, ATTACKS[attack])
    with closing(opened()) as store:
        with pytest.raises(KeyStoreCorrupt, match=f"'{victim}' fails its integrity check"):
            store.get_key(victim)
        with pytest.raises(KeyStoreCorrupt):
            export_material(store, victim, 1)
        with pytest.raises(KeyStoreCorrupt):
            store.configure(victim, exportable=True)
        names = {"orders", "plain", "made"} - {victim}
        assert {k.name for k in store.list_keys()} == names


# -- keystores written before the flag


def test_an_sqlite_policy_table_without_the_flag_gets_it_at_open(
    db_path: Path, master_key: bytes
) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        material = sealed_with_versions(store)
        store.configure("orders", min_encryption_version=2, deletion_allowed=True)
    with closing(sqlite3.connect(db_path)) as db:  # the table as the code before this left it
        db.execute("ALTER TABLE key_policy DROP COLUMN made_exportable")
        db.commit()
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        key = store.get_key("orders")  # its row, MAC'd by the code before, verifies
        rules = (key.min_encryption_version, key.deletion_allowed, key.exportable)
        assert rules == (2, True, False)
        assert store.configure("orders", exportable=True).exportable is True
        assert export_material(store, "orders", 1)[2] == material[1]
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        assert store.get_key("orders").exportable is True


def test_a_postgresql_keystore_of_migration_3_is_migrated(pg_url: str, master_key: bytes) -> None:
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as store:
        material = sealed_with_versions(store)
        store.configure("orders", deletion_allowed=True)
    with psycopg.connect(pg_url) as conn:  # as the code before this left the database
        conn.execute(PG_UNDO_MIGRATION_11)
        conn.execute(PG_UNDO_MIGRATION_10)
        conn.execute("ALTER TABLE sealflow_key_policy DROP COLUMN made_exportable")
        conn.execute("DROP TABLE sealflow_audit")  # migration 5's
        conn.execute(PG_UNDO_MIGRATION_9)
        conn.execute(PG_UNDO_MIGRATION_8)
        conn.execute(PG_UNDO_MIGRATION_7)
        conn.execute(PG_UNDO_MIGRATION_6)  # migration 6's (no token here: no MAC to redo)
        conn.execute("DELETE FROM sealflow_migrations WHERE version > 3")
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as store:
        key = store.get_key("orders")
        assert (key.deletion_allowed, key.exportable) == (True, False)
        assert store.configure("orders", exportable=True).exportable is True
        assert export_material(store, "orders", 3)[2] == material[3]
    with psycopg.connect(pg_url) as conn:
        applied = conn.execute("SELECT max(version) FROM sealflow_migrations").fetchone()
    assert applied == (len(_pg_schema.MIGRATIONS),)


def test_keystore_migrate_copies_the_flag(db_path: Path, pg_url: str, master_key: bytes) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        material = sealed_with_versions(store)
        store.configure("orders", exportable=True)
        store.create_key("sealed", Algorithm.AES_256_GCM)
        before = store.list_keys()
    assert migrate_keystore(db_path, pg_url, master_key).keys == 2
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as copy:
        assert copy.list_keys() == before
        assert copy.get_key("orders").exportable is True
        for version, expected in material.items():
            assert export_material(copy, "orders", version)[2] == expected
        with pytest.raises(NotExportable):
            export_material(copy, "sealed")
