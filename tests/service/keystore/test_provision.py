"""The first start (``prepare``): a keystore made whole only where there is no file, private
files, and warnings about secrets that group or others may open."""

from __future__ import annotations

import base64
import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from sealflow.service.config import Settings
from sealflow.service.keystore import ROOT_SCOPES, KeyStoreCorrupt, open_store, prepare


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data")


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    yield
    os.umask(old)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.usefixtures("permissive_umask")
def test_a_first_start_makes_a_whole_private_keystore(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        token = prepare(settings)
    assert token is not None
    assert warnings(caplog) == []
    data = settings.data_dir
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert sorted(p.name for p in data.iterdir()) == ["keystore.db", "master.key"]
    for name in ["keystore.db", "master.key"]:
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
    with closing(open_store(settings)) as store:
        assert [k.name for k in store.list_keys()] == ["default"]
        root = store.find_token(token)
        assert root is not None
        assert root.scopes == tuple(ROOT_SCOPES)
    assert prepare(settings) is None  # later starts print nothing


def test_an_empty_keystore_file_stops_the_start_and_is_left_empty(settings: Settings) -> None:
    prepare(settings)
    keystore = settings.keystore_path
    keystore.write_bytes(b"")  # `: > keystore.db`, the master key still there
    with pytest.raises(KeyStoreCorrupt, match="empty file"):
        prepare(settings)
    assert keystore.read_bytes() == b""


@pytest.mark.parametrize("change", ["deleted", "changed"])
def test_a_keystore_whose_tokens_are_gone_gets_no_new_root_token(
    settings: Settings, caplog: pytest.LogCaptureFixture, change: str
) -> None:
    """Deleting or spoiling token rows must not make the next start hand out a root token."""
    prepare(settings)
    with closing(sqlite3.connect(settings.keystore_path)) as db, db:
        if change == "deleted":
            db.execute("DELETE FROM tokens")
        else:
            db.execute("UPDATE tokens SET scopes = 'admin'")
    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        assert prepare(settings) is None
    assert any("no usable token" in w for w in warnings(caplog))
    with closing(open_store(settings)) as store:
        assert store.list_tokens() == []


def test_a_given_root_token_is_installed_not_returned(settings: Settings) -> None:
    given = "g" * 50
    settings = Settings(data_dir=settings.data_dir, root_token=given)
    assert prepare(settings) is None
    with closing(open_store(settings)) as store:
        assert store.find_token(given) is not None


def test_secrets_open_to_group_or_others_are_warned_about_once_each(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    prepare(settings)
    settings.data_dir.chmod(0o755)
    settings.master_key_path.chmod(0o640)
    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        prepare(settings)
    said = warnings(caplog)
    assert len(said) == 2
    assert f"data directory {settings.data_dir} is open to group or others (mode 0755)" in said[0]
    assert f"master key file {settings.master_key_path}" in said[1]
    assert "(mode 0640); chmod 600" in said[1]

    # A master key from the environment has no file to warn about.
    caplog.clear()
    key = base64.b64decode(settings.master_key_path.read_text())
    from_env = Settings(data_dir=settings.data_dir, master_key=base64.b64encode(key).decode())
    settings.data_dir.chmod(0o700)
    with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
        prepare(from_env)
    assert warnings(caplog) == []
