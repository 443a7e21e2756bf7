"""AppRole rows as every store reads and writes them: roles and secret ids, each MAC'd under
the master key (``_integrity.ROLE_ROW``, ``SECRET_ID_ROW``) and checked on every read, in one
SQL text formatted for each store's placeholder and table names.

A secret id is stored as its SHA-256 digest only, like a token; its accessor is its public
name (``sid_...``). A secret id's row names its role and that role's creation time: a role
deleted and made again under the same name starts with no secret ids.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from ._approle_api import RoleInfo, SecretIdInfo
from ._dialect import Connection
from ._integrity import ROLE_ROW, SECRET_ID_ROW, Integrity, refuse
from .errors import KeyStoreCorrupt


def split(text: str) -> tuple[str, ...]:
    return tuple(part for part in text.split(",") if part)


def networks(values: Sequence[str]) -> tuple[str, ...]:
    """CIDR blocks (a bare address is its /32 or /128) in their canonical form; ValueError."""
    return tuple(str(ipaddress.ip_network(v.strip(), strict=False)) for v in values if v.strip())


def within(address: str | None, blocks: Sequence[str]) -> bool:
    """Whether the client's address is inside one of ``blocks`` (any address if none)."""
    if not blocks:
        return True
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(block) for block in blocks)


def inside(blocks: Sequence[str], bound: Sequence[str]) -> bool:
    """Whether every block lies within one of ``bound`` (any block if ``bound`` is empty)."""
    if not bound:
        return True
    outer = [ipaddress.ip_network(b) for b in bound]
    for block in blocks:
        net = ipaddress.ip_network(block)
        if not any(net.version == o.version and net.subnet_of(o) for o in outer):  # type: ignore[arg-type]
            return False
    return True


def role_info(row: Sequence[Any]) -> RoleInfo:
    return RoleInfo(
        name=row[0],
        role_id=row[1],
        token_policies=tuple(row[2].split()),
        token_ttl=row[3],
        token_max_ttl=row[4],
        token_num_uses=row[5],
        secret_id_ttl=row[6],
        secret_id_num_uses=row[7],
        secret_id_bound_cidrs=split(row[8]),
        token_bound_cidrs=split(row[9]),
        bind_secret_id=bool(row[10]),
        created_at=row[11],
    )


def secret_id_info(row: Sequence[Any]) -> SecretIdInfo:
    return SecretIdInfo(
        accessor=row[0],
        role=row[1],
        created_at=row[4],
        expire_time=row[5],
        num_uses=row[6],
        uses=row[7],
        cidrs=split(row[8]),
        metadata=row[9],
    )


class AppRoleTables:
    """One store's AppRole rows: ``param`` its driver's placeholder, ``prefix`` its table
    names' (``sealflow_`` in PostgreSQL), ``lock`` its row lock for a read before a write."""

    def __init__(self, param: str, prefix: str, lock: str, integrity: Integrity, where: str):
        names = {
            "roles": f"{prefix}approle_roles",
            "secrets": f"{prefix}approle_secret_ids",
            "role_columns": ", ".join(ROLE_ROW.columns),
            "secret_columns": ", ".join(SECRET_ID_ROW.columns),
            "role_marks": ", ".join("?" * (len(ROLE_ROW.columns) + 1)),
            "secret_marks": ", ".join("?" * (len(SECRET_ID_ROW.columns) + 1)),
            "lock": lock,
        }

        def sql(template: str) -> str:
            return template.format_map(names).replace("?", param)

        role = "SELECT {role_columns}, mac FROM {roles}"
        of_role = "SELECT {secret_columns}, mac FROM {secrets} WHERE role = ?"
        self._integrity, self._where = integrity, where
        self.roles = sql(role + " ORDER BY name")
        self.role = sql(role + " WHERE name = ?{lock}")
        self.role_by_id = sql(role + " WHERE role_id = ?{lock}")
        self.insert_role = sql("INSERT INTO {roles} ({role_columns}, mac) VALUES ({role_marks})")
        self.delete_role = sql("DELETE FROM {roles} WHERE name = ?")
        self.secret_ids = sql(of_role + " ORDER BY created_at")
        self.all_secret_ids = sql("SELECT {secret_columns}, mac FROM {secrets}")
        self.digest_taken = sql("SELECT 1 FROM {secrets} WHERE digest = ?")
        self.secret_id = sql(of_role + " AND digest = ?{lock}")
        self.secret_id_by_accessor = sql(of_role + " AND accessor = ?{lock}")
        self.insert_secret_id = sql(
            "INSERT INTO {secrets} ({secret_columns}, mac) VALUES ({secret_marks})"
        )
        self.use_secret_id = sql("UPDATE {secrets} SET uses = ?, mac = ? WHERE accessor = ?")
        self.delete_secret_id = sql("DELETE FROM {secrets} WHERE accessor = ?")
        self.delete_secret_ids = sql("DELETE FROM {secrets} WHERE role = ?")
        self.sweep = sql("DELETE FROM {secrets} WHERE expire_at < ?")

    # -- roles

    def role_row(self, db: Connection, statement: str, key: str) -> tuple[Any, ...] | None:
        """The role's row as stored, checked; None if absent; KeyStoreCorrupt (logged once) if
        it fails its check: never used, never re-signed."""
        stored = db.execute(statement, (key,)).fetchone()
        if stored is None:
            return None
        row, mac = tuple(stored[:-1]), stored[-1]
        if not self._integrity.verify(ROLE_ROW, row, mac):
            refuse(self._where, f"approle role {row[0]!r}")
            raise KeyStoreCorrupt(f"approle role {row[0]!r} fails its integrity check")
        return row

    def all_roles(self, db: Connection) -> list[RoleInfo]:
        found = []
        for stored in db.execute(self.roles).fetchall():
            row, mac = tuple(stored[:-1]), stored[-1]
            if self._integrity.verify(ROLE_ROW, row, mac):
                found.append(role_info(row))
            else:
                refuse(self._where, f"approle role {row[0]!r}")
        return found

    def write_role(self, db: Connection, row: tuple[Any, ...]) -> None:
        db.execute(self.delete_role, (row[0],))
        db.execute(self.insert_role, (*row, self._integrity.mac(ROLE_ROW, row)))

    def drop_role(self, db: Connection, name: str) -> None:
        db.execute(self.delete_secret_ids, (name,))
        db.execute(self.delete_role, (name,))

    # -- secret ids

    def secret_row(
        self, db: Connection, role: RoleInfo, statement: str, key: object
    ) -> tuple[Any, ...] | None:
        """The secret id's row of this role (this very role: its creation time matches),
        checked; None if absent or of an earlier role of the name; KeyStoreCorrupt if it
        fails its check."""
        stored = db.execute(statement, (role.name, key)).fetchone()
        if stored is None:
            return None
        row, mac = tuple(stored[:-1]), stored[-1]
        if not self._integrity.verify(SECRET_ID_ROW, row, mac):
            refuse(self._where, f"approle secret id {row[0]!r}")
            raise KeyStoreCorrupt(f"approle secret id {row[0]!r} fails its integrity check")
        return row if row[2] == role.created_at else None

    def insert_secret(self, db: Connection, row: tuple[Any, ...]) -> None:
        db.execute(self.insert_secret_id, (*row, self._integrity.mac(SECRET_ID_ROW, row)))

    def count_use(self, db: Connection, row: tuple[Any, ...]) -> None:
        """One use of the secret id; the last one deletes it, as Vault does."""
        uses = row[7] + 1
        if row[6] and uses >= row[6]:
            db.execute(self.delete_secret_id, (row[0],))
            return
        new = (*row[:7], uses, *row[8:])
        db.execute(self.use_secret_id, (uses, self._integrity.mac(SECRET_ID_ROW, new), row[0]))
