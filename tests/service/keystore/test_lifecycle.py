"""Transit's key lifecycle in the keystore, on every backend: a trim removes the versions below
``min_available_version`` in one transaction and is the one way a version goes while its key
lives; a soft deletion refuses every use until restored; both in the policy row's MAC."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    SOFT_DELETED,
    InvalidRequest,
    KeyNotFound,
    KeySoftDeleted,
    KeyStore,
    KeyStoreCorrupt,
    PostgresKeyStore,
    SQLiteKeyStore,
    UsageMeter,
    export_material,
    migrate_keystore,
    next_rotation,
)

from .test_postgres import eventually


def four_versions(store: KeyStore, name: str = "orders") -> dict[int, bytes]:
    store.create_key(name, Algorithm.AES_256_GCM, exportable=True, auto_rotate_period=86400)
    for _ in range(3):
        store.rotate_key(name)
    return {v: store.key_material(name, v) for v in range(1, 5)}


def version_rows(backend: str, where: str, name: str = "orders") -> list[int]:
    if backend == "sqlite":
        with closing(sqlite3.connect(where)) as db:
            found = db.execute(
                "SELECT version FROM key_versions WHERE name = ? ORDER BY version", (name,)
            )
            return [row[0] for row in found.fetchall()]
    with psycopg.connect(where) as conn:
        rows = conn.execute(
            "SELECT version FROM sealflow_key_versions WHERE name = %s ORDER BY version", (name,)
        )
        return [row[0] for row in rows.fetchall()]


def soft_deleted(store: KeyStore, deleted: bool = True) -> bool:
    return store.get_key("orders").soft_deleted is deleted


def where(backend: str, db_path: Path, store_url: str) -> str:
    return str(db_path) if backend == "sqlite" else store_url


# -- trim


@pytest.mark.parametrize(
    ("rules", "wanted", "words"),
    [
        ({}, 2, "cannot be set when minimum encryption version is not set"),
        ({"min_encryption_version": 3, "min_decryption_version": 3}, 0, "should be positive"),
        ({"min_encryption_version": 3}, 2, "cannot be greater than minimum decryption version"),
        (
            {"min_encryption_version": 3, "min_decryption_version": 3},
            4,
            "cannot be greater than minmum encryption version",
        ),
        (
            {"min_encryption_version": 4, "min_decryption_version": 3},
            4,
            "cannot be greater than minimum decryption version",
        ),
    ],
)
def test_a_trim_refused_writes_nothing(
    store: KeyStore,
    backend: str,
    db_path: Path,
    store_url: str,
    rules: dict[str, int],
    wanted: int,
    words: str,
) -> None:
    material = four_versions(store)
    if rules:
        store.configure(
            "orders",
            min_decryption_version=rules.get("min_decryption_version"),
            min_encryption_version=rules.get("min_encryption_version"),
        )
    with pytest.raises(InvalidRequest, match=rf"^minimum available version {words}$"):
        store.trim_key("orders", wanted)
    assert version_rows(backend, where(backend, db_path, store_url)) == [1, 2, 3, 4]
    assert store.get_key("orders").min_available_version == 0
    assert store.key_material("orders", 1) == material[1]


def test_a_trim_removes_the_versions_below_in_one_transaction(
    open_store: Callable[[bytes], KeyStore],
    master_key: bytes,
    backend: str,
    db_path: Path,
    store_url: str,
) -> None:
    store = open_store(master_key)
    changes: list[tuple[str, dict[str, object]]] = []
    store.on_change = lambda op, fields: changes.append((op, fields))
    material = four_versions(store)
    store.configure("orders", min_decryption_version=3, min_encryption_version=3)
    meter = UsageMeter(store)
    meter.lease("orders", 1)  # usage of a version trimmed goes with it
    key = store.trim_key("orders", 3)
    assert (key.min_available_version, key.latest) == (3, 4)
    assert [v.version for v in key.versions] == [3, 4]
    assert version_rows(backend, where(backend, db_path, store_url)) == [3, 4]
    assert changes[-1] == ("key_trim", {"key": "orders", "versions": [1, 2]})
    assert set(store.usage("orders")) <= {3, 4}
    # Every path to a trimmed version's material refuses it, this store's caches included.
    for version in (1, 2):
        with pytest.raises(KeyNotFound):
            store.key_material("orders", version)
        with pytest.raises(KeyNotFound):
            meter.lease("orders", version)
        with pytest.raises(KeyNotFound):
            store.material(key.slot(version))
    assert store.key_material("orders", 3) == material[3]
    # Sealing goes on under the latest; the key's identity outlived its version 1.
    assert meter.lease("orders").version == 4
    assert store.rotate_key("orders").latest == 5
    # Another process's view, without a restart.
    other = open_store(master_key)
    assert other.get_key("orders").min_available_version == 3
    with pytest.raises(KeyNotFound):
        other.key_material("orders", 2)
    # Never decremented; the minimum versions may not go below it again.
    with pytest.raises(InvalidRequest, match=r"^minimum available version cannot be decremented$"):
        store.trim_key("orders", 2)
    with pytest.raises(InvalidRequest, match="min decryption version should not be less then"):
        store.configure("orders", min_decryption_version=2, allow_lowering=True)
    with pytest.raises(InvalidRequest, match="min encryption version should not be less than"):
        store.configure("orders", min_encryption_version=0)
    # The same number again removes nothing more and is allowed, as in OpenBao.
    assert store.trim_key("orders", 3).min_available_version == 3
    meter.close()


def test_the_version_rule_holds_for_every_other_write(store: KeyStore) -> None:
    """Rotation, configuration, limits, soft deletion and restoring never remove a version."""
    four_versions(store)
    store.configure("orders", min_decryption_version=4, min_encryption_version=4)
    store.set_limits("orders", max_encryptions=10)
    store.soft_delete_key("orders")
    store.undo_soft_delete("orders")
    store.configure(
        "orders", min_decryption_version=1, min_encryption_version=0, allow_lowering=True
    )
    assert [v.version for v in store.get_key("orders").versions] == [1, 2, 3, 4]
    assert all(store.key_material("orders", v) for v in (1, 2, 3, 4))


# -- soft delete


def test_a_soft_deleted_key_refuses_every_use_until_restored(
    open_store: Callable[[bytes], KeyStore], master_key: bytes
) -> None:
    store = open_store(master_key)
    other = open_store(master_key)  # another process (a replica on PostgreSQL)
    material = four_versions(store)
    meter = UsageMeter(store)
    meter.lease("orders")  # a block held: the soft deletion must stop it too
    changes: list[str] = []
    store.on_change = lambda op, fields: changes.append(op)
    key, already = store.soft_delete_key("orders")
    assert (key.soft_deleted, already) == (True, False)
    assert store.soft_delete_key("orders")[1] is True  # again: nothing written
    assert changes == ["key_soft_delete"]
    for view in (store, other):
        eventually(functools.partial(soft_deleted, view), within=5)
        refused: list[Callable[[KeyStore], object]] = [
            lambda v: v.key_material("orders", 1),
            lambda v: v.rotate_key("orders"),
            lambda v: v.configure("orders", deletion_allowed=True),
            lambda v: v.set_limits("orders", max_encryptions=5),
            lambda v: v.trim_key("orders", 1),
            lambda v: export_material(v, "orders", 1),
        ]
        for call in refused:
            with pytest.raises(KeySoftDeleted, match=f"^{SOFT_DELETED}$"):
                call(view)
    with pytest.raises(KeySoftDeleted):
        meter.lease("orders")
    with pytest.raises(KeySoftDeleted):
        store.material(key.slot(4))
    # Listed and read as it is; the rotation a limit or a period would make waits for the
    # restore.
    assert [k.name for k in store.list_keys()] == ["orders"]
    assert store.rotate_if_latest("orders", 4).latest == 4
    assert next_rotation(store.get_key("orders")) is None
    key, already = store.undo_soft_delete("orders")
    assert (key.soft_deleted, already, key.latest) == (False, False, 4)
    assert next_rotation(key) is not None
    assert store.undo_soft_delete("orders")[1] is True
    assert changes == ["key_soft_delete", "key_soft_delete_restore"]
    for view in (store, other):
        eventually(functools.partial(soft_deleted, view, False), within=5)
        assert {v: view.key_material("orders", v) for v in range(1, 5)} == material
    assert meter.lease("orders").version == 4
    meter.close()


def test_a_soft_deleted_key_may_still_be_deleted(store: KeyStore) -> None:
    store.create_key("gone", Algorithm.AES_256_GCM)
    store.configure("gone", deletion_allowed=True)
    store.soft_delete_key("gone")
    store.delete_key("gone")
    with pytest.raises(KeyNotFound):
        store.get_key("gone")


def test_soft_deleting_or_restoring_no_key_is_not_found(store: KeyStore) -> None:
    with pytest.raises(KeyNotFound):
        store.soft_delete_key("nothing")
    with pytest.raises(KeyNotFound):
        store.undo_soft_delete("nothing")


# -- the MAC covers both


ATTACKS = {
    "restored": "UPDATE key_policy SET soft_deleted = 0 WHERE name = 'orders'",
    "untrimmed": "UPDATE key_policy SET min_available_version = 1 WHERE name = 'orders'",
    "min_decryption lowered": "UPDATE keys SET min_decryption_version = 1 WHERE name = 'orders'",
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_lifecycle_cannot_be_changed_without_the_master_key(
    open_store: Callable[[bytes], KeyStore],
    master_key: bytes,
    backend: str,
    db_path: Path,
    store_url: str,
    attack: str,
) -> None:
    with closing(open_store(master_key)) as store:
        four_versions(store)
        store.configure("orders", min_decryption_version=3, min_encryption_version=3)
        store.trim_key("orders", 2)
        store.soft_delete_key("orders")
    sql = ATTACKS[attack]
    if backend == "sqlite":
        with closing(sqlite3.connect(db_path)) as db:
            db.execute(sql)
            db.commit()
    else:
        with psycopg.connect(store_url) as conn:
            conn.execute(sql.replace("key_", "sealflow_key_").replace("keys", "sealflow_keys"))
    with closing(open_store(master_key)) as store:
        with pytest.raises(KeyStoreCorrupt):
            store.key_material("orders", 3)
        with pytest.raises(KeyStoreCorrupt):
            store.undo_soft_delete("orders")


def test_keystore_migrate_copies_trim_and_soft_delete(
    db_path: Path, pg_url: str, master_key: bytes
) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        material = four_versions(store)
        store.configure("orders", min_decryption_version=3, min_encryption_version=3)
        store.trim_key("orders", 3)
        store.soft_delete_key("orders")
    migrate_keystore(db_path, pg_url, master_key)
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as store:
        key = store.get_key("orders")
        assert (key.min_available_version, key.soft_deleted) == (3, True)
        assert [v.version for v in key.versions] == [3, 4]
        store.undo_soft_delete("orders")
        assert store.key_material("orders", 4) == material[4]
