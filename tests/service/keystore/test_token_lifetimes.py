"""Token lifetimes in the keystore (issue 26), on SQLite and a real PostgreSQL: a TTL and its
expiry, renewal capped at the maximum with Vault's words, uses counted exactly by two store
instances at once, a renewal by one instance seen by another, expired rows swept, and a keystore
made before lifetimes opened with its tokens working (their rows MAC'd again, a forged one never).
"""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sealflow.service.keystore import (
    SWEEP_AFTER,
    InvalidRequest,
    KeyStore,
    Lifetimes,
    NotRenewable,
    PostgresKeyStore,
    SQLiteKeyStore,
    TokenExpired,
    TokenNotFound,
)
from sealflow.service.keystore._integrity import encode

from .files import (
    PG_UNDO_MIGRATION_6,
    PG_UNDO_MIGRATION_7,
    PG_UNDO_MIGRATION_8,
    PG_UNDO_MIGRATION_9,
    PG_UNDO_MIGRATION_10,
    PG_UNDO_MIGRATION_11,
)
from .test_postgres import eventually

OpenStore = Callable[[bytes], KeyStore]


def test_a_token_with_a_ttl_expires_and_is_still_found_as_expired(store: KeyStore) -> None:
    info, secret = store.create_token(["encrypt:k"], "app", ttl=2, explicit_max_ttl=60)
    assert (info.ttl, info.explicit_max_ttl, info.renewable) == (2, 60, True)
    assert info.expire_time == pytest.approx(info.created_at + 2)
    found = store.find_token(secret)
    assert found == info
    assert not found.expired(time.time())
    time.sleep(2.2)
    later = store.find_token(secret)
    assert later is not None  # known, and refused by its callers as expired, not as unknown
    assert later.expired(time.time())
    assert later.ttl_left(time.time()) == 0
    with pytest.raises(TokenExpired):
        store.renew_token(info.id)


def test_defaults_and_the_store_maximum(store: KeyStore) -> None:
    lasting, _ = store.create_token(["admin"])
    assert (lasting.expire_time, lasting.ttl, lasting.renewable) == (None, 0, False)
    store.lifetimes = Lifetimes(default_ttl=600, max_ttl=3600)
    default, _ = store.create_token(["admin"])
    assert default.ttl == 600
    assert store.creation_warnings(7200) == (
        'TTL of "2h" exceeded the effective max_ttl of "1h"; TTL value is capped accordingly',
    )
    capped, _ = store.create_token(["admin"], ttl=7200)
    assert capped.ttl == 3600
    explicit, _ = store.create_token(["admin"], explicit_max_ttl=90)
    assert explicit.ttl == 90  # a maximum and no TTL: the maximum, without a warning
    root, _ = store.create_token(["admin"], expires=False)  # the first-start root token's way
    assert (root.expire_time, root.renewable) == (None, False)
    for bad in ({"ttl": -1}, {"explicit_max_ttl": 1.5}, {"num_uses": -2}, {"parent": "x"}):
        with pytest.raises(InvalidRequest):
            store.create_token(["admin"], **bad)


def test_renewal_is_capped_at_the_maximum_with_vaults_warning(store: KeyStore) -> None:
    info, secret = store.create_token(["admin"], ttl=5, explicit_max_ttl=20)
    renewed = store.renew_token(info.id, 3600)
    assert renewed.token.expire_time == pytest.approx(info.created_at + 20, abs=1.01)
    (warning,) = renewed.warnings
    assert warning.startswith('TTL of "1h" exceeded the effective max_ttl of "')
    assert warning.endswith('s"; TTL value is capped accordingly')
    plain = store.renew_token(info.id, 3)  # within the maximum: no warning, 3 s from now
    assert plain.warnings == ()
    assert plain.token.expire_time == pytest.approx(time.time() + 3, abs=1.0)
    again = store.renew_token(info.id)  # no increment: the token's ttl
    assert again.token.expire_time == pytest.approx(time.time() + 5, abs=1.0)
    assert store.find_token(secret) == again.token
    store.lifetimes = Lifetimes(max_ttl=10)  # the store's maximum caps too, from creation
    last = store.renew_token(info.id, 15)
    assert last.token.expire_time is not None
    assert last.token.expire_time <= info.created_at + 10 + 1e-6
    assert "exceeded the effective max_ttl" in last.warnings[0]
    with pytest.raises(InvalidRequest):
        store.renew_token(info.id, -1)


def test_what_cannot_be_renewed(store: KeyStore) -> None:
    fixed, _ = store.create_token(["admin"], ttl=60, renewable=False)
    lasting, _ = store.create_token(["admin"])
    for token in (fixed, lasting):
        with pytest.raises(NotRenewable, match=r"^lease is not renewable$"):
            store.renew_token(token.id)
    store.revoke_token(fixed.id)
    with pytest.raises(TokenNotFound):
        store.renew_token(fixed.id)
    with pytest.raises(TokenNotFound):
        store.renew_token("tok_0000000000000000")


def test_a_renewal_by_another_instance_is_seen_without_a_restart(
    open_store: OpenStore, master_key: bytes
) -> None:
    first, second = open_store(master_key), open_store(master_key)
    info, secret = first.create_token(["admin"], ttl=3, explicit_max_ttl=600)
    eventually(lambda: second.find_token(secret) == info, within=10)  # cached, as created
    renewed = first.renew_token(info.id, 300).token
    time.sleep(max(info.created_at + 3.2 - time.time(), 0))  # past the expiry second cached
    # SQLite: the next read; PostgreSQL: the renewal's notification. No read per request.
    seen = second.find_token(secret)
    assert seen == renewed
    assert seen is not None
    assert not seen.expired(time.time())


def test_uses_are_counted_exactly_by_two_instances_at_once(
    open_store: OpenStore, master_key: bytes
) -> None:
    first, second = open_store(master_key), open_store(master_key)
    info, _secret = first.create_token(["admin"], num_uses=7)
    granted: list[int] = []
    refused: list[int] = []

    def user(store: KeyStore) -> None:
        for _ in range(10):
            try:
                granted.append(store.use_token(info.id).uses)
            except TokenExpired:
                refused.append(1)

    threads = [threading.Thread(target=user, args=(s,)) for s in (first, second) * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(granted) == [1, 2, 3, 4, 5, 6, 7]
    assert len(refused) == 40 - 7
    last = first.get_token(info.id)
    assert (last.uses, last.num_uses) == (7, 7)
    assert last.expired(time.time())  # the last use ended it: swept like an expired token
    unlimited, _ = first.create_token(["admin"])
    assert first.use_token(unlimited.id) == unlimited  # nothing counted, nothing written
    first.revoke_token(unlimited.id)
    limited, _ = first.create_token(["admin"], num_uses=1)
    first.revoke_token(limited.id)
    with pytest.raises(TokenNotFound):
        second.use_token(limited.id)


def test_expired_rows_are_swept_after_a_day(store: KeyStore) -> None:
    short, _ = store.create_token(["admin"], ttl=1)
    kept, _ = store.create_token(["admin"], ttl=3600)
    revoked, _ = store.create_token(["admin"])
    store.revoke_token(revoked.id)
    assert store.sweep_tokens() == 0  # expired, not for a day yet: listed still
    later = time.time() + SWEEP_AFTER + 10
    assert store.sweep_tokens(now=later) == 1
    ids = [t.id for t in store.list_tokens()]
    assert short.id not in ids
    assert kept.id in ids
    assert revoked.id in ids
    with pytest.raises(TokenNotFound):
        store.get_token(short.id)


# -- a keystore made before lifetimes


def legacy_mac(master_key: bytes, row: tuple[object, ...]) -> bytes:
    """The MAC the release before lifetimes wrote, computed here independently."""
    info = b"sealflow-keystore-v2 MAC key for token rows"
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(master_key)
    return hmac.digest(key, encode("sealflow-keystore-token-row", row), "sha256")


# What ``make_legacy`` runs, in each store's table names.
SQLITE_SQL = {
    "rows": "SELECT id, digest, scopes, label, created_at, revoked_at FROM tokens",
    "mac": "UPDATE tokens SET mac = %s WHERE id = %s",
    "forge": "UPDATE tokens SET scopes = 'admin encrypt:*' WHERE label = 'forged'",
    "note": "DELETE FROM meta WHERE key = 'token_lifetimes'",
}
PG_SQL = {
    "rows": "SELECT id, digest, scopes, label, created_at, revoked_at FROM sealflow_tokens",
    "mac": "UPDATE sealflow_tokens SET mac = %s WHERE id = %s",
    "forge": "UPDATE sealflow_tokens SET scopes = 'admin encrypt:*' WHERE label = 'forged'",
    "note": "DELETE FROM sealflow_meta WHERE key = 'token_lifetimes'",
}


def make_legacy(
    execute: Callable[..., list[tuple[object, ...]]], master_key: bytes, sql: dict[str, str]
) -> None:
    """Every token row given the old MAC over its first six columns; then the forged token's
    scopes widened without the master key (its row must stay refused); the upgrade's note
    removed."""
    for row in execute(sql["rows"]):
        execute(sql["mac"], legacy_mac(master_key, row), row[0])
    execute(sql["forge"])
    execute(sql["note"])


def check_upgraded(store: KeyStore, secrets: dict[str, str], forged_mac: bytes) -> None:
    app = store.find_token(secrets["app"])
    assert app is not None
    assert app.scopes == ("decrypt:orders",)
    assert (app.expire_time, app.num_uses, app.parent, app.orphan) == (None, 0, "", True)
    assert not app.expired(time.time())
    assert store.find_token(secrets["gone"]) is None  # revoked stays revoked
    assert store.find_token(secrets["forged"]) is None  # refused, not re-signed
    assert sorted(t.label for t in store.list_tokens()) == ["app", "gone"]
    renewed, _ = store.create_token(["admin"], ttl=60)
    assert store.get_token(renewed.id).expire_time is not None


def legacy_tokens(store: KeyStore) -> dict[str, str]:
    secrets = {}
    for label in ("app", "gone", "forged"):
        info, secrets[label] = store.create_token(["decrypt:orders"], label)
        if label == "gone":
            store.revoke_token(info.id)
    return secrets


def test_an_sqlite_keystore_from_before_lifetimes_opens_with_its_tokens(
    db_path: Path, master_key: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        secrets = legacy_tokens(store)
    with closing(sqlite3.connect(db_path, isolation_level=None)) as db:

        def execute(sql: str, *args: object) -> list[tuple[object, ...]]:
            return db.execute(sql.replace("%s", "?"), args).fetchall()

        for column in ("ttl", "expire_at", "explicit_max_ttl", "renewable", "num_uses", "uses"):
            db.execute(f"ALTER TABLE tokens DROP COLUMN {column}")
        db.execute("ALTER TABLE tokens DROP COLUMN parent")
        db.execute("ALTER TABLE tokens DROP COLUMN orphan")
        make_legacy(execute, master_key, SQLITE_SQL)
        (forged_mac,) = db.execute("SELECT mac FROM tokens WHERE label = 'forged'").fetchone()
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        check_upgraded(store, secrets, forged_mac)
    assert "2 token rows MAC'd again" in caplog.text
    assert "1 rows that fail their check left refused" in caplog.text
    with closing(sqlite3.connect(db_path)) as db:
        (after,) = db.execute("SELECT mac FROM tokens WHERE label = 'forged'").fetchone()
    assert after == forged_mac
    with closing(SQLiteKeyStore(db_path, master_key)) as store:  # once only
        assert store.find_token(secrets["app"]) is not None


def test_a_postgresql_keystore_from_before_lifetimes_opens_with_its_tokens(
    pg_url: str, master_key: bytes
) -> None:
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as store:
        secrets = legacy_tokens(store)
    with psycopg.connect(pg_url, autocommit=True) as conn:

        def execute(sql: str, *args: object) -> list[tuple[object, ...]]:
            cur = conn.execute(sql, args)
            return cur.fetchall() if cur.description else []

        conn.execute(PG_UNDO_MIGRATION_11)
        conn.execute(PG_UNDO_MIGRATION_10)
        conn.execute(PG_UNDO_MIGRATION_9)
        conn.execute(PG_UNDO_MIGRATION_8)

        conn.execute(PG_UNDO_MIGRATION_7)
        conn.execute(PG_UNDO_MIGRATION_6)
        conn.execute("DELETE FROM sealflow_migrations WHERE version > 5")
        make_legacy(execute, master_key, PG_SQL)
        row = conn.execute("SELECT mac FROM sealflow_tokens WHERE label = 'forged'").fetchone()
        assert row is not None
        forged_mac = row[0]
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as store:
        check_upgraded(store, secrets, forged_mac)
    with psycopg.connect(pg_url) as conn:
        after = conn.execute("SELECT mac FROM sealflow_tokens WHERE label = 'forged'").fetchone()
    assert after == (forged_mac,)


def test_digest_lookup_is_by_sha256(store: KeyStore) -> None:
    info, secret = store.create_token(["admin"], ttl=60)
    assert hashlib.sha256(secret.encode()).digest()  # what the row stores, never the secret
    assert store.find_token(secret + "x") is None
    assert store.find_token(secret) == info
