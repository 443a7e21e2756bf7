"""Certificate roles (the cert auth method) in the keystore, on SQLite and a real PostgreSQL:
written, merged on update, listed, deleted; what a role cannot be; a row changed without the
master key refused; copied by ``keystore migrate``; added to a PostgreSQL keystore of the
previous schema by its migration."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from sealflow.service.keystore import (
    InvalidRequest,
    KeyStore,
    KeyStoreCorrupt,
    PostgresKeyStore,
    RoleNotFound,
    SQLiteKeyStore,
    migrate_keystore,
)
from tests.service import pki

from .files import PG_UNDO_MIGRATION_9, PG_UNDO_MIGRATION_10, PG_UNDO_MIGRATION_11


@pytest.fixture
def ca_pem(tmp_path: Path) -> str:
    return pki.ca(tmp_path / "pki", "client-ca").cert_path.read_text()


def test_a_role_is_written_updated_listed_and_deleted(store: KeyStore, ca_pem: str) -> None:
    made = store.write_cert_role(
        "Web",  # names are lowercase, as Vault keeps them
        {"certificate": ca_pem, "token_policies": ["encrypt:orders"], "token_ttl": 60},
    )
    assert (made.name, made.display_name, made.token_ttl) == ("web", "web", 60)
    assert made.certificate == ca_pem
    changed = store.write_cert_role("web", {"allowed_common_names": ["orders-*"]})
    assert changed.allowed_common_names == ("orders-*",)
    assert (changed.token_policies, changed.token_ttl) == (("encrypt:orders",), 60)  # kept
    assert changed.created_at == made.created_at
    assert store.get_cert_role("WEB") == changed
    assert store.list_cert_roles() == [changed]
    assert store.delete_cert_role("web") is True
    assert store.delete_cert_role("web") is False
    with pytest.raises(RoleNotFound):
        store.get_cert_role("web")


CA = "the CA's PEM"  # stands for the test's CA certificate
_GOOD = {"certificate": CA, "token_policies": ["encrypt:orders"]}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"token_policies": ["encrypt:orders"]}, "missing certificate"),
        ({**_GOOD, "certificate": "junk"}, "failed to parse certificate"),
        ({**_GOOD, "token_policies": []}, "token_policies must be one or more sealflow scopes"),
        ({**_GOOD, "token_policies": ["root"]}, "token_policies must be one or more sealflow"),
        ({**_GOOD, "token_ttl": 7200, "token_max_ttl": 3600}, "ttl should be shorter than max_ttl"),
        ({**_GOOD, "allowed_dns_sans": [""]}, "allowed_dns_sans must be a list of non-empty"),
        ({**_GOOD, "bound_cidrs": ["10.0.0.0/8"]}, "unknown role fields"),
    ],
)
def test_what_a_role_cannot_be(
    store: KeyStore, ca_pem: str, fields: dict[str, object], message: str
) -> None:
    given = {k: ca_pem if v == CA else v for k, v in fields.items()}
    with pytest.raises(InvalidRequest, match=message):
        store.write_cert_role("web", given)
    assert store.list_cert_roles() == []


def test_a_server_certificate_is_no_leaf_to_trust(store: KeyStore, tmp_path: Path) -> None:
    ca = pki.ca(tmp_path, "ca")
    server = pki.server_cert(ca, tmp_path, "server").cert_path.read_text()
    client = pki.client_cert(ca, tmp_path, "app").cert_path.read_text()
    with pytest.raises(InvalidRequest, match="TLS client authentication"):
        store.write_cert_role("web", {"certificate": server, "token_policies": ["encrypt:x"]})
    assert store.write_cert_role("web", {"certificate": client, "token_policies": ["encrypt:x"]})


_TAMPER = {
    "sqlite": "UPDATE cert_roles SET policies = 'admin encrypt:* decrypt:*'",
    "postgresql": "UPDATE sealflow_cert_roles SET policies = 'admin encrypt:* decrypt:*'",
}


def test_a_row_changed_without_the_master_key_is_refused(
    store: KeyStore, backend: str, store_url: str, db_path: Path, ca_pem: str
) -> None:
    store.write_cert_role("web", {"certificate": ca_pem, "token_policies": ["encrypt:orders"]})
    if backend == "sqlite":
        with closing(sqlite3.connect(db_path)) as lite, lite:
            lite.execute(_TAMPER[backend])
    else:
        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute(_TAMPER[backend].encode())
    assert store.list_cert_roles() == []  # left out, logged
    with pytest.raises(KeyStoreCorrupt):
        store.get_cert_role("web")


def test_keystore_migrate_copies_certificate_roles(
    db_path: Path, pg_url: str, master_key: bytes, ca_pem: str
) -> None:
    with closing(SQLiteKeyStore(db_path, master_key)) as old:
        old.write_cert_role(
            "web",
            {
                "certificate": ca_pem,
                "token_policies": ["encrypt:orders"],
                "allowed_uri_sans": ["x"],
            },
        )
        roles = old.list_cert_roles()
    migrate_keystore(db_path, pg_url, master_key)
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as copy:
        assert copy.list_cert_roles() == roles


def test_a_postgresql_keystore_of_the_previous_schema_gains_certificate_roles(
    pg_url: str, master_key: bytes, ca_pem: str
) -> None:
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as old:
        old.create_token(["admin"], "kept")
    with psycopg.connect(pg_url) as conn:  # as the previous release left it
        conn.execute(PG_UNDO_MIGRATION_11.encode())
        conn.execute(PG_UNDO_MIGRATION_10.encode())
        conn.execute(PG_UNDO_MIGRATION_9.encode())
        conn.execute(b"DELETE FROM sealflow_migrations WHERE version > 8")
    with closing(PostgresKeyStore(pg_url, master_key, watch=False)) as store:
        assert [t.label for t in store.list_tokens()] == ["kept"]
        store.write_cert_role("web", {"certificate": ca_pem, "token_policies": ["encrypt:o"]})
        assert [r.name for r in store.list_cert_roles()] == ["web"]
