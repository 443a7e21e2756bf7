"""A keystore made before master-key providers (no sealed key record) upgrades in place on
its first start: the master key becomes its KEK and its stable secret, sealed by the file
provider into one new metadata row; no other row is written, and old envelopes decrypt."""

from __future__ import annotations

import base64
import os
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import SecretStr

from sealflow.service.audit import audit_key
from sealflow.service.config import Settings
from sealflow.service.keystore import KeyStoreUnavailable, keystore_keys, open_store, prepare
from tests.service.conftest import start_server

SECRET = b"an envelope made before providers"
MASTER = os.urandom(32)
MASTER_B64 = base64.b64encode(MASTER).decode()

Query = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]


def _sqlite(path: Path) -> Query:
    def query(sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(path, isolation_level=None)) as db:
            return [tuple(row) for row in db.execute(sql.replace("%s", "?"), args).fetchall()]

    return query


def _postgres(url: str) -> Query:
    def query(sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        sql = sql.replace("meta", "sealflow_meta").replace("key_versions", "sealflow_key_versions")
        with psycopg.connect(url, autocommit=True) as db:
            cur = db.execute(sql, args)
            return (
                [
                    tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                    for row in cur.fetchall()
                ]
                if cur.description
                else []
            )

    return query


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_keystore_made_before_providers_upgrades_in_place(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings: dict[str, object] = {"master_key": MASTER_B64}
    data = tmp_path / "data"
    if backend == "postgresql":
        url = request.getfixturevalue("pg_url")
        settings["keystore_url"] = url
        query = _postgres(url)
    else:
        query = _sqlite(data / "keystore.db")
    first = start_server(data, **settings)
    try:
        with first.client() as client:
            envelope = client.post("/v1/keys/default/encrypt", content=SECRET).content
    finally:
        first.stop()
    # What this sealflow's predecessor left: the same rows, without the sealed key record.
    query("DELETE FROM meta WHERE key = %s", ("master_seal",))
    versions = query("SELECT name, version, wrapped FROM key_versions ORDER BY name, version", ())
    meta = query("SELECT key, value FROM meta ORDER BY key", ())
    assert [k for k, _ in meta] == ["check", "schema_version"] or "master_seal" not in dict(meta)

    again = start_server(data, **settings)
    try:
        again.token = first.token
        with again.client() as client:
            assert client.post("/v1/decrypt", content=envelope).content == SECRET
    finally:
        again.stop()
    # No row rewritten: only the record is new.
    assert (
        query("SELECT name, version, wrapped FROM key_versions ORDER BY name, version", ())
        == versions
    )
    after: dict[Any, Any] = dict(query("SELECT key, value FROM meta ORDER BY key", ()))
    record = after.pop("master_seal")
    assert after == dict(meta)
    assert b'"provider":"file"' in bytes(record)
    # The KEK and the stable secret are the old master key: old audit trails still verify.
    opened = Settings(data_dir=data, **settings)  # type: ignore[arg-type]
    keys = keystore_keys(opened)
    assert keys.kek == MASTER
    assert keys.secret == MASTER
    assert audit_key(keys.secret) == audit_key(MASTER)


def test_a_new_file_keystore_is_sealed_by_its_master_key(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", master_key=MASTER_B64)
    srv.stop()
    keys = keystore_keys(Settings(data_dir=tmp_path / "data", master_key=SecretStr(MASTER_B64)))
    assert keys.kek == MASTER
    assert keys.secret == MASTER
    # Another master key does not unseal it: one line, naming the provider.
    other_key = SecretStr(base64.b64encode(os.urandom(32)).decode())
    other = Settings(data_dir=tmp_path / "data", master_key=other_key)

    with pytest.raises(KeyStoreUnavailable, match="file master key does not unwrap"):
        keystore_keys(other)


def test_env_is_the_variable_alone(tmp_path: Path) -> None:
    """The env provider opens a keystore the file provider sealed (the same key), and without
    SEALFLOW_MASTER_KEY it stops, where file would read (or in dev mode make) a key file."""
    data = tmp_path / "data"
    assert prepare(Settings(data_dir=data, master_key=SecretStr(MASTER_B64))) is not None
    by_env = Settings(data_dir=data, master_key_provider="env", master_key=SecretStr(MASTER_B64))
    with closing(open_store(by_env)) as store:
        assert [k.name for k in store.list_keys()] == ["default"]
    (data / "master.key").write_text(MASTER_B64 + "\n")
    alone = Settings(data_dir=data, master_key_provider="env")
    with pytest.raises(KeyStoreUnavailable, match="needs SEALFLOW_MASTER_KEY"):
        open_store(alone)
    with pytest.raises(KeyStoreUnavailable, match="needs SEALFLOW_MASTER_KEY"):
        prepare(Settings(data_dir=tmp_path / "new", master_key_provider="env"))
    assert not (tmp_path / "new" / "master.key").exists()
