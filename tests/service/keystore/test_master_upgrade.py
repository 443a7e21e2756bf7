"""A keystore made before master-key providers (no sealed key record) upgrades in place on
its first start: the master key becomes its KEK and its stable secret, sealed by the file
provider into one new metadata row; no other row is written, and old envelopes decrypt."""

from __future__ import annotations

import base64
import os
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from sealflow.service.audit import audit_key
from sealflow.service.config import Settings
from sealflow.service.keystore import KeyStoreUnavailable, keystore_keys, open_store, prepare
from tests.service.conftest import start_server

from .conftest import PreProvider
from .restart import reopened

MASTER = os.urandom(32)
MASTER_B64 = base64.b64encode(MASTER).decode()


def test_a_keystore_made_before_providers_upgrades_in_place(
    pre_provider: PreProvider, master_key: bytes
) -> None:
    old = pre_provider
    versions = old.query("SELECT name, version, wrapped FROM key_versions ORDER BY name, version")
    meta = old.query("SELECT key, value FROM meta ORDER BY key")
    assert [k for k, _ in meta] == ["check", "schema_version"] or "master_seal" not in dict(meta)

    assert reopened(old.first, old.data_dir, old.envelope, **old.settings) == old.secret
    # No row rewritten: only the record is new.
    assert (
        old.query("SELECT name, version, wrapped FROM key_versions ORDER BY name, version")
        == versions
    )
    after: dict[Any, Any] = dict(old.query("SELECT key, value FROM meta ORDER BY key"))
    record = after.pop("master_seal")
    assert after == dict(meta)
    assert b'"provider":"file"' in bytes(record)
    # The KEK and the stable secret are the old master key: old audit trails still verify.
    opened = Settings(data_dir=old.data_dir, **old.settings)  # type: ignore[arg-type]
    keys = keystore_keys(opened)
    assert keys.kek == master_key
    assert keys.secret == master_key
    assert audit_key(keys.secret) == audit_key(master_key)


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
