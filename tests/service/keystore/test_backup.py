"""The keystore backup file (``sealflow keystore backup`` / ``restore``), over both stores: every
row comes back in either store, a changed byte or another master key is refused, a keystore
that holds anything is refused unless replaced, and the file is private and sealed."""

from __future__ import annotations

import os
import stat
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    BackupRefused,
    KeyStore,
    PostgresKeyStore,
    SQLiteKeyStore,
    backup_keystore,
    read_backup,
    restore_postgres,
    restore_sqlite,
)
from tests.postgres import Cluster
from tests.service import pki
from tests.service.byok import other_public_pem


def populate(store: KeyStore) -> dict[str, str]:
    """Something of every table; the secrets made, by what they are."""
    for alg in Algorithm:
        name = f"k-{alg.value}"
        store.create_key(name, alg, exportable=alg is Algorithm.AES_128_GCM)
        store.rotate_key(name)
        store.rotate_key(name)
    store.set_limits("k-aes-256-gcm", 1000, 3600.0)
    store.configure("k-aes-256-gcm", 2, 3, True)
    store.configure("k-chacha20-poly1305", exportable=True)
    key = store.get_key("k-aes-256-gcm")
    store.reserve_usage(key.slot(3), 10, 1000, 4096)
    _, root = store.create_token(["admin", "encrypt:*"], "root")
    gone, _ = store.create_token(["decrypt:*"], "gone")
    store.revoke_token(gone.id)
    store.write_role("app", {"token_policies": ("encrypt:k-*",), "secret_id_ttl": 3600})
    _, secret_id = store.create_secret_id("app", metadata={"team": "a"})
    return {"token": root, "secret_id": secret_id}


@pytest.fixture
def populated(store: KeyStore) -> dict[str, str]:
    return populate(store)


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a restore goes: a path for SQLite, a new database's URL for PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "restored" / "keystore.db")
    url: str = request.getfixturevalue("postgres").new_database()
    return url


def restore(target: str, master_key: bytes, backup: Path, replace: bool = False) -> None:
    snapshot = read_backup(backup, master_key)
    if target.startswith("postgresql://"):
        restore_postgres(target, master_key, snapshot, replace)
    else:
        restore_sqlite(Path(target), master_key, snapshot, replace)


def opened(target: str, master_key: bytes) -> KeyStore:
    if target.startswith("postgresql://"):
        return PostgresKeyStore(target, master_key, watch=False)
    Path(target).parent.mkdir(exist_ok=True)
    return SQLiteKeyStore(Path(target), master_key)


def test_every_row_comes_back_in_either_store(
    store: KeyStore, populated: dict[str, str], master_key: bytes, target: str, tmp_path: Path
) -> None:
    # The import wrapping key and a certificate role come along too.
    wrapping = store.wrapping_public_pem()
    ca_pem = pki.ca(tmp_path / "pki", "client-ca").cert_path.read_text()
    store.write_cert_role("web", {"certificate": ca_pem, "token_policies": ["encrypt:k-*"]})
    store.import_public_key("other-transit", "rsa-4096", other_public_pem())  # a destination
    backup = tmp_path / "keystore.bak"
    taken = backup_keystore(store, master_key, backup)
    restore(target, master_key, backup)
    with closing(opened(target, master_key)) as new:
        assert new.snapshot() == taken == store.snapshot()
        assert new.wrapping_public_pem() == wrapping
        assert new.list_cert_roles() == store.list_cert_roles()
        assert new.get_cert_role("web").certificate == ca_pem
        assert new.public_keys() == store.public_keys()
        assert [p.name for p in new.public_keys()] == ["other-transit"]
        assert new.list_keys() == store.list_keys()
        for key in store.list_keys():
            assert new.usage(key.name) == store.usage(key.name)
            for v in key.versions:
                assert new.key_material(key.name, v.version) == store.key_material(
                    key.name, v.version
                )
        assert new.list_tokens() == store.list_tokens()
        found = new.find_token(populated["token"])
        assert found is not None
        assert found.label == "root"
        assert [t.revoked for t in new.list_tokens()] == [False, True]
        assert new.list_roles() == store.list_roles()
        assert new.lookup_secret_id("app", populated["secret_id"]) is not None
        # Still a keystore: it takes writes after the restore.
        assert new.rotate_key("k-aes-128-gcm").latest == 4


# magic, format, algorithm, keystore id, time, salt, nonce, then the body and its tag
POSITIONS = [0, 4, 5, 6, 21, 22, 29, 30, 61, 62, 74, "middle", -17, -1]


@pytest.mark.parametrize("position", POSITIONS)
def test_one_changed_byte_anywhere_is_refused_and_nothing_is_restored(
    store: KeyStore,
    populated: dict[str, str],
    master_key: bytes,
    tmp_path: Path,
    position: int | str,
) -> None:
    backup = tmp_path / "keystore.bak"
    backup_keystore(store, master_key, backup)
    data = bytearray(backup.read_bytes())
    at = len(data) // 2 if position == "middle" else int(position)
    data[at] ^= 0x01
    backup.write_bytes(data)
    target = tmp_path / "restored" / "keystore.db"
    with pytest.raises(BackupRefused) as refused:
        restore(str(target), master_key, backup)
    message = str(refused.value)
    assert str(backup) in message
    assert any(
        words in message
        for words in ("fails its integrity check", "not a sealflow keystore backup", "format")
    )
    assert not target.parent.exists()


def test_a_truncated_file_and_another_master_key_are_refused(
    store: KeyStore, populated: dict[str, str], master_key: bytes, tmp_path: Path
) -> None:
    backup = tmp_path / "keystore.bak"
    backup_keystore(store, master_key, backup)
    with pytest.raises(BackupRefused, match="fails its integrity check"):
        read_backup(backup, os.urandom(32))
    backup.write_bytes(backup.read_bytes()[:-1])
    with pytest.raises(BackupRefused, match="fails its integrity check"):
        read_backup(backup, master_key)
    backup.write_bytes(b"SFKB")
    with pytest.raises(BackupRefused, match="not a sealflow keystore backup"):
        read_backup(backup, master_key)


def test_a_keystore_that_holds_anything_is_refused_unless_replaced(
    store: KeyStore, populated: dict[str, str], master_key: bytes, target: str, tmp_path: Path
) -> None:
    backup = tmp_path / "keystore.bak"
    backup_keystore(store, master_key, backup)
    with closing(opened(target, master_key)) as other:
        other.create_key("other", Algorithm.AES_256_GCM)
        before = other.snapshot()
        with pytest.raises(BackupRefused, match=r"is not empty \(2 rows\).*--replace-existing"):
            restore(target, master_key, backup)
        assert other.snapshot() == before
        restore(target, master_key, backup, replace=True)
        assert other.snapshot() == store.snapshot()
        assert [k.name for k in other.list_keys()] == [k.name for k in store.list_keys()]


def test_the_file_is_private_from_its_creation_and_replaced_only_with_force(
    store: KeyStore, populated: dict[str, str], master_key: bytes, tmp_path: Path
) -> None:
    backup = tmp_path / "keystore.bak"
    old = os.umask(0)  # whatever the umask, the file is made 0600
    try:
        backup_keystore(store, master_key, backup)
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600
        first = backup.read_bytes()
        with pytest.raises(BackupRefused, match="exists: give --force"):
            backup_keystore(store, master_key, backup)
        assert backup.read_bytes() == first
        backup.chmod(0o644)
        backup_keystore(store, master_key, backup, force=True)
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600
        assert backup.read_bytes() != first  # a fresh salt and nonce
    finally:
        os.umask(old)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_file_holds_no_key_material_nor_secret(
    store: KeyStore, populated: dict[str, str], master_key: bytes, tmp_path: Path
) -> None:
    backup = tmp_path / "keystore.bak"
    backup_keystore(store, master_key, backup)
    data = backup.read_bytes()
    # The rows inside, once opened, hold material only wrapped, secrets only as digests.
    rows = repr(read_backup(backup, master_key).tables).encode()
    for key in store.list_keys():
        for v in key.versions:
            material = store.key_material(key.name, v.version)
            assert material not in data
            assert repr(material).encode()[2:-1] not in rows
    for secret in populated.values():
        assert secret.encode() not in data
        assert secret.encode() not in rows


def test_a_fresh_postgresql_database_gets_its_schema_and_the_backup(
    store: KeyStore, populated: dict[str, str], master_key: bytes, postgres: Cluster, tmp_path: Path
) -> None:
    backup = tmp_path / "keystore.bak"
    backup_keystore(store, master_key, backup)
    url = postgres.new_database()
    restore(url, master_key, backup)
    with psycopg.connect(url) as conn:
        (count,) = conn.execute("SELECT count(*) FROM sealflow_key_versions").fetchone() or (0,)
    assert count == 9
