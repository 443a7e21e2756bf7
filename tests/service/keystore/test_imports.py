"""Transit's BYOK import in the keystore, on every backend: one wrapping key per keystore,
imported material wrapped like any version's, the ``imported`` flag in the key's MAC'd row, and
nothing written for an import refused."""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    InvalidRequest,
    KeyStore,
    KeyStoreCorrupt,
    PostgresKeyStore,
    SQLiteKeyStore,
    UsageMeter,
    VersionUsedUp,
    migrate_keystore,
)
from tests.service.byok import other_public_pem, wrap


def test_one_wrapping_key_per_keystore_whoever_asks_first(
    open_store: Callable[[bytes], KeyStore], master_key: bytes
) -> None:
    first, second = open_store(master_key), open_store(master_key)
    pems: list[str] = []
    threads = [
        threading.Thread(target=lambda s=s: pems.append(s.wrapping_public_pem()))
        for s in (first, second)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(pems) == 2
    assert pems[0] == pems[1]
    assert "BEGIN PUBLIC KEY" in pems[0]
    assert open_store(master_key).wrapping_public_pem() == pems[0]


def test_imported_material_is_the_key_and_the_flag_is_kept(store: KeyStore) -> None:
    pem = store.wrapping_public_pem()
    one, two = os.urandom(32), os.urandom(32)
    key = store.import_key("orders", Algorithm.AES_256_GCM, store.unwrap_import(wrap(pem, one)))
    assert (key.imported, key.allow_rotation, key.latest) == (True, False, 1)
    key = store.import_version("orders", store.unwrap_import(wrap(pem, two, "SHA512"), "sha512"))
    assert key.latest == 2
    assert store.get_key("orders").imported
    assert store.key_material("orders", 1) == one
    assert store.key_material("orders", 2) == two
    with pytest.raises(InvalidRequest, match="imported key orders does not allow rotation"):
        store.rotate_key("orders")
    assert store.get_key("orders").latest == 2
    # Other rules leave the flag: min_decryption_version re-MACs the key's row.
    assert store.configure("orders", min_decryption_version=2).imported


def test_a_rotation_allowed_makes_it_a_key_like_any_other(store: KeyStore) -> None:
    material = store.unwrap_import(wrap(store.wrapping_public_pem(), os.urandom(16)))
    store.import_key("small", Algorithm.AES_128_GCM, material, allow_rotation=True)
    key = store.rotate_key("small")
    assert (key.latest, key.imported) == (2, False)  # as Transit: rotated here, not imported
    with pytest.raises(InvalidRequest, match="can only be used with an imported key"):
        store.import_version("small", material)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda c: c[:300], "provided ciphertext is too short"),
        (lambda c: c[:-8], "kwp: unwrap failed integrity check"),
        (lambda c: c[:-1], "kwp: wrapped key size must be a multiple of 8 bytes"),
        (lambda c: c[:-1] + bytes([c[-1] ^ 1]), "kwp: unwrap failed integrity check"),
        (lambda c: bytes([c[0] ^ 1]) + c[1:], "crypto/rsa: decryption error"),
    ],
)
def test_a_damaged_ciphertext_is_refused_and_nothing_written(
    store: KeyStore, damage: Callable[[bytes], bytes], words: str
) -> None:
    raw = base64.b64decode(wrap(store.wrapping_public_pem(), os.urandom(32)))
    with pytest.raises(InvalidRequest, match=words):
        store.unwrap_import(base64.b64encode(damage(raw)).decode())
    assert store.list_keys() == []


def test_bad_imports_are_refused_and_nothing_written(store: KeyStore) -> None:
    pem = store.wrapping_public_pem()
    with pytest.raises(InvalidRequest, match="crypto/rsa: decryption error"):
        store.unwrap_import(wrap(other_public_pem(), os.urandom(32)))
    with pytest.raises(InvalidRequest, match="unknown hash function: MD5"):
        store.unwrap_import(wrap(pem, os.urandom(32)), "MD5")
    with pytest.raises(InvalidRequest, match="invalid key size 16 bytes"):
        store.import_key("k", Algorithm.AES_256_GCM, store.unwrap_import(wrap(pem, os.urandom(16))))
    assert store.list_keys() == []
    store.create_key("made", Algorithm.AES_256_GCM)
    with pytest.raises(InvalidRequest, match="cannot be used with an existing key"):
        store.import_key("made", Algorithm.AES_256_GCM, os.urandom(32))
    with pytest.raises(InvalidRequest, match="can only be used with an imported key"):
        store.import_version("made", os.urandom(32))
    assert store.get_key("made").latest == 1
    assert not store.get_key("made").imported


def test_a_whole_key_is_written_at_once_with_placeholders_and_its_policy(
    open_store: Callable[[bytes], KeyStore], master_key: bytes
) -> None:
    store = open_store(master_key)
    two, three = os.urandom(16), os.urandom(16)
    key = store.import_versions(
        "moved",
        Algorithm.AES_128_GCM,
        [None, two, three],
        min_decryption_version=2,
        min_encryption_version=3,
        deletion_allowed=True,
        allow_rotation=True,
    )
    # Read back by another process's store: every row passes its check.
    again = open_store(master_key).get_key("moved")
    assert again == key
    assert [v.version for v in key.versions] == [1, 2, 3]
    assert (key.min_decryption_version, key.min_encryption_version) == (2, 3)
    assert (key.deletion_allowed, key.imported, key.allow_rotation) == (True, True, True)
    assert store.key_material("moved", 2) == two
    assert store.key_material("moved", 3) == three
    assert len(store.key_material("moved", 1)) == 16  # a placeholder: random, retired


@pytest.mark.parametrize(
    ("versions", "policy", "words"),
    [
        ([None, b"x" * 16], {"min_decryption_version": 1}, "placeholder version must be below"),
        ([b"x" * 16, b"x" * 15], {}, "invalid key size 15 bytes"),
        ([b"x" * 16] * 3, {"min_decryption_version": 3, "min_encryption_version": 2}, "below"),
        ([b"x" * 16] * 2, {"min_encryption_version": 3}, "between 0 and 2"),
        ([b"x" * 16], {"min_decryption_version": 2}, "between 1 and 1"),
        ([], {}, "1 to"),
    ],
)
def test_a_whole_key_refused_writes_nothing(
    store: KeyStore, versions: list[bytes | None], policy: dict[str, int], words: str
) -> None:
    with pytest.raises(InvalidRequest, match=words):
        store.import_versions(
            "moved",
            Algorithm.AES_128_GCM,
            versions,
            min_decryption_version=policy.get("min_decryption_version", 1),
            min_encryption_version=policy.get("min_encryption_version", 0),
        )
    assert store.list_keys() == []


def test_a_flag_set_without_the_master_key_is_refused(
    open_store: Callable[[bytes], KeyStore], master_key: bytes, backend: str
) -> None:
    store = open_store(master_key)
    store.create_key("plain", Algorithm.AES_256_GCM)
    statement = {
        "sqlite": "UPDATE keys SET imported = 1, allow_rotation = 1 WHERE name = 'plain'",
        "postgresql": "UPDATE sealflow_keys SET imported = 1 WHERE name = 'plain'",
    }[backend]
    _execute(store, statement)
    with pytest.raises(KeyStoreCorrupt):
        open_store(master_key).get_key("plain")


def _execute(store: KeyStore, statement: str) -> None:
    with store._transaction() as db:  # type: ignore[attr-defined]
        db.execute(statement)


def test_an_imported_key_not_rotatable_stops_at_its_limit(store: KeyStore) -> None:
    material = store.unwrap_import(wrap(store.wrapping_public_pem(), os.urandom(32)))
    store.import_key("fixed", Algorithm.AES_256_GCM, material)
    store.set_limits("fixed", max_encryptions=10)
    meter = UsageMeter(store)
    try:
        leases = [meter.lease("fixed") for _ in range(10)]
        with pytest.raises(VersionUsedUp, match="imported without allow_rotation"):
            meter.lease("fixed")
    finally:
        meter.close()
    assert [lease.version for lease in leases] == [1] * 10
    assert store.get_key("fixed").latest == 1


def test_keystore_migrate_copies_the_import_flags(
    db_path: Path, pg_url: str, master_key: bytes
) -> None:
    material = os.urandom(32)
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        pem = store.wrapping_public_pem()
        store.import_key(
            "moved", Algorithm.AES_256_GCM, store.unwrap_import(wrap(pem, material)),
            allow_rotation=True,
        )  # fmt: skip
        store.import_public_key("destination", "rsa-4096", other_public_pem())
        before = store.list_keys()
        public = store.public_keys()
    migrate_keystore(db_path, pg_url, master_key)
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as copy:
        assert copy.list_keys() == before
        assert copy.public_keys() == public
        assert copy.get_key("moved").imported
        assert copy.key_material("moved", 1) == material
