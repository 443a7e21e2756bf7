"""What the master key vouches for: the wrapping AAD, the row MACs, and a store that refuses
rows changed without the master key (the attacks of the hardening report, made with sqlite3
on the real file, against an open store and on reopening it)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import sqlite3
import struct
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    KeyNotFound,
    KeyStoreCorrupt,
    SQLiteKeyStore,
    export_material,
)
from sealflow.service.keystore._integrity import (
    KEY_ROW,
    LEGACY_TOKEN_ROW,
    TOKEN_ROW,
    Integrity,
    encode,
)

MASTER = bytes(range(32))
KEY_VALUES = ("orders", "aes-256-gcm", 0, 1, 1700000000.5)
TOKEN_VALUES = (
    *("tok_0123456789abcdef", bytes(32), "admin", "app", 1700000000.5, None),
    *(3600, 1700003600.5, 7200, 1, 5, 2, "tok_fedcba9876543210", 0),
)
LEGACY_TOKEN_VALUES = TOKEN_VALUES[:6]
LABELS = {KEY_ROW: "key", TOKEN_ROW: "token-lifetime", LEGACY_TOKEN_ROW: "token"}


# -- the formats, written out again here: they are a storage format and must not drift


def field(value: object) -> bytes:
    if value is None:
        kind, data = b"N", b""
    elif isinstance(value, int):
        kind, data = b"I", value.to_bytes(8, "big", signed=True)
    elif isinstance(value, float):
        kind, data = b"F", struct.pack(">d", value)
    elif isinstance(value, str):
        kind, data = b"S", value.encode()
    else:
        assert isinstance(value, bytes)
        kind, data = b"B", value
    return kind + len(data).to_bytes(4, "big") + data


def mac_key(label: str) -> bytes:
    info = f"sealflow-keystore-v2 MAC key for {label} rows".encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(MASTER)


@pytest.mark.parametrize(
    ("row", "values"),
    [(KEY_ROW, KEY_VALUES), (TOKEN_ROW, TOKEN_VALUES), (LEGACY_TOKEN_ROW, LEGACY_TOKEN_VALUES)],
)
def test_row_macs_are_hmac_sha256_under_hkdf_subkeys_over_a_length_prefixed_encoding(
    row: object, values: tuple[object, ...]
) -> None:
    label = {"key": "key", "token": "token", "token-lifetime": "token-lifetime"}[
        LABELS[row]  # type: ignore[index]
    ]
    message = b"".join(field(v) for v in (f"sealflow-keystore-{label}-row", *values))
    expected = hmac.digest(mac_key(label), message, "sha256")
    integrity = Integrity(MASTER)
    assert integrity.mac(row, values) == expected  # type: ignore[arg-type]
    assert len({mac_key(x) for x in LABELS.values()}) == 3


def test_the_wrapping_aad_binds_name_version_algorithm_and_exportability() -> None:
    material = os.urandom(32)
    blob = Integrity(MASTER).wrap("orders", 3, Algorithm.CHACHA20_POLY1305, True, material)
    aad = b"".join(
        field(v) for v in ("sealflow-keystore-material", "orders", 3, "chacha20-poly1305", 1)
    )
    assert AESGCM(MASTER).decrypt(blob[:12], blob[12:], aad) == material


def test_the_encoding_tells_every_split_and_type_apart() -> None:
    pairs: list[tuple[list[object], list[object]]] = [
        (["ab", "c"], ["a", "bc"]),
        ([None], [b""]),
        ([b""], [""]),
        ([1], ["1"]),
        ([1], [1.0]),
        (["a", None], ["a"]),
        ([b"\x00"], [0]),
    ]
    for one, other in pairs:
        assert encode("l", one) != encode("l", other), (one, other)
    assert encode("l1", []) != encode("l", [1])
    with pytest.raises(TypeError):
        encode("l", [object()])


def test_unwrap_fails_when_any_bound_value_or_the_master_key_differs() -> None:
    integrity = Integrity(os.urandom(32))
    material = os.urandom(32)
    blob = integrity.wrap("orders", 3, Algorithm.AES_256_GCM, False, material)
    assert integrity.unwrap("orders", 3, Algorithm.AES_256_GCM, False, blob) == material
    for name, version, algorithm, exportable, who in [
        ("orders2", 3, Algorithm.AES_256_GCM, False, integrity),
        ("orders", 2, Algorithm.AES_256_GCM, False, integrity),
        ("orders", 3, Algorithm.CHACHA20_POLY1305, False, integrity),  # the same key length
        ("orders", 3, Algorithm.AES_256_GCM, True, integrity),
        ("orders", 3, Algorithm.AES_256_GCM, False, Integrity(os.urandom(32))),
    ]:
        with pytest.raises(KeyStoreCorrupt, match="fails its integrity check"):
            who.unwrap(name, version, algorithm, exportable, blob)


def test_verify_refuses_any_changed_value_type_or_mac() -> None:
    integrity = Integrity(os.urandom(32))
    rows = [(KEY_ROW, KEY_VALUES), (TOKEN_ROW, TOKEN_VALUES), (LEGACY_TOKEN_ROW, TOKEN_VALUES[:6])]
    for row, values in rows:
        mac = integrity.mac(row, values)
        assert integrity.verify(row, values, mac)
        for i, value in enumerate(values):
            for changed in [None, 2, "2", b"2", 2.5, str(value)]:
                if changed == value and type(changed) is type(value):
                    continue
                altered = (*values[:i], changed, *values[i + 1 :])
                assert not integrity.verify(row, altered, mac), (i, changed)
        other = KEY_ROW if row is not KEY_ROW else TOKEN_ROW
        for bad in [mac[:-1], mac + b"\x00", b"", None, mac.hex(), bytes(32)]:
            assert not integrity.verify(row, values, bad)
        assert not integrity.verify(other, values, mac)
        if row is TOKEN_ROW:  # the old layout's MAC of the same first six columns is another
            assert not integrity.verify(LEGACY_TOKEN_ROW, values[:6], mac)
        assert not Integrity(os.urandom(32)).verify(row, values, mac)
        assert not integrity.verify(row, (*values, None), mac)
        assert not integrity.verify(row, (*values[:-1], object()), mac)


# -- a store refuses rows changed without the master key


@pytest.fixture
def master_key() -> bytes:
    return os.urandom(32)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "keystore.db"


@pytest.fixture
def store(db_path: Path, master_key: bytes) -> Iterator[SQLiteKeyStore]:
    s = SQLiteKeyStore(db_path, master_key)
    s.create_key("sealed", Algorithm.AES_256_GCM)  # not exportable
    s.rotate_key("sealed")
    s.rotate_key("sealed")
    s.set_min_decryption_version("sealed", 3)
    s.create_key("other", Algorithm.AES_256_GCM, exportable=True)
    yield s
    s.close()


def attacker(path: Path, sql: str, *args: object) -> None:
    """What the report's attacker did: sqlite3 on the file, no master key."""
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(sql, args)


Reopen = Callable[[SQLiteKeyStore], SQLiteKeyStore]


@pytest.fixture(params=["open store", "reopened"])
def after(request: pytest.FixtureRequest, db_path: Path, master_key: bytes) -> Iterator[Reopen]:
    """The store as it sees the file after the attack: the same instance, or a new one."""
    opened: list[SQLiteKeyStore] = []

    def view(store: SQLiteKeyStore) -> SQLiteKeyStore:
        if request.param == "open store":
            return store
        opened.append(SQLiteKeyStore(db_path, master_key))
        return opened[-1]

    yield view
    for s in opened:
        s.close()


KEY_ATTACKS = {
    "exportable": "UPDATE keys SET exportable = 1 WHERE name = 'sealed'",
    "algorithm": "UPDATE keys SET algorithm = 'chacha20-poly1305' WHERE name = 'sealed'",
    "min_decryption_version": "UPDATE keys SET min_decryption_version = 1 WHERE name = 'sealed'",
    "mac of another key": "UPDATE keys SET mac = (SELECT mac FROM keys WHERE name = 'other')"
    " WHERE name = 'sealed'",
}


@pytest.mark.parametrize("attack", KEY_ATTACKS)
def test_a_key_whose_row_was_changed_is_refused_and_logged_once(
    store: SQLiteKeyStore,
    db_path: Path,
    after: Reopen,
    attack: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    material = store.key_material("sealed", 3)  # cached before the attack: still not served
    other = store.key_material("other", 1)
    attacker(db_path, KEY_ATTACKS[attack])
    with closing(sqlite3.connect(db_path)) as db:
        tampered_mac = db.execute("SELECT mac FROM keys WHERE name = 'sealed'").fetchone()
    with caplog.at_level(logging.ERROR, logger="sealflow.keystore"):
        seen = after(store)
        for _ in range(3):
            with pytest.raises(KeyStoreCorrupt, match="'sealed' fails its integrity check"):
                seen.get_key("sealed")
            with pytest.raises(KeyStoreCorrupt):
                seen.key_material("sealed", 3)
            with pytest.raises(KeyStoreCorrupt):
                export_material(seen, "sealed", 3)
            assert [k.name for k in seen.list_keys()] == ["other"]
            # Other keys keep working.
            assert seen.key_material("other", 1) == other
            store.create_token(["admin"])  # another write: the next call reloads every row
    # A refused row is never signed again, and nothing is added to it.
    with pytest.raises(KeyStoreCorrupt):
        seen.rotate_key("sealed")
    for version, allow_lowering in [(3, False), (1, True)]:
        with pytest.raises(KeyStoreCorrupt):
            seen.set_min_decryption_version("sealed", version, allow_lowering)
    with closing(sqlite3.connect(db_path)) as db:
        count = db.execute("SELECT count(*) FROM key_versions WHERE name = 'sealed'").fetchone()
        mac = db.execute("SELECT mac FROM keys WHERE name = 'sealed'").fetchone()
    assert count == (3,)
    assert mac == tampered_mac
    refused = [r for r in caplog.records if "'sealed'" in r.getMessage()]
    assert len(refused) == 1
    assert material.hex() not in caplog.text


def test_a_wrapped_blob_moved_to_another_key_does_not_unwrap_there(
    db_path: Path, master_key: bytes
) -> None:
    """The AAD on its own: the keys' rows are untouched and valid; only the blob moved."""
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        store.create_key("a", Algorithm.AES_256_GCM)
        store.create_key("b", Algorithm.CHACHA20_POLY1305, exportable=True)
        b = store.key_material("b", 1)
    attacker(
        db_path,
        "UPDATE key_versions SET wrapped = (SELECT wrapped FROM key_versions WHERE name = 'b')"
        " WHERE name = 'a'",
    )
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        with pytest.raises(KeyStoreCorrupt, match="'a' version 1 fails its integrity check"):
            store.key_material("a", 1)
        assert store.key_material("b", 1) == b


INSERT_ROW = (
    "INSERT INTO tokens (id, digest, scopes, label, created_at, revoked_at, mac)"
    " VALUES ('tok_00000000000000aa', ?, 'admin encrypt:* decrypt:*', 'x', 0, NULL, {mac})"
)


def chosen_token(db_path: Path, mac: str) -> str:
    """A token row for a secret of the attacker's choosing: the SHA-256 of it, all scopes."""
    secret = secrets.token_urlsafe(32)
    attacker(db_path, INSERT_ROW.format(mac=mac), hashlib.sha256(secret.encode()).digest())
    return secret


@pytest.mark.parametrize(
    "mac",
    ["x''", "randomblob(32)", "(SELECT mac FROM tokens LIMIT 1)"],
    ids=["empty", "random", "copied"],
)
def test_an_inserted_token_row_is_no_token(
    store: SQLiteKeyStore,
    db_path: Path,
    after: Reopen,
    mac: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    info, real = store.create_token(["decrypt:other"])
    with caplog.at_level(logging.ERROR, logger="sealflow.keystore"):
        secret = chosen_token(db_path, mac)
        seen = after(store)
        assert seen.find_token(secret) is None
        assert seen.find_token(secret) is None
        assert [t.id for t in seen.list_tokens()] == [info.id]
        assert seen.find_token(real) == info
    assert len([r for r in caplog.records if "tok_00000000000000aa" in r.getMessage()]) == 1
    assert secret not in caplog.text


TOKEN_ATTACKS = {
    "scopes": "UPDATE tokens SET scopes = 'admin encrypt:* decrypt:*' WHERE id = ?",
    "digest": "UPDATE tokens SET digest = ? WHERE id = ?",
    "revocation undone": "UPDATE tokens SET revoked_at = NULL WHERE id = ?",
    "expiry removed": "UPDATE tokens SET expire_at = NULL WHERE id = ?",
    "expiry extended": "UPDATE tokens SET expire_at = expire_at + 86400 WHERE id = ?",
    "uses given back": "UPDATE tokens SET uses = 0 WHERE id = ?",
    "use limit lifted": "UPDATE tokens SET num_uses = 0 WHERE id = ?",
    "max lifted": "UPDATE tokens SET explicit_max_ttl = 0 WHERE id = ?",
    "made renewable": "UPDATE tokens SET renewable = 1 WHERE id = ?",
    "parent dropped": "UPDATE tokens SET parent = '', orphan = 1 WHERE id = ?",
}


@pytest.mark.parametrize("attack", TOKEN_ATTACKS)
def test_a_token_whose_row_was_changed_is_no_token(
    store: SQLiteKeyStore, db_path: Path, after: Reopen, attack: str
) -> None:
    parent, _ = store.create_token(["admin", "decrypt:*"])  # a child needs a live parent
    info, secret = store.create_token(
        ["decrypt:other"],
        label="app",
        ttl=3600,
        explicit_max_ttl=7200,
        renewable=attack != "made renewable",
        num_uses=5,
        parent=parent.id,
        orphan=False,
    )
    if attack == "uses given back":
        info = store.use_token(info.id)
    if attack == "revocation undone":
        store.revoke_token(info.id)
    assert store.find_token(secret) == (None if attack == "revocation undone" else info)
    args: tuple[object, ...] = (info.id,)
    if attack == "digest":
        secret = secrets.token_urlsafe(32)
        args = (hashlib.sha256(secret.encode()).digest(), info.id)
    attacker(db_path, TOKEN_ATTACKS[attack], *args)
    seen = after(store)
    assert seen.find_token(secret) is None
    assert seen.list_tokens() == [parent]  # only the untouched one
    with pytest.raises(KeyStoreCorrupt, match="left as it is"):
        seen.revoke_token(info.id)  # not signed again by a revocation either


def test_a_key_with_a_deleted_row_is_not_found(store: SQLiteKeyStore, db_path: Path) -> None:
    """What a MAC cannot do: tell a deleted row from one never written (docs/SERVICE.md)."""
    attacker(db_path, "DELETE FROM keys WHERE name = 'other'")
    with pytest.raises(KeyNotFound):
        store.get_key("other")
