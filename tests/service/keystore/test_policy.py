"""Transit's per-key policy in every keystore: ``min_encryption_version``, ``deletion_allowed``
and ``delete_key``, Vault's key names; stored under the master key's MAC, kept by an upgrade
from the schema before them, and copied by ``sealflow keystore migrate``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    DeletionNotAllowed,
    InvalidRequest,
    KeyNotFound,
    KeyStore,
    KeyStoreCorrupt,
    PostgresKeyStore,
    SQLiteKeyStore,
    _pg_schema,
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


def three_versions(store: KeyStore, name: str = "orders") -> None:
    store.create_key(name, Algorithm.AES_256_GCM)
    store.rotate_key(name)
    store.rotate_key(name)


def test_min_encryption_version_is_stored_and_checked(
    store: KeyStore, open_store: Opener, master_key: bytes
) -> None:
    three_versions(store)
    key = store.get_key("orders")
    assert (key.min_encryption_version, key.deletion_allowed) == (0, False)
    assert store.configure("orders", min_encryption_version=2).min_encryption_version == 2
    for bad in (4, -1, True):
        with pytest.raises(InvalidRequest):
            store.configure("orders", min_encryption_version=bad)
    # Both rules in one call: the result must have min_encryption >= min_decryption.
    with pytest.raises(InvalidRequest, match="below min_decryption_version"):
        store.configure("orders", min_decryption_version=3)
    both = store.configure("orders", min_decryption_version=3, min_encryption_version=3)
    assert (both.min_decryption_version, both.min_encryption_version) == (3, 3)
    # 0 turns the rule off, whatever min_decryption_version is.
    assert store.configure("orders", min_encryption_version=0).min_encryption_version == 0
    store.configure("orders", min_encryption_version=3)
    # Another instance (another process) and a reopened store see it; nothing else changed.
    other = open_store(master_key).get_key("orders")
    assert (other.min_encryption_version, other.min_decryption_version, other.latest) == (3, 3, 3)


def test_a_key_is_deleted_only_once_deletion_is_allowed(
    store: KeyStore, open_store: Opener, master_key: bytes
) -> None:
    three_versions(store)
    store.create_key("kept", Algorithm.AES_256_GCM)
    kept = store.key_material("kept", 1)
    old = store.key_material("orders", 1)
    other = open_store(master_key)
    assert other.key_material("orders", 1) == old  # cached by the other instance
    with pytest.raises(DeletionNotAllowed):
        store.delete_key("orders")
    assert store.get_key("orders").latest == 3
    with pytest.raises(KeyNotFound):
        store.delete_key("absent")
    assert store.configure("orders", deletion_allowed=True).deletion_allowed is True
    assert store.delete_key("orders").latest == 3

    def gone() -> bool:  # PostgreSQL: once the other instance heard of it (LISTEN/NOTIFY)
        return "orders" not in {k.name for k in other.list_keys()}

    eventually(gone, within=2.0)
    for view in (store, other):
        with pytest.raises(KeyNotFound):
            view.get_key("orders")
        with pytest.raises(KeyNotFound):
            view.key_material("orders", 1)
        assert [k.name for k in view.list_keys()] == ["kept"]
        assert view.key_material("kept", 1) == kept
        assert view.usage("orders") == {}
    # A new key of the same name is a new key: version 1, new material, no rules of the old.
    again = store.create_key("orders", Algorithm.AES_256_GCM)
    assert (again.latest, again.deletion_allowed, again.min_encryption_version) == (1, False, 0)
    new = store.key_material("orders", 1)
    assert new != old
    # The instance that had the old material cached never serves it for the new key.
    eventually(lambda: "orders" in {k.name for k in other.list_keys()}, within=2.0)
    assert other.key_material("orders", 1) == new


def test_vault_key_names_are_stored_as_they_are(store: KeyStore, open_store: Opener) -> None:
    for name in ("Orders_1", "_x", "A.b-C", "a" * 64, "Z"):
        store.create_key(name, Algorithm.AES_128_GCM)
        assert store.rotate_key(name).latest == 2
    names = [k.name for k in store.list_keys()]
    assert sorted(names) == names
    assert set(names) == {"Orders_1", "_x", "A.b-C", "a" * 64, "Z"}
    assert store.create_token(["encrypt:Orders_*", "decrypt:_x"])[0].scopes == (
        "encrypt:Orders_*",
        "decrypt:_x",
    )


# -- the MAC covers the policy row


def _tamper(backend: str, where: str, sql: str) -> None:
    if backend == "sqlite":
        with closing(sqlite3.connect(where)) as db:
            db.execute(sql)
            db.commit()
    else:
        with psycopg.connect(where) as conn:
            conn.execute(sql.replace("key_", "sealflow_key_"))


ATTACKS = {
    "deletion_allowed": "UPDATE key_policy SET deletion_allowed = 1 WHERE name = 'orders'",
    "min_encryption_version": "UPDATE key_policy SET min_encryption_version = 1"
    " WHERE name = 'orders'",
    "inserted": "INSERT INTO key_policy (name, min_encryption_version, deletion_allowed, mac)"
    " SELECT 'orders', 0, 1, mac FROM key_policy WHERE name = 'other'",
}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_policy_changed_without_the_master_key_refuses_the_key(
    backend: str,
    attack: str,
    db_path: Path,
    master_key: bytes,
    request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue("postgres").new_database() if backend == "postgresql" else ""

    def opened() -> KeyStore:
        if backend == "sqlite":
            return SQLiteKeyStore(db_path, master_key)
        return PostgresKeyStore(url, master_key, watch=False)

    with closing(opened()) as store:
        three_versions(store)
        store.create_key("other", Algorithm.AES_256_GCM)
        store.configure("other", deletion_allowed=True)
        if attack != "inserted":
            store.configure("orders", min_encryption_version=2)
    _tamper(backend, str(db_path) if backend == "sqlite" else url, ATTACKS[attack])
    with closing(opened()) as store:
        with pytest.raises(KeyStoreCorrupt, match="'orders' fails its integrity check"):
            store.get_key("orders")
        # A forged deletion_allowed deletes nothing; the key's rows stay for the operator.
        with pytest.raises(KeyStoreCorrupt):
            store.delete_key("orders")
        with pytest.raises(KeyStoreCorrupt):
            store.configure("orders", deletion_allowed=False)
        assert [k.name for k in store.list_keys()] == ["other"]
    count = "SELECT count(*) FROM {}key_versions WHERE name = 'orders'"
    if backend == "sqlite":
        with closing(sqlite3.connect(db_path)) as db:
            assert db.execute(count.format("")).fetchone() == (3,)
    else:
        with psycopg.connect(url) as conn:
            assert conn.execute(count.format("sealflow_")).fetchone() == (3,)


# -- keystores written before these rules


def test_an_sqlite_keystore_without_the_policy_table_is_upgraded_at_open(
    db_path: Path, master_key: bytes
) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        three_versions(store)
        store.set_limits("orders", max_encryptions=1000)
        material = store.key_material("orders", 2)
    with closing(sqlite3.connect(db_path)) as db:  # as the previous release left its file
        db.execute("DROP TABLE key_policy")
        db.commit()
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        key = store.get_key("orders")
        assert (key.latest, key.max_encryptions, key.min_encryption_version) == (3, 1000, 0)
        assert key.deletion_allowed is False
        assert store.key_material("orders", 2) == material
        store.configure("orders", min_encryption_version=2, deletion_allowed=True)
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        assert store.get_key("orders").min_encryption_version == 2


def test_a_postgresql_keystore_of_the_previous_schema_is_migrated(
    pg_url: str, master_key: bytes
) -> None:
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as old:
        three_versions(old)
        material = old.key_material("orders", 3)
    # The database as the previous release left it: its migrations only (the table came with
    # migration 3, its made_exportable column with 4, the audit table with 5), none of this table.
    previous = 2
    with psycopg.connect(pg_url) as conn:
        conn.execute(PG_UNDO_MIGRATION_11)
        conn.execute(PG_UNDO_MIGRATION_10)
        conn.execute("DROP TABLE sealflow_key_policy")
        conn.execute("DROP TABLE sealflow_audit")
        conn.execute(PG_UNDO_MIGRATION_9)
        conn.execute(PG_UNDO_MIGRATION_8)
        conn.execute(PG_UNDO_MIGRATION_7)
        conn.execute(PG_UNDO_MIGRATION_6)  # migration 6's (no token here: no MAC to redo)
        conn.execute("DELETE FROM sealflow_migrations WHERE version > %s", (previous,))
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as store:
        key = store.get_key("orders")
        assert (key.latest, key.min_encryption_version, key.deletion_allowed) == (3, 0, False)
        assert store.key_material("orders", 3) == material
        assert store.configure("orders", min_encryption_version=3).min_encryption_version == 3
    with psycopg.connect(pg_url) as conn:
        applied = conn.execute("SELECT max(version) FROM sealflow_migrations").fetchone()
        policies = conn.execute("SELECT name FROM sealflow_key_policy").fetchall()
    assert applied == (len(_pg_schema.MIGRATIONS),)
    assert policies == [("orders",)]


def test_keystore_migrate_copies_the_policies(
    db_path: Path, pg_url: str, master_key: bytes
) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        three_versions(store)
        store.configure("orders", min_decryption_version=2, min_encryption_version=3)
        store.create_key("Vault_Name", Algorithm.CHACHA20_POLY1305)
        store.configure("Vault_Name", deletion_allowed=True)
        before = store.list_keys()
    done = migrate_keystore(db_path, pg_url, master_key)
    assert done.keys == 2
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as copy:
        assert copy.list_keys() == before
        copy.delete_key("Vault_Name")
        assert [k.name for k in copy.list_keys()] == ["orders"]
