"""``sealflow keystore migrate``: an SQLite keystore copied into PostgreSQL, verbatim, then checked.

Rows are copied as they are stored (wrapped material, MACs, times, ids, digests, usage limits
and counts, Transit policies with made_exportable, AppRole roles and secret ids, certificate
roles, public-key-only keys): both stores authenticate the same columns with the same types
(``_integrity``), so nothing is rewrapped or re-signed and a row that was refused in SQLite
stays refused. The copy is one transaction into an empty PostgreSQL keystore; then both stores
are opened with the master key and every key, every version's material, every token and every
role is compared. Anything that differs is reported and the target is left for the operator to
drop: the SQLite file is never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ._postgres import PostgresKeyStore
from ._sqlite import SQLiteKeyStore
from .errors import KeyStoreCorrupt, KeyStoreUnavailable


@dataclass(frozen=True, slots=True)
class Migrated:
    keys: int
    versions: int
    tokens: int


def migrate(
    source: Path, url: str, master_key: bytes, meta: Mapping[str, bytes] | None = None
) -> Migrated:
    """Copy the SQLite keystore at ``source`` into the PostgreSQL keystore at ``url``;
    ``master_key`` is its KEK, ``meta`` its sealed key record (``_kek``) for the new one.

    KeyStoreUnavailable if either does not open with the master key or the target holds keys
    or tokens already; KeyStoreCorrupt if the copy does not verify.
    """
    if not source.is_file():
        raise KeyStoreUnavailable(f"no SQLite keystore at {source}")
    # Opening checks the file and the master key (and upgrades a schema-1 file in place first).
    with closing(SQLiteKeyStore(source, master_key)) as old:
        rows = old.export_rows()
        with closing(PostgresKeyStore(url, master_key, meta=meta, watch=False)) as new:
            new.import_rows(
                *rows,
                approle=old.approle_rows(),
                cert_roles=old.cert_role_rows(),
                public_keys=old.public_key_rows(),
            )
            _verify(old, new)
    keys, versions, tokens = rows[:3]
    return Migrated(len(keys), len(versions), len(tokens))


def _verify(old: SQLiteKeyStore, new: PostgresKeyStore) -> None:
    def fail(what: str) -> KeyStoreCorrupt:
        return KeyStoreCorrupt(
            f"the copy does not verify: {what}; the SQLite keystore is unchanged, drop the"
            " PostgreSQL database's sealflow tables before trying again"
        )

    old_keys, new_keys = old.list_keys(), new.list_keys()
    if old_keys != new_keys:
        raise fail("the keys differ")
    for key in old_keys:
        for v in key.versions:
            # Soft-deleted keys too: a copy is checked whole.
            if old.stored_material(key.name, v.version) != new.stored_material(key.name, v.version):
                raise fail(f"key {key.name!r} version {v.version} differs")
        if old.usage(key.name) != new.usage(key.name):
            raise fail(f"the usage of key {key.name!r} differs")
    if old.list_tokens() != new.list_tokens():
        raise fail("the tokens differ")
    if old.public_keys() != new.public_keys():
        raise fail("the public-key-only keys differ")
    roles = old.list_roles()
    if roles != new.list_roles():
        raise fail("the AppRole roles differ")
    for role in roles:
        if old.list_secret_ids(role.name) != new.list_secret_ids(role.name):
            raise fail(f"the secret ids of AppRole role {role.name!r} differ")
    if old.list_cert_roles() != new.list_cert_roles():
        raise fail("the certificate roles differ")
