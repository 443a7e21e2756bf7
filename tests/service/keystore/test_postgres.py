"""What only the PostgreSQL keystore does: migrations, notifications between processes, the
fallback to polling, an unreachable database, and the first start of a shared keystore."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from sealflow.engine import Algorithm
from sealflow.service.config import Settings
from sealflow.service.keystore import (
    KeyNotFound,
    KeyStoreCorrupt,
    KeyStoreUnavailable,
    PostgresKeyStore,
    _pg_watch,
    open_store,
    prepare,
)
from sealflow.service.keystore._pg_schema import MIGRATIONS
from tests.postgres import Cluster, start_cluster

from .test_keystore import run_together


def eventually(check: Callable[[], bool], within: float = 1.0) -> float:
    """Seconds until ``check()`` held; fails if it did not within ``within`` seconds."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < within, "not within the time allowed"
        time.sleep(0.01)
    return time.monotonic() - start


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def test_every_migration_is_recorded_once_and_reopening_applies_none(
    pg_url: str, master_key: bytes
) -> None:
    with closing(PostgresKeyStore(pg_url, master_key)) as first:
        assert first.created
        first.create_key("orders", Algorithm.AES_256_GCM)
    with closing(PostgresKeyStore(pg_url, master_key)) as second:
        assert not second.created
        assert second.get_key("orders").latest == 1
    applied = rows(pg_url, "SELECT version FROM sealflow_migrations ORDER BY version")
    assert applied == [(n,) for n in range(1, len(MIGRATIONS) + 1)]


def test_a_schema_newer_than_the_code_is_refused_and_left_alone(
    pg_url: str, master_key: bytes
) -> None:
    PostgresKeyStore(pg_url, master_key).close()
    newer = len(MIGRATIONS) + 1
    with psycopg.connect(pg_url) as conn:
        conn.execute("INSERT INTO sealflow_migrations VALUES (%s, 'from the future', 0)", (newer,))
    with pytest.raises(KeyStoreUnavailable, match=f"schema version {newer}, newer"):
        PostgresKeyStore(pg_url, master_key)
    assert rows(pg_url, "SELECT max(version) FROM sealflow_migrations") == [(newer,)]


def test_wrong_master_key_is_refused_and_the_password_never_shown(
    postgres: Cluster, master_key: bytes
) -> None:
    url = postgres.new_database()
    PostgresKeyStore(url, master_key).close()
    with pytest.raises(KeyStoreUnavailable, match="master key") as caught:
        PostgresKeyStore(url, os.urandom(32))
    assert url.rsplit("/", 1)[1] in str(caught.value)
    with_password = url.replace("postgres@", "postgres:hunter2-secret@")
    with pytest.raises(KeyStoreUnavailable, match="master key") as caught:
        PostgresKeyStore(with_password, os.urandom(32))
    assert "hunter2" not in str(caught.value)


def test_stored_rows_hold_neither_material_nor_token_secrets(
    pg_url: str, master_key: bytes
) -> None:
    with closing(PostgresKeyStore(pg_url, master_key)) as store:
        store.create_key("k", Algorithm.AES_256_GCM)
        store.rotate_key("k")
        materials = [store.key_material("k", v) for v in (1, 2)]
        _, secret = store.create_token(["admin"])
    dump = b"".join(
        repr(row).encode()
        for table in ("sealflow_keys", "sealflow_key_versions", "sealflow_tokens", "sealflow_meta")
        for row in rows(pg_url, f"SELECT * FROM {table}")  # noqa: S608  # fixed names
    )
    for material in materials:
        assert material.hex().encode() not in dump
        assert repr(material).encode() not in dump
    assert secret.encode() not in dump


def test_a_tampered_version_is_refused_and_the_others_still_serve(
    pg_url: str, master_key: bytes
) -> None:
    with closing(PostgresKeyStore(pg_url, master_key)) as store:
        store.create_key("orders", Algorithm.AES_256_GCM)
        store.rotate_key("orders")
    with psycopg.connect(pg_url) as conn:
        # Version 2's blob moved onto version 1: it must not unwrap as version 1.
        conn.execute(
            "UPDATE sealflow_key_versions SET wrapped = (SELECT wrapped FROM"
            " sealflow_key_versions WHERE version = 2) WHERE version = 1"
        )
    with closing(PostgresKeyStore(pg_url, master_key)) as store:
        with pytest.raises(KeyStoreCorrupt, match="'orders' version 1 fails"):
            store.key_material("orders", 1)
        assert len(store.key_material("orders", 2)) == 32
        with pytest.raises(KeyNotFound):
            store.key_material("orders", 3)


def test_another_instance_sees_every_change_within_a_second(pg_url: str, master_key: bytes) -> None:
    with (
        closing(PostgresKeyStore(pg_url, master_key)) as writer,
        closing(PostgresKeyStore(pg_url, master_key)) as reader,
    ):
        assert reader.health().invalidation == "notify"
        writer.create_key("orders", Algorithm.AES_256_GCM)
        eventually(lambda: any(k.name == "orders" for k in reader.list_keys()))
        writer.rotate_key("orders")
        eventually(lambda: reader.get_key("orders").latest == 2)
        assert reader.key_material("orders", 2) == writer.key_material("orders", 2)
        writer.set_min_decryption_version("orders", 2)
        eventually(lambda: reader.get_key("orders").min_decryption_version == 2)
        info, secret = writer.create_token(["decrypt:orders*"])
        eventually(lambda: reader.find_token(secret) == info)
        writer.revoke_token(info.id)
        eventually(lambda: reader.find_token(secret) is None)


ROTATE = """
import sys
from sealflow.service.keystore import PostgresKeyStore

print("ready", flush=True)
sys.stdin.readline()
store = PostgresKeyStore(sys.argv[1], bytes.fromhex(sys.argv[2]), watch=False)
for _ in range(25):
    store.rotate_key("shared")
store.close()
"""


def test_processes_rotating_at_once_give_contiguous_versions(
    pg_url: str, master_key: bytes
) -> None:
    with closing(PostgresKeyStore(pg_url, master_key)) as store:
        store.create_key("shared", Algorithm.AES_256_GCM)
        run_together(ROTATE, pg_url, master_key.hex(), processes=4)
        eventually(lambda: store.get_key("shared").latest == 101)
        assert [v.version for v in store.get_key("shared").versions] == list(range(1, 102))
        assert len({store.key_material("shared", v) for v in range(1, 102)}) == 101


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    """A cluster this test may stop and kill connections of, away from the shared one."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.remove()


def test_lost_notifications_fall_back_to_polling_and_say_so(
    own_cluster: Cluster, master_key: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    url = own_cluster.new_database()
    with (
        closing(PostgresKeyStore(url, master_key)) as writer,
        closing(PostgresKeyStore(url, master_key, poll_interval=0.2)) as reader,
    ):
        writer.create_key("orders", Algorithm.AES_256_GCM)
        eventually(lambda: any(k.name == "orders" for k in reader.list_keys()))
        with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
            # Every listening connection (the reader's and the writer's) is cut.
            with psycopg.connect(own_cluster.url(), autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'sealflow-keystore-listen'"
                )
            eventually(lambda: reader.health().invalidation == "poll", within=5)
            assert reader.health().fallbacks == 1
            writer.rotate_key("orders")
            eventually(lambda: reader.get_key("orders").latest == 2)
            # And it listens again by itself.
            eventually(lambda: reader.health().invalidation == "notify", within=10)
        messages = [r.getMessage() for r in caplog.records]
        assert any("notifications lost" in m and "polling" in m for m in messages)
        assert any("notifications are back" in m for m in messages)


def test_an_unreachable_database_serves_the_cache_refuses_writes_and_recovers(
    own_cluster: Cluster, master_key: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    url = own_cluster.new_database()
    with closing(PostgresKeyStore(url, master_key, poll_interval=0.2)) as store:
        store.create_key("orders", Algorithm.AES_256_GCM)
        _, secret = store.create_token(["admin"])
        material = store.key_material("orders", 1)
        with caplog.at_level(logging.WARNING, logger="sealflow.keystore"):
            assert not store.stale(2.0)  # heard from every second
            own_cluster.stop()
            try:
                eventually(lambda: not store.health().reachable, within=5)
                eventually(lambda: store.stale(2.0), within=10)
                assert store.key_material("orders", 1) == material
                assert store.find_token(secret) is not None
                with pytest.raises(KeyStoreUnavailable):
                    store.rotate_key("orders")
            finally:
                own_cluster.start()
            eventually(lambda: store.health().reachable, within=10)
            assert not store.stale(2.0)
        assert store.rotate_key("orders").latest == 2
        messages = [r.getMessage() for r in caplog.records]
        assert any(m.startswith("keystore unreachable") for m in messages)
        assert any(m == "keystore reachable again" for m in messages)


def test_the_listening_connection_notices_a_silent_peer_in_seconds(pg_url: str) -> None:
    """libpq applied the keepalive and user-timeout settings to the watcher's socket: a peer
    that vanishes (a partition) ends the connection in seconds, not after the kernel's hours."""
    with _pg_watch.listen_connection(pg_url) as conn:
        sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
        with sock:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 2
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 5000
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_first_start_provisions_once_however_many_replicas_start(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    master = "A" * 43 + "="
    starts = [
        Settings(data_dir=tmp_path / f"r{i}", keystore_url=pg_url, master_key=master)
        for i in range(3)
    ]
    tokens = [prepare(settings) for settings in starts]
    assert tokens[0] is not None
    assert tokens[1:] == [None, None]
    store = open_store(starts[2], watch=False)
    try:
        assert [k.name for k in store.list_keys()] == ["default"]
        assert store.find_token(tokens[0]) is not None
    finally:
        store.close()
    # No master key file is made up for a shared keystore.
    assert not (tmp_path / "r0" / "master.key").exists()


def test_a_shared_keystore_needs_a_master_key(pg_url: str, tmp_path: Path) -> None:
    with pytest.raises(KeyStoreUnavailable, match="master key"):
        prepare(Settings(data_dir=tmp_path / "d", keystore_url=pg_url))


def test_a_limit_raised_without_the_master_key_refuses_the_key(
    pg_url: str, master_key: bytes
) -> None:
    with closing(PostgresKeyStore(pg_url, master_key)) as store:
        store.create_key("k", Algorithm.AES_256_GCM, max_encryptions=1000)
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE sealflow_key_limits SET max_encryptions = 4294967296")
    with closing(PostgresKeyStore(pg_url, master_key)) as store:
        with pytest.raises(KeyStoreCorrupt, match="'k' fails its integrity check"):
            store.get_key("k")
        assert store.list_keys() == []
