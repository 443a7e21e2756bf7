"""AppRole roles and secret ids in the keystore, on SQLite and a real PostgreSQL: a login
consumes its secret id's uses, honours its CIDR bounds and expiry, and a row changed without
the master key is refused."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from sealflow.service.keystore import (
    InvalidRequest,
    KeyStore,
    KeyStoreCorrupt,
    LoginRefused,
    PostgresKeyStore,
    RoleNotFound,
    SQLiteKeyStore,
    migrate_keystore,
)

from .files import (
    PG_UNDO_MIGRATION_7,
    PG_UNDO_MIGRATION_8,
    PG_UNDO_MIGRATION_9,
    PG_UNDO_MIGRATION_10,
    PG_UNDO_MIGRATION_11,
)

INVALID = "invalid role or secret ID"


def _role(store: KeyStore, name: str = "app", **fields: object) -> str:
    store.write_role(name, {"token_policies": ["encrypt:orders"], **fields})
    return store.get_role(name).role_id


def test_a_role_is_created_updated_listed_and_deleted(store: KeyStore) -> None:
    role_id = _role(store, token_ttl=3600, secret_id_num_uses=2)
    store.write_role("app", {"token_max_ttl": 7200})
    role = store.get_role("app")
    assert (role.role_id, role.token_ttl, role.token_max_ttl) == (role_id, 3600, 7200)
    assert role.secret_id_num_uses == 2
    assert role.bind_secret_id
    assert [r.name for r in store.list_roles()] == ["app"]
    store.set_role_id("app", "custom-id")
    assert store.get_role("app").role_id == "custom-id"
    assert store.delete_role("app") is True
    assert store.delete_role("app") is False
    with pytest.raises(RoleNotFound):
        store.get_role("app")


def test_what_a_role_cannot_be(store: KeyStore) -> None:
    cases: tuple[dict[str, object], ...] = (
        {"token_policies": []},
        {"token_policies": ["root"]},
        {"token_policies": ["admin"], "token_bound_cidrs": ["10.0.0.0/8"]},
        {"token_policies": ["admin"], "secret_id_bound_cidrs": ["not-a-cidr"]},
        {"token_policies": ["admin"], "bind_secret_id": False},
        {"token_policies": ["admin"], "token_ttl": 10, "token_max_ttl": 5},
    )
    for fields in cases:
        with pytest.raises(InvalidRequest):
            store.write_role("bad", fields)
    with pytest.raises(InvalidRequest):
        store.write_role("bad name", {"token_policies": ["admin"]})


def test_a_login_uses_up_its_secret_id(store: KeyStore) -> None:
    role_id = _role(store)
    info, secret = store.create_secret_id("app", num_uses=2, metadata={"team": "a"})
    assert info.num_uses == 2
    assert info.accessor.startswith("sid_")
    for left in (1, None):
        role, used = store.approle_login(role_id, secret, "127.0.0.1")
        assert role.name == "app"
        assert used is not None
        assert used.metadata == '{"team": "a"}'
        found = store.lookup_secret_id("app", secret)
        assert (found.uses_left if found else None) == left
    with pytest.raises(LoginRefused, match=INVALID):
        store.approle_login(role_id, secret, "127.0.0.1")
    with pytest.raises(LoginRefused, match=INVALID):
        store.approle_login("not-a-role-id", secret, "127.0.0.1")


def test_cidr_bounds_of_the_secret_id_and_the_role(store: KeyStore) -> None:
    role_id = _role(store, secret_id_bound_cidrs=["127.0.0.0/8"])
    _, secret = store.create_secret_id("app", cidrs=["127.0.0.2/32"])
    with pytest.raises(
        LoginRefused, match="unauthorized through CIDR restrictions on the secret ID"
    ):
        store.approle_login(role_id, secret, "127.0.0.1")
    assert store.approle_login(role_id, secret, "127.0.0.2")[0].name == "app"
    with pytest.raises(LoginRefused, match="CIDR restrictions on the role"):
        store.approle_login(role_id, secret, "10.1.1.1")
    with pytest.raises(InvalidRequest):
        store.create_secret_id("app", cidrs=["10.0.0.0/8"])  # outside the role's


def test_destroyed_and_expired_secret_ids_are_refused(store: KeyStore) -> None:
    role_id = _role(store)
    info, secret = store.create_secret_id("app")
    assert store.destroy_secret_id("app", secret) is True
    assert store.destroy_secret_id("app", secret) is False
    with pytest.raises(LoginRefused, match=INVALID):
        store.approle_login(role_id, secret, "127.0.0.1")
    info, secret = store.create_secret_id("app")
    assert store.destroy_secret_id("app", accessor=info.accessor) is True
    given = "a-secret-id-the-caller-chose"
    store.create_secret_id("app", secret=given)
    with pytest.raises(InvalidRequest, match="already registered"):
        store.create_secret_id("app", secret=given)
    assert store.lookup_secret_id("app", given) is not None
    _, secret = store.create_secret_id("app", ttl=1)
    time.sleep(1.5)  # past its TTL
    assert store.lookup_secret_id("app", secret) is None
    with pytest.raises(LoginRefused, match=INVALID):
        store.approle_login(role_id, secret, "127.0.0.1")


def test_a_role_made_again_has_none_of_the_old_secret_ids(store: KeyStore) -> None:
    _role(store)
    _, secret = store.create_secret_id("app")
    store.delete_role("app")
    role_id = _role(store)
    with pytest.raises(LoginRefused, match=INVALID):
        store.approle_login(role_id, secret, "127.0.0.1")


def test_another_instance_sees_a_new_secret_id(
    store: KeyStore, open_store: Callable[[bytes], KeyStore], master_key: bytes
) -> None:
    role_id = _role(store)
    other = open_store(master_key)
    _, secret = other.create_secret_id("app", num_uses=1)
    store.approle_login(role_id, secret, "127.0.0.1")
    with pytest.raises(LoginRefused):
        other.approle_login(role_id, secret, "127.0.0.1")


_TAMPER = {
    "sqlite": (
        "UPDATE approle_roles SET policies = 'admin encrypt:* decrypt:*'",
        "UPDATE approle_secret_ids SET num_uses = 0",
    ),
    "postgresql": (
        "UPDATE sealflow_approle_roles SET policies = 'admin encrypt:* decrypt:*'",
        "UPDATE sealflow_approle_secret_ids SET num_uses = 0",
    ),
}


def _tamper(backend: str, store_url: str, db_path: Path, statement: str) -> None:
    if backend == "sqlite":
        with closing(sqlite3.connect(db_path)) as lite, lite:
            lite.execute(statement)
    else:
        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute(statement.encode())


@pytest.mark.parametrize("which", [0, 1], ids=["role", "secret_id"])
def test_a_row_changed_without_the_master_key_is_refused(
    store: KeyStore, backend: str, store_url: str, db_path: Path, which: int
) -> None:
    role_id = _role(store)
    _, secret = store.create_secret_id("app", num_uses=1)
    _tamper(backend, store_url, db_path, _TAMPER[backend][which])
    with pytest.raises(KeyStoreCorrupt):
        store.approle_login(role_id, secret, "127.0.0.1")
    if which == 0:
        assert store.list_roles() == []  # left out, logged
        with pytest.raises(KeyStoreCorrupt):
            store.get_role("app")


def test_keystore_migrate_copies_roles_and_secret_ids(
    db_path: Path, pg_url: str, master_key: bytes
) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as old:
        role_id = _role(old, secret_id_num_uses=3)
        _, secret = old.create_secret_id("app")
        old.approle_login(role_id, secret, "127.0.0.1")
        roles = old.list_roles()
    migrate_keystore(db_path, pg_url, master_key)
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as copy:
        assert copy.list_roles() == roles
        _, used = copy.approle_login(role_id, secret, "127.0.0.1")
        assert used is not None
        assert used.uses == 1  # the use made before the move came along


def test_a_postgresql_keystore_of_the_previous_schema_gains_approle(
    pg_url: str, master_key: bytes
) -> None:
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as old:
        old.create_token(["admin"], "kept")
    with psycopg.connect(pg_url) as conn:  # as the previous release left it
        conn.execute(PG_UNDO_MIGRATION_11.encode())
        conn.execute(PG_UNDO_MIGRATION_10.encode())
        conn.execute(PG_UNDO_MIGRATION_9.encode())
        conn.execute(PG_UNDO_MIGRATION_8.encode())
        conn.execute(PG_UNDO_MIGRATION_7.encode())
        conn.execute(b"DELETE FROM sealflow_migrations WHERE version > 6")
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as store:
        assert [t.label for t in store.list_tokens()] == ["kept"]
        role_id = _role(store)
        _, secret = store.create_secret_id("app")
        assert store.approle_login(role_id, secret, "127.0.0.1")[0].name == "app"


def test_a_role_without_secret_ids_logs_in_from_its_networks_only(store: KeyStore) -> None:
    role_id = _role(store, bind_secret_id=False, secret_id_bound_cidrs=["10.0.0.0/8"])
    assert store.approle_login(role_id, "", "10.9.8.7")[1] is None
    with pytest.raises(LoginRefused, match="CIDR restrictions on the role"):
        store.approle_login(role_id, "", "192.168.1.1")
    store.write_role("app", {"bind_secret_id": True})
    with pytest.raises(LoginRefused, match="missing secret_id"):
        store.approle_login(role_id, "", "10.9.8.7")
