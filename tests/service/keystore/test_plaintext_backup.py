"""A key's ``allow_plaintext_backup`` (Transit's) and ``restore_key`` (Transit's restore), over
both stores: the flag goes false -> true only and is in its policy row's MAC, and a restored key
keeps its version numbers and material, as a new key."""

from __future__ import annotations

import os
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
    KeyExists,
    KeyStore,
    KeyStoreCorrupt,
    RestoredKey,
)


def test_the_flag_is_set_once_and_kept(store: KeyStore) -> None:
    store.create_key("orders", Algorithm.AES_256_GCM, exportable=True)
    assert store.get_key("orders").allow_plaintext_backup is False
    key = store.configure("orders", deletion_allowed=True, plaintext_backup=True)
    assert (key.allow_plaintext_backup, key.deletion_allowed) == (True, True)
    with pytest.raises(InvalidRequest, match="allows plaintext backup and stays so"):
        store.configure("orders", plaintext_backup=False)
    # Another change of the row keeps it (and its MAC verifies).
    assert store.configure("orders", deletion_allowed=False).allow_plaintext_backup is True
    assert store.get_key("orders").allow_plaintext_backup is True


def test_a_flag_set_without_the_master_key_refuses_the_key(
    backend: str,
    db_path: Path,
    master_key: bytes,
    store: KeyStore,
    store_url: str,
    open_store: Callable[[bytes], KeyStore],
) -> None:
    store.create_key("orders", Algorithm.AES_256_GCM, exportable=True)
    store.configure("orders", deletion_allowed=True)  # a policy row without the flag
    sql = "UPDATE {} SET plaintext_backup = 1 WHERE name = 'orders'"
    if backend == "sqlite":
        with closing(sqlite3.connect(db_path)) as db:
            db.execute(sql.format("key_policy"))
            db.commit()
    else:
        with psycopg.connect(store_url) as conn:
            conn.execute(sql.format("sealflow_key_policy").encode())
    with pytest.raises(KeyStoreCorrupt, match="'orders' fails its integrity check"):
        open_store(master_key).get_key("orders")  # another process's view, read afresh


def backup_of(store: KeyStore, name: str) -> RestoredKey:
    key = store.get_key(name)
    material = tuple((v.version, store.key_material(name, v.version)) for v in key.versions)
    return RestoredKey(
        "copy",
        key.algorithm,
        material,
        min_decryption_version=2,
        min_encryption_version=3,
        deletion_allowed=True,
        allow_plaintext_backup=True,
        auto_rotate_period=7200.0,
    )


def test_a_restored_key_keeps_its_numbers_and_material_as_a_new_key(store: KeyStore) -> None:
    store.create_key("orders", Algorithm.CHACHA20_POLY1305, exportable=True)
    store.rotate_key("orders")
    store.rotate_key("orders")
    backup = backup_of(store, "orders")
    copy = store.restore_key(backup)
    assert (copy.name, copy.latest, copy.algorithm) == ("copy", 3, Algorithm.CHACHA20_POLY1305)
    assert (copy.min_decryption_version, copy.min_encryption_version) == (2, 3)
    assert (copy.deletion_allowed, copy.allow_plaintext_backup, copy.exportable) == (
        True,
        True,
        True,
    )
    assert copy.auto_rotate_period == 7200.0
    for version, material in backup.material:
        assert store.key_material("copy", version) == material
    # A new key: its identity is the restore's time, not the original's.
    assert copy.born > store.get_key("orders").born
    assert store.rotate_key("copy").latest == 4


def test_restore_over_a_key_needs_force_and_deletion_allowed(store: KeyStore) -> None:
    store.create_key("orders", Algorithm.AES_128_GCM, exportable=True)
    store.rotate_key("orders")
    store.rotate_key("orders")
    backup = backup_of(store, "orders")
    store.create_key("copy", Algorithm.AES_256_GCM)
    with pytest.raises(KeyExists):
        store.restore_key(backup)
    with pytest.raises(DeletionNotAllowed):
        store.restore_key(backup, force=True)
    assert store.get_key("copy").algorithm is Algorithm.AES_256_GCM  # unchanged
    store.configure("copy", deletion_allowed=True)
    # One transaction: a restore refused half way leaves the key it would replace.
    broken = RestoredKey("copy", Algorithm.AES_128_GCM, backup.material[:1], 2)
    with pytest.raises(InvalidRequest):
        store.restore_key(broken, force=True)
    assert store.get_key("copy").algorithm is Algorithm.AES_256_GCM
    assert store.restore_key(backup, force=True).algorithm is Algorithm.AES_128_GCM
    assert store.key_material("copy", 1) == backup.material[0][1]


@pytest.mark.parametrize(
    ("material", "words"),
    [
        (((1, os.urandom(16)), (3, os.urandom(16))), "numbered from 1 up"),
        (((1, os.urandom(32)),), "wrong length for aes-128-gcm"),
        ((), "numbered from 1 up"),
    ],
)
def test_a_restore_that_cannot_be_a_key_writes_nothing(
    store: KeyStore, material: tuple[tuple[int, bytes], ...], words: str
) -> None:
    with pytest.raises(InvalidRequest, match=words):
        store.restore_key(RestoredKey("copy", Algorithm.AES_128_GCM, material))
    too_high = RestoredKey("copy", Algorithm.AES_128_GCM, ((1, os.urandom(16)),), 2)
    with pytest.raises(InvalidRequest, match="min_decryption_version must be between 1 and 1"):
        store.restore_key(too_high)
    assert store.list_keys() == []
