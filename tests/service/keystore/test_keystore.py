"""The contract of ``keystore.KeyStore``, over every implementation (the ``store`` fixture:
SQLite and a real PostgreSQL), what only the SQLite store does, and the master key."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    InvalidRequest,
    KeyExists,
    KeyNotFound,
    KeyStore,
    KeyStoreCorrupt,
    KeyStoreUnavailable,
    KeyWrapper,
    SQLiteKeyStore,
    TokenNotFound,
    create_master_key_file,
    load_master_key,
)

ROOT = Path(__file__).resolve().parents[3]


# The test is about the SQLite file: the store fixture opens only that backend.
SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])


def raw_rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def raw_update(path: Path, sql: str, args: tuple[object, ...]) -> None:
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(sql, args)


def file_bytes(path: Path) -> bytes:
    """The database file and its WAL, where committed pages may still sit."""
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


# -- keys


def test_create_key_starts_at_version_one(store: KeyStore) -> None:
    info = store.create_key("orders", Algorithm.AES_256_GCM, exportable=True)
    assert (info.name, info.algorithm, info.exportable) == ("orders", Algorithm.AES_256_GCM, True)
    assert info.min_decryption_version == 1
    assert [v.version for v in info.versions] == [1]
    assert info.latest == 1
    assert store.get_key("orders") == info


def test_list_keys_is_sorted_by_name(store: KeyStore) -> None:
    for name in ["zeta", "alpha", "mid.key-1"]:
        store.create_key(name, Algorithm.CHACHA20_POLY1305)
    assert [k.name for k in store.list_keys()] == ["alpha", "mid.key-1", "zeta"]
    assert all(not k.exportable for k in store.list_keys())


def test_creating_an_existing_key_raises_key_exists_and_changes_nothing(
    store: KeyStore,
) -> None:
    before = store.create_key("orders", Algorithm.AES_128_GCM)
    material = store.key_material("orders", 1)
    with pytest.raises(KeyExists):
        store.create_key("orders", Algorithm.AES_256_GCM)
    assert store.get_key("orders") == before
    assert store.key_material("orders", 1) == material


def test_unknown_key_or_version_raises_key_not_found(store: KeyStore) -> None:
    store.create_key("orders", Algorithm.AES_256_GCM)
    with pytest.raises(KeyNotFound):
        store.get_key("missing")
    with pytest.raises(KeyNotFound):
        store.rotate_key("missing")
    with pytest.raises(KeyNotFound):
        store.set_min_decryption_version("missing", 1)
    with pytest.raises(KeyNotFound):
        store.key_material("missing", 1)
    for version in [0, 2, -1, 2**63]:  # 2**63 does not even fit an SQLite integer
        with pytest.raises(KeyNotFound):
            store.key_material("orders", version)


@pytest.mark.parametrize(
    "name",
    ["", "-lead", ".lead", "a" * 65, "a/b", "a b", "caf\u00e9", "a\x00", "Ab-", "_x.", "\u0661"],
)
def test_invalid_key_names_are_refused(store: KeyStore, name: str) -> None:
    with pytest.raises(InvalidRequest):
        store.create_key(name, Algorithm.AES_256_GCM)
    assert store.list_keys() == []


def test_longest_valid_name_is_accepted(store: KeyStore) -> None:
    assert store.create_key("a" * 64, Algorithm.AES_256_GCM).name == "a" * 64


def test_algorithm_must_be_an_engine_algorithm(store: KeyStore) -> None:
    with pytest.raises(InvalidRequest):
        store.create_key("orders", "rot13")  # type: ignore[arg-type]


def test_rotate_adds_the_next_version_and_keeps_the_others(store: KeyStore) -> None:
    store.create_key("orders", Algorithm.AES_256_GCM)
    v1 = store.key_material("orders", 1)
    for expected in [2, 3]:
        assert store.rotate_key("orders").latest == expected
    info = store.get_key("orders")
    assert [v.version for v in info.versions] == [1, 2, 3]
    assert info.min_decryption_version == 1
    assert store.key_material("orders", 1) == v1


def test_min_decryption_version_accepts_one_to_latest(store: KeyStore) -> None:
    store.create_key("orders", Algorithm.AES_256_GCM)
    store.rotate_key("orders")
    store.rotate_key("orders")
    for version in [1, 2, 2, 3]:
        assert store.set_min_decryption_version("orders", version).min_decryption_version == version
        assert store.get_key("orders").min_decryption_version == version


def test_lowering_min_decryption_version_must_be_asked_for_and_is_logged(
    store: KeyStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.create_key("orders", Algorithm.AES_256_GCM)
    store.rotate_key("orders")
    store.rotate_key("orders")
    store.set_min_decryption_version("orders", 3)
    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        with pytest.raises(InvalidRequest, match="allow_lowering"):
            store.set_min_decryption_version("orders", 1)
        assert store.get_key("orders").min_decryption_version == 3
        assert caplog.records == []
        lowered = store.set_min_decryption_version("orders", 1, allow_lowering=True)
    assert lowered.min_decryption_version == store.get_key("orders").min_decryption_version == 1
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "'orders'" in record.getMessage()
    assert record.fields == {  # type: ignore[attr-defined]
        "key": "orders",
        "setting": "min_decryption_version",
        "old": 3,
        "new": 1,
    }
    # Raising it, or setting the same value, needs nothing and logs nothing.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        store.set_min_decryption_version("orders", 1)
        store.set_min_decryption_version("orders", 2)
    assert caplog.records == []


@pytest.mark.parametrize("version", [0, -1, 4, 1000])
def test_min_decryption_version_out_of_range_is_refused(store: KeyStore, version: int) -> None:
    store.create_key("orders", Algorithm.AES_256_GCM)
    store.rotate_key("orders")
    store.rotate_key("orders")
    store.set_min_decryption_version("orders", 2)
    with pytest.raises(InvalidRequest):
        store.set_min_decryption_version("orders", version)
    assert store.get_key("orders").min_decryption_version == 2


@pytest.mark.parametrize("alg", list(Algorithm))
def test_material_length_matches_the_algorithm(store: KeyStore, alg: Algorithm) -> None:
    store.create_key("k", alg)
    store.rotate_key("k")
    for version in [1, 2]:
        assert len(store.key_material("k", version)) == alg.spec.key_len


def test_every_version_and_key_has_distinct_material(store: KeyStore) -> None:
    store.create_key("a", Algorithm.AES_256_GCM)
    store.create_key("b", Algorithm.AES_256_GCM)
    for _ in range(4):
        store.rotate_key("a")
    materials = [store.key_material("a", v) for v in range(1, 6)] + [store.key_material("b", 1)]
    assert len(set(materials)) == len(materials)


def test_material_and_metadata_survive_reopening(db_path: Path, master_key: bytes) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as first:
        first.create_key("orders", Algorithm.CHACHA20_POLY1305, exportable=True)
        first.rotate_key("orders")
        first.set_min_decryption_version("orders", 2)
        info = first.get_key("orders")
        materials = [first.key_material("orders", v) for v in [1, 2]]
    with closing(SQLiteKeyStore(db_path, master_key)) as second:
        assert second.get_key("orders") == info
        assert [second.key_material("orders", v) for v in [1, 2]] == materials


def test_wrong_master_key_is_refused_when_opening(db_path: Path, master_key: bytes) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as first:
        first.create_key("orders", Algorithm.AES_256_GCM)
    with pytest.raises(KeyStoreUnavailable, match="master key") as caught:
        SQLiteKeyStore(db_path, os.urandom(32))
    assert str(db_path) in str(caught.value)


@pytest.mark.parametrize("kind", ["garbage", "directory"])
def test_corrupt_or_unreadable_file_is_unavailable_naming_the_path(
    db_path: Path, master_key: bytes, kind: str
) -> None:
    if kind == "garbage":
        db_path.write_bytes(b"this is not a sqlite database\x00" * 200)
    else:
        db_path.mkdir()
    with pytest.raises(KeyStoreUnavailable) as caught:
        SQLiteKeyStore(db_path, master_key)
    assert str(db_path) in str(caught.value)


@SQLITE_ONLY
def test_wrapped_blobs_do_not_contain_the_material(db_path: Path, store: KeyStore) -> None:
    store.create_key("short", Algorithm.AES_128_GCM)
    store.create_key("long", Algorithm.AES_256_GCM)
    store.rotate_key("long")
    materials = [store.key_material(n, v) for n, v in [("short", 1), ("long", 1), ("long", 2)]]
    blobs = [b for (b,) in raw_rows(db_path, "SELECT wrapped FROM key_versions")]
    assert len(blobs) == 3
    contents = file_bytes(db_path)
    for material in materials:
        assert all(isinstance(b, bytes) and material not in b for b in blobs)
        assert material not in contents


def flip_byte(blob: bytes, _: bytes) -> bytes:
    return blob[:20] + bytes([blob[20] ^ 1]) + blob[21:]


def other_version(_: bytes, other: bytes) -> bytes:
    return other


@pytest.mark.parametrize("tamper", [flip_byte, other_version])
def test_tampered_wrapped_blob_makes_key_material_unavailable(
    db_path: Path, master_key: bytes, tamper: Callable[[bytes, bytes], bytes]
) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as first:
        first.create_key("orders", Algorithm.AES_256_GCM)
        first.rotate_key("orders")
    (v1,), (v2,) = raw_rows(db_path, "SELECT wrapped FROM key_versions ORDER BY version")
    assert isinstance(v1, bytes)
    assert isinstance(v2, bytes)
    sql = "UPDATE key_versions SET wrapped = ? WHERE name = 'orders' AND version = 1"
    raw_update(db_path, sql, (tamper(v1, v2),))
    with closing(SQLiteKeyStore(db_path, master_key)) as second:
        with pytest.raises(KeyStoreCorrupt, match="'orders' version 1 fails its integrity check"):
            second.key_material("orders", 1)
        assert len(second.key_material("orders", 2)) == 32


def test_second_instance_sees_writes_without_reopening(db_path: Path, master_key: bytes) -> None:
    with (
        closing(SQLiteKeyStore(db_path, master_key)) as writer,
        closing(SQLiteKeyStore(db_path, master_key)) as reader,
    ):
        # Warm the reader's caches so only invalidation can show it the writes.
        assert reader.list_keys() == []
        assert reader.list_tokens() == []
        with pytest.raises(KeyNotFound):
            reader.get_key("orders")

        writer.create_key("orders", Algorithm.AES_256_GCM)
        assert reader.get_key("orders").latest == 1
        writer.rotate_key("orders")
        assert reader.get_key("orders").latest == 2
        assert reader.key_material("orders", 2) == writer.key_material("orders", 2)
        writer.set_min_decryption_version("orders", 2)
        assert reader.get_key("orders").min_decryption_version == 2
        assert [k.name for k in reader.list_keys()] == ["orders"]

        info, secret = writer.create_token(["decrypt:orders*"], label="app")
        assert reader.find_token(secret) == info
        writer.revoke_token(info.id)
        assert reader.find_token(secret) is None
        assert [(t.id, t.revoked) for t in reader.list_tokens()] == [(info.id, True)]


def run_together(script: str, *args: str, processes: int = 2) -> None:
    """Run ``script`` in several Python processes released at the same moment."""
    argv = [sys.executable, "-c", script, *args]
    procs = [
        subprocess.Popen(  # noqa: S603
            argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(processes)
    ]
    try:
        # Every process has imported everything before any starts, so their work overlaps.
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            proc.communicate(timeout=300)
            assert proc.returncode == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


CHILD = """
import sys
from pathlib import Path
from sealflow.service.keystore import SQLiteKeyStore

print("ready", flush=True)
sys.stdin.readline()
store = SQLiteKeyStore(Path(sys.argv[1]), bytes.fromhex(sys.argv[2]))
"""
ROTATE = CHILD + "for _ in range(20): store.rotate_key('shared')\n"
ADD_TOKEN = CHILD + "store.create_token(['admin'])\n"


@SQLITE_ONLY
def test_two_processes_rotating_at_once_lose_and_reuse_no_version(
    db_path: Path, store: KeyStore, master_key: bytes
) -> None:
    store.create_key("shared", Algorithm.AES_256_GCM)
    run_together(ROTATE, str(db_path), master_key.hex())

    info = store.get_key("shared")
    assert [v.version for v in info.versions] == list(range(1, 42))
    materials = {store.key_material("shared", v) for v in range(1, 42)}
    assert len(materials) == 41
    with closing(SQLiteKeyStore(db_path, master_key)) as fresh:
        assert {fresh.key_material("shared", v) for v in range(1, 42)} == materials


def test_processes_creating_a_new_keystore_at_once_all_succeed(
    db_path: Path, master_key: bytes
) -> None:
    run_together(ADD_TOKEN, str(db_path), master_key.hex(), processes=4)
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        assert len(store.list_tokens()) == 4


def test_a_database_error_is_unavailable_naming_the_store_and_quoting_no_row(
    store: KeyStore,
) -> None:
    """The driver's error, whichever the store, reaches the caller as KeyStoreUnavailable with
    its first line only and unchained: PostgreSQL's DETAIL line would quote the digest."""
    secret = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    store.create_token(["admin"], secret=secret)
    with pytest.raises(KeyStoreUnavailable, match=r"^keystore \S") as caught:
        store.create_token(["admin"], secret=secret)  # the digest is unique in both schemas
    digest = hashlib.sha256(secret.encode()).hexdigest()
    assert "\n" not in str(caught.value)
    assert digest not in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    assert len(store.list_tokens()) == 1


def test_close_is_idempotent_and_later_calls_are_unavailable(store: KeyStore) -> None:
    store.create_key("orders", Algorithm.AES_256_GCM)
    store.close()
    store.close()
    with pytest.raises(KeyStoreUnavailable):
        store.get_key("orders")
    with pytest.raises(KeyStoreUnavailable):
        store.key_material("orders", 1)


# -- tokens


def test_create_token_returns_a_long_urlsafe_secret_that_find_token_finds(
    store: KeyStore,
) -> None:
    info, secret = store.create_token(["encrypt:orders", "decrypt:orders*"], label="billing")
    assert re.fullmatch(r"[A-Za-z0-9_-]{43,}", secret)
    assert re.fullmatch(r"tok_[0-9a-f]{16}", info.id)
    assert info.scopes == ("encrypt:orders", "decrypt:orders*")
    assert (info.label, info.revoked) == ("billing", False)
    assert store.find_token(secret) == info
    other, other_secret = store.create_token(["admin"])
    assert other_secret != secret
    assert other.id != info.id
    assert store.find_token(other_secret) == other


def test_find_token_refuses_prefixes_and_modified_secrets(store: KeyStore) -> None:
    _, secret = store.create_token(["admin"])
    changed = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for candidate in [secret[:-1], secret[:20], "", changed, secret + "A", " " + secret]:
        assert store.find_token(candidate) is None


def test_revoked_token_is_not_found_and_listed_as_revoked(store: KeyStore) -> None:
    kept, kept_secret = store.create_token(["admin"], label="kept")
    gone, gone_secret = store.create_token(["admin"], label="gone")
    revoked = store.revoke_token(gone.id)
    assert revoked.revoked
    assert store.revoke_token(gone.id) == revoked  # revoking twice changes nothing
    assert store.find_token(gone_secret) is None
    assert store.find_token(kept_secret) == kept
    assert [(t.id, t.revoked) for t in store.list_tokens()] == [(kept.id, False), (gone.id, True)]


def test_revoking_an_unknown_token_raises_token_not_found(store: KeyStore) -> None:
    with pytest.raises(TokenNotFound):
        store.revoke_token("tok_0000000000000000")


def test_list_tokens_is_in_creation_order(store: KeyStore) -> None:
    ids = [store.create_token(["admin"], label=str(i))[0].id for i in range(5)]
    assert [t.id for t in store.list_tokens()] == ids


@pytest.mark.parametrize(
    "scopes",
    [[], ["admin", "bogus"], ["encrypt:"], ["ENCRYPT:orders"], ["decrypt:a b"], ["admin "]],
)
def test_invalid_scopes_are_refused(store: KeyStore, scopes: list[str]) -> None:
    with pytest.raises(InvalidRequest):
        store.create_token(scopes)
    assert store.list_tokens() == []


@SQLITE_ONLY
def test_token_secret_is_stored_only_as_its_sha256_digest(db_path: Path, store: KeyStore) -> None:
    info, secret = store.create_token(["admin"], label="ops")
    rows = raw_rows(db_path, "SELECT id, digest, scopes, label FROM tokens")
    assert rows == [(info.id, hashlib.sha256(secret.encode()).digest(), "admin", "ops")]
    assert secret.encode() not in file_bytes(db_path)


# -- master key


KEY = b"\xfb\xff" * 16  # encodes to both alphabets' extra characters (+/ and -_)


@pytest.mark.parametrize(
    "text",
    [
        base64.b64encode(KEY).decode(),
        base64.b64encode(KEY).decode().rstrip("="),
        base64.urlsafe_b64encode(KEY).decode(),
        base64.urlsafe_b64encode(KEY).decode().rstrip("="),
        "  " + base64.b64encode(KEY).decode() + "\n",
    ],
    ids=["standard", "standard-unpadded", "urlsafe", "urlsafe-unpadded", "whitespace"],
)
def test_master_key_loads_from_either_base64_alphabet(tmp_path: Path, text: str) -> None:
    assert load_master_key(text, None) == KEY
    key_file = tmp_path / "master.key"
    key_file.write_text(text)
    assert load_master_key(None, key_file) == KEY


def test_master_key_env_value_wins_over_the_file_and_blank_means_unset(tmp_path: Path) -> None:
    other = os.urandom(32)
    key_file = tmp_path / "master.key"
    key_file.write_text(base64.b64encode(other).decode() + "\n")
    assert load_master_key(base64.b64encode(KEY).decode(), key_file) == KEY
    assert load_master_key("", key_file) == other
    assert load_master_key("  \n", key_file) == other


@pytest.mark.parametrize("length", [0, 16, 31, 33, 64])
def test_master_key_of_the_wrong_length_is_refused(tmp_path: Path, length: int) -> None:
    text = base64.b64encode(os.urandom(length)).decode()
    key_file = tmp_path / "master.key"
    key_file.write_text(text)
    for env, path in [(text, None), (None, key_file)]:
        if not text and env is not None:
            continue  # a blank value counts as unset
        with pytest.raises(KeyStoreUnavailable, match="32 bytes") as caught:
            load_master_key(env, path)
        assert not text or text not in str(caught.value)


@pytest.mark.parametrize("text", ["not base64 at all!", "A", "AAAA*AAA", "\u00e9" * 44])
def test_master_key_that_is_not_base64_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(KeyStoreUnavailable, match="base64"):
        load_master_key(text, None)
    key_file = tmp_path / "master.key"
    key_file.write_text(text, encoding="utf-8")
    with pytest.raises(KeyStoreUnavailable, match="base64"):
        load_master_key(None, key_file)


def test_missing_master_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyStoreUnavailable, match="no master key"):
        load_master_key(None, None)
    missing = tmp_path / "absent.key"
    with pytest.raises(KeyStoreUnavailable) as caught:
        load_master_key(None, missing)
    assert str(missing) in str(caught.value)


def test_created_master_key_file_is_private_loadable_and_never_overwritten(
    tmp_path: Path,
) -> None:
    key_file = tmp_path / "master.key"
    key = create_master_key_file(key_file)
    assert len(key) == 32
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert load_master_key(None, key_file) == key
    content = key_file.read_bytes()
    with pytest.raises(FileExistsError):
        create_master_key_file(key_file)
    assert key_file.read_bytes() == content


def test_key_wrapper_binds_blobs_to_the_aad_and_master_key() -> None:
    wrapper = KeyWrapper(os.urandom(32))
    material = os.urandom(32)
    blob = wrapper.wrap(b"orders 3", material)
    assert material not in blob
    assert wrapper.wrap(b"orders 3", material) != blob  # fresh nonce each time
    assert wrapper.unwrap(b"orders 3", blob) == material
    for aad, key_wrapper in [(b"orders 2", wrapper), (b"orders 3", KeyWrapper(os.urandom(32)))]:
        with pytest.raises(KeyStoreCorrupt, match="cannot unwrap"):
            key_wrapper.unwrap(aad, blob)
    for bad in [blob[:20], b"", "text", None]:
        with pytest.raises(KeyStoreCorrupt):
            wrapper.unwrap(b"orders 3", bad)


@SQLITE_ONLY
def test_max_staleness_bounds_how_long_other_writes_may_go_unseen(
    store: KeyStore, db_path: Path, master_key: bytes
) -> None:
    store.create_key("k", Algorithm.AES_256_GCM)
    lazy = SQLiteKeyStore(db_path, master_key, max_staleness=3600)
    try:
        assert lazy.get_key("k").latest == 1
        store.rotate_key("k")
        assert lazy.get_key("k").latest == 1  # checked less than an hour ago: not again
        lazy._checked -= 3600  # an hour later
        assert lazy.get_key("k").latest == 2
    finally:
        lazy.close()
