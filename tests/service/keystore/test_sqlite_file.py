"""The keystore file: created whole or not at all, refused when it is not a whole keystore,
and upgraded from schema 1 without losing or changing a key version."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from contextlib import closing
from pathlib import Path

import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    ROOT_SCOPES,
    KeyNotFound,
    KeyStoreCorrupt,
    KeyStoreUnavailable,
    SQLiteKeyStore,
)

from .files import KEYS, build_v1, corrupt_free_space, dump
from .test_keystore import run_together


@pytest.fixture
def master_key() -> bytes:
    return os.urandom(32)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "keystore.db"


def schema_version(path: Path) -> object:
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]


# -- what is at the keystore's path


def test_an_empty_file_is_refused_and_left_empty(db_path: Path, master_key: bytes) -> None:
    db_path.touch()
    with pytest.raises(KeyStoreCorrupt, match="empty file") as caught:
        SQLiteKeyStore(db_path, master_key)
    assert str(db_path) in str(caught.value)
    assert "\n" not in str(caught.value)
    assert db_path.read_bytes() == b""
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["keystore.db"]


@pytest.mark.parametrize("content", ["no tables", "other tables"])
def test_an_sqlite_file_that_is_not_a_keystore_is_refused_and_left_alone(
    db_path: Path, master_key: bytes, content: str
) -> None:
    with closing(sqlite3.connect(db_path)) as db:
        db.execute("PRAGMA user_version = 7")  # a valid, table-less database file
        if content == "other tables":
            db.execute("CREATE TABLE notes (body TEXT)")
            db.execute("INSERT INTO notes VALUES ('mine')")
            db.commit()
    before = db_path.read_bytes()
    with pytest.raises(KeyStoreCorrupt, match="not a sealflow keystore"):
        SQLiteKeyStore(db_path, master_key)
    assert db_path.read_bytes() == before


def test_a_keystore_that_fails_sqlites_quick_check_is_refused(
    db_path: Path, master_key: bytes
) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        store.create_key("orders", Algorithm.AES_256_GCM)
        store.rotate_key("orders")
    corrupt_free_space(db_path, "key_versions")
    with closing(sqlite3.connect(db_path)) as db:  # still readable: only quick_check notices
        assert len(db.execute("SELECT * FROM key_versions").fetchall()) == 2
    with pytest.raises(
        KeyStoreCorrupt, match=r"damaged \(SQLite quick_check: .*free space corruption\)"
    ) as caught:
        SQLiteKeyStore(db_path, master_key)
    assert str(db_path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_new_keystore_is_created_whole_and_private(db_path: Path, master_key: bytes) -> None:
    old = os.umask(0)  # whatever the umask, the files are the owner's alone
    try:
        with closing(SQLiteKeyStore(db_path, master_key)) as store:
            store.create_key("orders", Algorithm.AES_256_GCM)
            names = sorted(p.name for p in db_path.parent.iterdir())
            assert names == ["keystore.db", "keystore.db-shm", "keystore.db-wal"]
            for name in names:
                assert stat.S_IMODE((db_path.parent / name).stat().st_mode) == 0o600, name
    finally:
        os.umask(old)
    assert schema_version(db_path) == 2


def test_provisioning_a_new_keystore_is_all_or_nothing(db_path: Path, master_key: bytes) -> None:
    def fails(store: SQLiteKeyStore) -> None:
        store.create_key("default", Algorithm.AES_256_GCM)
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        SQLiteKeyStore.create_new(db_path, master_key, fails)
    assert list(db_path.parent.iterdir()) == []  # neither the keystore nor a temporary file

    def default_key(store: SQLiteKeyStore) -> None:
        store.create_key("default", Algorithm.AES_256_GCM)

    assert SQLiteKeyStore.create_new(db_path, master_key, default_key)
    calls: list[SQLiteKeyStore] = []
    assert not SQLiteKeyStore.create_new(db_path, master_key, calls.append)
    assert calls == []  # an existing file: nothing is written
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["keystore.db"]
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        assert [k.name for k in store.list_keys()] == ["default"]


# -- the upgrade from schema 1


def test_a_schema_1_keystore_is_upgraded_keeping_every_version(
    db_path: Path, master_key: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    made = build_v1(db_path, master_key)
    with closing(sqlite3.connect(db_path)) as db:
        old_blobs = dict(
            ((n, v), b) for n, v, b in db.execute("SELECT name, version, wrapped FROM key_versions")
        )
        old_keys = db.execute("SELECT * FROM keys ORDER BY name").fetchall()
        old_tokens = db.execute("SELECT * FROM tokens ORDER BY id").fetchall()

    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        store = SQLiteKeyStore(db_path, master_key)
    with closing(store):
        record, lifetimes, granted, granted_hmac = caplog.records
        assert "upgraded from schema 1 to 2: 7 key versions rewrapped, 4 keys and 3 tokens" in (
            record.getMessage()
        )
        # Then, as for any keystore made before token lifetimes, the rows are MAC'd again.
        assert "3 token rows MAC'd again" in lifetimes.getMessage()
        # Then, as for any keystore made before export:<glob>, the root token gains it.
        assert "given export:*" in granted.getMessage()
        assert "given hmac:* sign:* verify:*" in granted_hmac.getMessage()
        for (name, version), material in made.materials.items():
            assert store.key_material(name, version) == material
        for name, algorithm, exportable, versions, min_version in KEYS:
            info = store.get_key(name)
            assert (info.algorithm.value, info.exportable) == (algorithm, exportable)
            assert (info.latest, info.min_decryption_version) == (versions, min_version)
        root = store.find_token(made.secrets["root"])
        assert root is not None
        assert root.scopes == tuple(ROOT_SCOPES)
        assert store.find_token(made.secrets["gone"]) is None
        assert [t.revoked for t in store.list_tokens()] == [False, False, True]

    assert schema_version(db_path) == 2
    with closing(sqlite3.connect(db_path)) as db:
        new_blobs = dict(
            ((n, v), b) for n, v, b in db.execute("SELECT name, version, wrapped FROM key_versions")
        )
        assert new_blobs.keys() == old_blobs.keys()
        assert all(new_blobs[k] != old_blobs[k] for k in old_blobs)  # rewrapped, every one
        # The rows themselves are unchanged (but the root token's export:*); each gained its MAC.
        keys = db.execute(
            "SELECT name, algorithm, exportable, min_decryption_version, created_at, mac"
            " FROM keys ORDER BY name"
        ).fetchall()
        tokens = db.execute(
            "SELECT id, digest, scopes, label, created_at, revoked_at, mac FROM tokens ORDER BY id"
        ).fetchall()
    assert [row[:-1] for row in keys] == old_keys
    added = " export:* hmac:* sign:* verify:*"
    widened = [
        (*row[:2], row[2] + added, *row[3:]) if row[3] == "root" else row for row in old_tokens
    ]
    assert [row[:-1] for row in tokens] == widened
    assert all(isinstance(row[-1], bytes) and len(row[-1]) == 32 for row in keys + tokens)

    caplog.clear()
    with caplog.at_level(logging.WARNING), closing(SQLiteKeyStore(db_path, master_key)) as again:
        assert caplog.records == []  # upgraded once
        for (name, version), material in made.materials.items():
            assert again.key_material(name, version) == material


def test_an_upgrade_that_meets_a_version_it_cannot_unwrap_changes_nothing(
    db_path: Path, master_key: bytes
) -> None:
    build_v1(db_path, master_key)
    with closing(sqlite3.connect(db_path)) as db, db:
        # The last version the upgrade reaches: everything before it was already rewrapped.
        db.execute("UPDATE key_versions SET wrapped = x'00' WHERE name = 'small'")
    before = dump(db_path)
    with pytest.raises(KeyStoreCorrupt, match="'small' version 1 does not unwrap"):
        SQLiteKeyStore(db_path, master_key)
    assert dump(db_path) == before
    assert schema_version(db_path) == 1


def test_an_upgrade_with_the_wrong_master_key_is_refused_and_changes_nothing(
    db_path: Path, master_key: bytes
) -> None:
    build_v1(db_path, master_key)
    before = dump(db_path)
    with pytest.raises(KeyStoreUnavailable, match="master key does not open"):
        SQLiteKeyStore(db_path, os.urandom(32))
    assert dump(db_path) == before


def test_a_keystore_relabelled_as_schema_1_is_not_upgraded_again(
    db_path: Path, master_key: bytes
) -> None:
    """An upgrade signs whatever the rows say; a schema 2 file must not pass for schema 1."""
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        store.create_key("orders", Algorithm.AES_256_GCM)
    with closing(sqlite3.connect(db_path)) as db, db:
        db.execute("UPDATE meta SET value = 1 WHERE key = 'schema_version'")
        db.execute("UPDATE keys SET exportable = 1")
    before = dump(db_path)
    with pytest.raises(KeyStoreUnavailable, match="master key does not open"):
        SQLiteKeyStore(db_path, master_key)
    assert dump(db_path) == before


UPGRADE = """
import sys
from pathlib import Path
from sealflow.service.keystore import SQLiteKeyStore

print("ready", flush=True)
sys.stdin.readline()
store = SQLiteKeyStore(Path(sys.argv[1]), bytes.fromhex(sys.argv[2]))
assert len(store.key_material("orders", 3)) == 32
"""


def test_processes_opening_a_schema_1_keystore_at_once_all_succeed_keeping_every_version(
    db_path: Path, master_key: bytes
) -> None:
    made = build_v1(db_path, master_key)
    run_together(UPGRADE, str(db_path), master_key.hex(), processes=4)
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        for (name, version), material in made.materials.items():
            assert store.key_material(name, version) == material
        with pytest.raises(KeyNotFound):
            store.key_material("orders", 4)
