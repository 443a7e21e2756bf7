"""One ``store`` fixture over every keystore implementation: SQLite and a real PostgreSQL; and
a SoftHSM2 ``token`` of a test's own (``softhsm``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sealflow.service.keystore import KeyStore, PostgresKeyStore, SQLiteKeyStore
from tests.postgres import Cluster

from .softhsm import Token, make_token

BACKENDS = ["sqlite", "postgresql"]


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
