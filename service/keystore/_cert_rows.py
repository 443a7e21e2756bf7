"""Certificate-role rows as every store reads and writes them, MAC'd under the master key
(``_integrity.CERT_ROLE_ROW``) and checked on every read, in one SQL text formatted for each
store's placeholder and table names. The ``allowed_*`` rules are JSON lists of globs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._cert_api import CertRoleInfo
from ._dialect import Connection
from ._integrity import CERT_ROLE_ROW, Integrity, refuse
from .errors import KeyStoreCorrupt

RULES = (
    "allowed_common_names",
    "allowed_dns_sans",
    "allowed_email_sans",
    "allowed_uri_sans",
    "allowed_organizational_units",
)


def cert_role_info(row: Sequence[Any]) -> CertRoleInfo:
    rules = {field: tuple(json.loads(row[2 + i])) for i, field in enumerate(RULES)}
    return CertRoleInfo(
        name=row[0],
        certificate=row[1],
        token_policies=tuple(row[7].split()),
        token_ttl=row[8],
        token_max_ttl=row[9],
        display_name=row[10],
        created_at=row[11],
        **rules,
    )


class CertTables:
    """One store's certificate roles: ``param`` its driver's placeholder, ``prefix`` its table
    names' (``sealflow_`` in PostgreSQL), ``lock`` its row lock for a read before a write."""

    def __init__(self, param: str, prefix: str, lock: str, integrity: Integrity, where: str):
        names = {
            "table": f"{prefix}cert_roles",
            "columns": ", ".join(CERT_ROLE_ROW.columns),
            "marks": ", ".join("?" * (len(CERT_ROLE_ROW.columns) + 1)),
            "lock": lock,
        }

        def sql(template: str) -> str:
            return template.format_map(names).replace("?", param)

        self._integrity, self._where = integrity, where
        self.roles = sql("SELECT {columns}, mac FROM {table} ORDER BY name")
        self.role = sql("SELECT {columns}, mac FROM {table} WHERE name = ?{lock}")
        self.insert = sql("INSERT INTO {table} ({columns}, mac) VALUES ({marks})")
        self.delete = sql("DELETE FROM {table} WHERE name = ?")

    def _checked(self, stored: Sequence[Any]) -> tuple[Any, ...] | None:
        row, mac = tuple(stored[:-1]), stored[-1]
        if self._integrity.verify(CERT_ROLE_ROW, row, mac):
            return row
        refuse(self._where, f"cert role {row[0]!r}")
        return None

    def role_row(self, db: Connection, name: str) -> tuple[Any, ...] | None:
        """The role's row as stored, checked; None if absent; KeyStoreCorrupt (logged once) if
        it fails its check: never used, never re-signed."""
        stored = db.execute(self.role, (name,)).fetchone()
        if stored is None:
            return None
        row = self._checked(stored)
        if row is None:
            raise KeyStoreCorrupt(f"cert role {stored[0]!r} fails its integrity check")
        return row

    def all_roles(self, db: Connection) -> list[CertRoleInfo]:
        """Every role that passes its check (one that fails is logged and left out)."""
        rows = (self._checked(stored) for stored in db.execute(self.roles).fetchall())
        return [cert_role_info(row) for row in rows if row is not None]

    def write(self, db: Connection, row: tuple[Any, ...]) -> None:
        db.execute(self.delete, (row[0],))
        db.execute(self.insert, (*row, self._integrity.mac(CERT_ROLE_ROW, row)))
