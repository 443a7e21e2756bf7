"""One ``store`` fixture over every keystore implementation: SQLite and a real PostgreSQL; SQL
on a keystore as stored (``stored``); a keystore made before master-key providers
(``pre_provider``); and a SoftHSM2 ``token`` of a test's own (``softhsm``)."""

from __future__ import annotations

import base64
import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sealflow.service.keystore import KeyStore, PostgresKeyStore, SQLiteKeyStore
from tests.postgres import Cluster
from tests.service.conftest import Server, start_server

from .restart import seal
from .softhsm import Token, make_token

BACKENDS = ["sqlite", "postgresql"]

Query = Callable[..., list[tuple[Any, ...]]]


@pytest.fixture
def master_key() -> bytes:
    return os.urandom(32)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "keys.db"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The PostgreSQL database of the test's keystore ("" for SQLite: ``db_path``)."""
    if backend != "postgresql":
        return ""
    url: str = request.getfixturevalue("postgres").new_database()
    return url


@pytest.fixture
def open_store(
    backend: str, store_url: str, db_path: Path
) -> Iterator[Callable[[bytes], KeyStore]]:
    """Open (another instance of) one keystore of the test's backend; all closed after.

    Instances share the store: a second one is another process's view of it.
    """
    opened: list[KeyStore] = []
    url = store_url

    def open_(master_key: bytes) -> KeyStore:
        store: KeyStore
        if backend == "sqlite":
            store = SQLiteKeyStore(db_path, master_key)
        else:
            store = PostgresKeyStore(url, master_key)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: Callable[[bytes], KeyStore], master_key: bytes) -> KeyStore:
    return open_store(master_key)


@pytest.fixture
def pg_url(postgres: Cluster) -> str:
    return postgres.new_database()


@pytest.fixture
def token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Token:
    monkeypatch.setenv("SOFTHSM2_CONF", str(tmp_path / "hsm" / "softhsm2.conf"))
    return make_token(tmp_path / "hsm")


def stored(data_dir: Path, settings: Mapping[str, object]) -> Query:
    """SQL on the keystore ``settings`` name as stored (its ``keystore_url``, else the SQLite
    file in ``data_dir``), each statement in its own transaction: written with SQLite's table
    names and ``%s`` parameters; rows come back as tuples, binary values as bytes."""
    url = settings.get("keystore_url")

    def query(sql: str, *args: object) -> list[tuple[Any, ...]]:
        if url is None:
            with closing(sqlite3.connect(data_dir / "keystore.db", isolation_level=None)) as db:
                return [tuple(row) for row in db.execute(sql.replace("%s", "?"), args)]
        sql = re.sub(r"\b(FROM|INTO|UPDATE)\s+(\w+)", r"\1 sealflow_\2", sql)
        with psycopg.connect(str(url), autocommit=True) as pg:
            cur = pg.execute(sql, args or None)
            rows = cur.fetchall() if cur.description else []
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows]

    return query


@dataclass(frozen=True)
class PreProvider:
    """A keystore as sealflow made them before master-key providers, on the test's backend."""

    data_dir: Path
    settings: dict[str, object]  # the file provider's, with the master key
    first: Server  # the server that made it, stopped: its root token
    secret: bytes
    envelope: bytes  # ``secret`` sealed under key default by ``first``
    query: Query  # ``stored`` on it


@pytest.fixture
def pre_provider(tmp_path: Path, store_url: str, master_key: bytes) -> PreProvider:
    """A server's first start under ``master_key`` seals an envelope; the server stopped, the
    sealed key record is deleted: what sealflow's predecessor left, the same rows without it."""
    settings: dict[str, object] = {"master_key": base64.b64encode(master_key).decode()}
    if store_url:
        settings["keystore_url"] = store_url
    data = tmp_path / "data"
    first = start_server(data, **settings)
    try:
        secret = b"an envelope made before providers"
        envelope = seal(first, secret)
    finally:
        first.stop()
    query = stored(data, settings)
    query("DELETE FROM meta WHERE key = %s", "master_seal")
    return PreProvider(data, settings, first, secret, envelope, query)
