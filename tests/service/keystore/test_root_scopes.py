"""The root token of a keystore made before ``export:<glob>`` (or before ``hmac``, ``sign`` and
``verify``) keeps every scope: the first open by this release gives it the scopes added since,
once, and nothing else changes (SQLite and PostgreSQL).

A keystore "made before" is one whose root token has the old root scopes and whose meta table
lacks the note ``_root_scopes`` leaves: exactly what an earlier release's first start wrote.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from sealflow.service.keystore import KeyStore, SQLiteKeyStore
from sealflow.service.keystore._root_scopes import GRANTS, ROOT_SCOPES

from .files import build_v1

OpenStore = Callable[[bytes], KeyStore]
ROOT = tuple(ROOT_SCOPES)
OLD_ROOT_SCOPES = GRANTS[0][1]  # before export:<glob>
EXPORT_ROOT_SCOPES = GRANTS[1][1]  # before hmac, sign and verify


def run_sql(backend: str, where: Path | str, sql: str, *args: object) -> None:
    """A statement straight on the store's database, as whoever holds its file could; ``{meta}``
    and ``{tokens}`` name the tables in either store."""
    if backend == "sqlite":
        with closing(sqlite3.connect(where)) as lite, lite:
            lite.execute(sql.format(meta="meta", tokens="tokens"), args)
    else:
        with psycopg.connect(str(where), autocommit=True) as pg:
            statement = sql.format(meta="sealflow_meta", tokens="sealflow_tokens")
            pg.execute(statement.replace("?", "%s"), args)


@pytest.fixture
def place(backend: str, store_url: str, db_path: Path) -> Path | str:
    """Where the test's keystore is: the SQLite file or the PostgreSQL URL."""
    return db_path if backend == "sqlite" else store_url


def as_made_before(backend: str, place: Path | str) -> None:
    """The keystore as an earlier release left it: no note that the grants ran."""
    for note, _, _ in GRANTS:
        run_sql(backend, place, "DELETE FROM {meta} WHERE key = ?", note)


def test_an_old_root_token_gains_export_once(
    open_store: OpenStore,
    master_key: bytes,
    backend: str,
    place: Path | str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = open_store(master_key)
    old = " ".join(OLD_ROOT_SCOPES).split()
    root, root_secret = first.create_token(old, label="root")
    _ops, ops_secret = first.create_token(old, label="ops")  # the same scopes, not the root
    _narrow, narrow_secret = first.create_token(["admin"], label="root")
    gone, _ = first.create_token(old, label="root")
    first.revoke_token(gone.id)
    first.close()
    as_made_before(backend, place)

    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        store = open_store(master_key)
    found = store.find_token(root_secret)
    assert found is not None
    assert found.scopes == ROOT
    assert [r.getMessage() for r in caplog.records] == [
        f"root token {root.id} given export:* (the root token has every scope)",
        f"root token {root.id} given hmac:* sign:* verify:* (the root token has every scope)",
    ]
    for secret, scopes in ((ops_secret, OLD_ROOT_SCOPES), (narrow_secret, ("admin",))):
        other = store.find_token(secret)
        assert other is not None
        assert other.scopes == scopes
    assert {t.id: t.scopes for t in store.list_tokens()}[gone.id] == OLD_ROOT_SCOPES

    # Once: a token made since with the old scopes and label keeps what it was made with.
    _later, later_secret = store.create_token(old, label="root")
    store.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        again = open_store(master_key)
    assert caplog.records == []
    kept = again.find_token(later_secret)
    assert kept is not None
    assert kept.scopes == OLD_ROOT_SCOPES
    still = again.find_token(root_secret)
    assert still is not None
    assert still.scopes == ROOT


def test_a_root_token_with_export_gains_hmac_sign_and_verify_once(
    open_store: OpenStore,
    master_key: bytes,
    backend: str,
    place: Path | str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A keystore made by the release before hmac/sign/verify: its export grant ran, this one
    did not; only the second runs, for the root token only, once."""
    first = open_store(master_key)
    root, root_secret = first.create_token(list(EXPORT_ROOT_SCOPES), label="root")
    _ops, ops_secret = first.create_token(list(EXPORT_ROOT_SCOPES), label="ops")
    first.close()
    run_sql(backend, place, "DELETE FROM {meta} WHERE key = ?", GRANTS[1][0])

    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        store = open_store(master_key)
    assert [r.getMessage() for r in caplog.records] == [
        f"root token {root.id} given hmac:* sign:* verify:* (the root token has every scope)"
    ]
    found, ops = store.find_token(root_secret), store.find_token(ops_secret)
    assert found is not None
    assert ops is not None
    assert (found.scopes, ops.scopes) == (ROOT, EXPORT_ROOT_SCOPES)
    store.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        open_store(master_key)
    assert caplog.records == []


def test_a_root_row_that_fails_its_check_is_not_re_signed(
    open_store: OpenStore, master_key: bytes, backend: str, place: Path | str
) -> None:
    first = open_store(master_key)
    root, secret = first.create_token(list(OLD_ROOT_SCOPES), label="root")
    first.close()
    as_made_before(backend, place)
    run_sql(backend, place, "UPDATE {tokens} SET created_at = 1 WHERE id = ?", root.id)

    store = open_store(master_key)
    assert store.find_token(secret) is None  # refused before, refused after
    assert all(t.id != root.id for t in store.list_tokens())


def test_a_schema_1_keystore_root_token_gains_export(db_path: Path, master_key: bytes) -> None:
    made = build_v1(db_path, master_key)
    with closing(SQLiteKeyStore(db_path, master_key)) as store:
        root = store.find_token(made.secrets["root"])
        assert root is not None
        assert root.scopes == ROOT
        app = store.find_token(made.secrets["app"])
        assert app is not None
        assert app.scopes == ("encrypt:orders", "decrypt:orders")


def test_a_new_keystore_root_token_has_every_scope_and_no_grant_runs(
    open_store: OpenStore, master_key: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        store = open_store(master_key)
        store.create_token(list(ROOT), label="root")
        store.close()
        open_store(master_key)
    assert caplog.records == []
