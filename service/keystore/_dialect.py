"""The SQL both stores run, written once: a store's ``Dialect`` names its tables, its driver's
placeholder and its row locks, and ``Sql`` is every shared statement in that dialect.

What a store still writes itself has no counterpart in the other: SQLite's pragmas and file,
PostgreSQL's migrations, change counter and notifications, and each one's cache reload.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ._base import Slot
from ._integrity import TOKEN_ROW


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """What the shared logic uses of a connection: sqlite3's and psycopg's alike."""

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Cursor: ...


class TableNames(NamedTuple):
    keys: str
    versions: str
    tokens: str
    limits: str
    policy: str
    usage: str
    meta: str


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between the stores' shared SQL; the rest of each statement is one text."""

    param: str  # the driver's placeholder
    tables: TableNames
    # After a read whose rows the transaction writes next, or must not see deleted before it
    # ends: row locks where writers run side by side (PostgreSQL), nothing where a transaction
    # is the only writer anyway (SQLite's BEGIN IMMEDIATE).
    for_update: str
    for_share: str
    creation_order: str  # the column that orders tokens by creation, whatever the clocks said
    # The WHERE clause and its arguments that narrow usage rows to some slots, or ("", ()):
    # ``usage_rows.reserved`` keeps only the slots asked for either way.
    slots: Callable[[Sequence[Slot]], tuple[str, tuple[object, ...]]]


_KEY_ROWS = (
    # The key's row in KEY_IMPORTED_ROW.columns order, its MAC, then one version per result row.
    "SELECT k.name, k.algorithm, k.exportable, k.min_decryption_version, k.created_at,"
    " k.imported, k.allow_rotation, k.mac, v.version, v.created_at"
    " FROM {keys} k JOIN {versions} v ON v.name = k.name"
)
_LIMITS = "SELECT name, max_encryptions, auto_rotate_period, mac FROM {limits}"
_POLICIES = (
    "SELECT name, min_encryption_version, deletion_allowed, made_exportable,"
    " plaintext_backup, min_available_version, soft_deleted, mac FROM {policy}"
)
# TOKEN_ROW.columns order, then the MAC.
_TOKENS = "SELECT {token_columns}, mac FROM {tokens}"
# The key's identity (Slot.born): its row written at that time, not a later key's (its row,
# not its version 1: a trim removes that). The lock (PostgreSQL) is on the key's own row, which
# every write of a key locks first (delete_key FOR UPDATE): a reservation takes the key's row,
# then its usage row, in delete_key's order.
_SAME_KEY = "SELECT 1 FROM {keys} WHERE name = ? AND created_at = ?{for_share}"


class Sql:
    """Every statement of the shared logic in one dialect, formatted once per store."""

    def __init__(self, dialect: Dialect) -> None:
        names = {
            **dialect.tables._asdict(),
            "for_update": dialect.for_update,
            "for_share": dialect.for_share,
            "creation_order": dialect.creation_order,
            "token_columns": ", ".join(TOKEN_ROW.columns),
        }

        def sql(template: str) -> str:
            # No shared statement holds a literal "?": each one is a parameter.
            return template.format_map(names).replace("?", dialect.param)

        self.dialect = dialect
        self.slots = dialect.slots
        # Keys, with their versions, limits and policy (``_tables.Tables.keys``): all, or one.
        self.keys = sql(_KEY_ROWS + " ORDER BY k.name, v.version")
        self.limits = sql(_LIMITS)
        self.policies = sql(_POLICIES)
        self.key = sql(_KEY_ROWS + " WHERE k.name = ? ORDER BY v.version")
        self.key_limits = sql(_LIMITS + " WHERE name = ?")
        self.key_policy = sql(_POLICIES + " WHERE name = ?")
        self.lock_key = sql("SELECT 1 FROM {keys} WHERE name = ?{for_update}")
        self.wrapped = sql(
            "SELECT wrapped FROM {versions} WHERE name = ? AND version = ? AND created_at = ?"
        )
        # Key writes.
        self.insert_key = sql(
            "INSERT INTO {keys} (name, algorithm, exportable, min_decryption_version,"
            " created_at, imported, allow_rotation, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (name) DO NOTHING"
        )
        self.forget_usage = sql("DELETE FROM {usage} WHERE name = ?")
        self.insert_version = sql("INSERT INTO {versions} VALUES (?, ?, ?, ?)")
        self.write_limits = sql(
            "INSERT INTO {limits} VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE"
            " SET max_encryptions = excluded.max_encryptions,"
            " auto_rotate_period = excluded.auto_rotate_period, mac = excluded.mac"
        )
        self.key_row = sql(
            "SELECT name, algorithm, exportable, min_decryption_version, created_at, imported,"
            " allow_rotation FROM {keys} WHERE name = ?"
        )
        # A key's row with its import flags changed (``Tables.write_key_row``).
        self.write_key_row = sql(
            "UPDATE {keys} SET min_decryption_version = ?, imported = ?, allow_rotation = ?,"
            " mac = ? WHERE name = ?"
        )
        self.write_policy = sql(
            "INSERT INTO {policy} (name, min_encryption_version, deletion_allowed,"
            " made_exportable, plaintext_backup, min_available_version, soft_deleted, mac)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE"
            " SET min_encryption_version = excluded.min_encryption_version,"
            " deletion_allowed = excluded.deletion_allowed,"
            " made_exportable = excluded.made_exportable,"
            " plaintext_backup = excluded.plaintext_backup,"
            " min_available_version = excluded.min_available_version,"
            " soft_deleted = excluded.soft_deleted, mac = excluded.mac"
        )
        # A trim (``_lifecycle``): the versions below a number, and their usage.
        self.trim_usage = sql("DELETE FROM {usage} WHERE name = ? AND version < ?")
        self.trim_versions = sql("DELETE FROM {versions} WHERE name = ? AND version < ?")
        # Children first (PostgreSQL's foreign keys), the key's own row last.
        self.delete_key = tuple(
            map(
                sql,
                (
                    "DELETE FROM {usage} WHERE name = ?",
                    "DELETE FROM {limits} WHERE name = ?",
                    "DELETE FROM {policy} WHERE name = ?",
                    "DELETE FROM {versions} WHERE name = ?",
                    "DELETE FROM {keys} WHERE name = ?",
                ),
            )
        )
        # Tokens.
        self.tokens = sql(_TOKENS + " ORDER BY {creation_order}")
        self.token = sql(_TOKENS + " WHERE id = ?{for_update}")
        self.insert_token = sql(
            "INSERT INTO {tokens} ({token_columns}, mac)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        # What changes in a token's life: revocation, renewal (expire_at), uses.
        self.update_token = sql(
            "UPDATE {tokens} SET revoked_at = ?, expire_at = ?, uses = ?, mac = ? WHERE id = ?"
        )
        self.sweep_tokens = sql("DELETE FROM {tokens} WHERE expire_at < ?")
        # The children a revocation takes with it (``Tables.revoke_token``).
        self.token_children = sql(
            "SELECT id FROM {tokens} WHERE parent = ? AND orphan = 0 AND revoked_at IS NULL"
        )
        # A row MAC'd before lifetimes, MAC'd again (``_token_lifetimes``).
        self.write_token_mac = sql("UPDATE {tokens} SET mac = ? WHERE id = ?")
        self.write_scopes = sql("UPDATE {tokens} SET scopes = ?, mac = ? WHERE id = ?")
        # Once-only changes of the rows themselves (``_root_scopes``), each noted by a key here.
        self.meta_value = sql("SELECT value FROM {meta} WHERE key = ?")
        self.note_meta = sql("INSERT INTO {meta} VALUES (?, ?) ON CONFLICT (key) DO NOTHING")
        # Public-key-only keys (``_public_keys``): meta rows under one prefix.
        self.meta_like = sql("SELECT key, value FROM {meta} WHERE key LIKE ? ORDER BY key")
        self.write_meta = sql("UPDATE {meta} SET value = ? WHERE key = ?")
        self.delete_meta = sql("DELETE FROM {meta} WHERE key = ?")
        # A version at a number given (an import); the primary key refuses one taken.
        self.version_exists = sql("SELECT 1 FROM {versions} WHERE name = ? AND version = ?")
        # Usage (``_usage_rows``).
        self.same_key = sql(_SAME_KEY)
        self.usage_row = sql("INSERT INTO {usage} VALUES (?, ?, 0, 0) ON CONFLICT DO NOTHING")
        self.reserved_of = sql(
            "SELECT reserved FROM {usage} WHERE name = ? AND version = ?{for_update}"
        )
        self.reserve = sql(
            "UPDATE {usage} SET reserved = reserved + ?, bytes = bytes + ?"
            " WHERE name = ? AND version = ?"
        )
        # One statement: the check and the write see the same state of the store.
        self.release = sql(
            "UPDATE {usage} SET reserved = reserved - ?, bytes = bytes + ?"
            " WHERE name = ? AND version = ? AND EXISTS (SELECT 1 FROM {keys}"
            " WHERE name = ? AND created_at = ?)"
        )
        self.reserved = sql(
            "SELECT u.name, k.created_at, u.version, u.reserved FROM {usage} u"
            " JOIN {keys} k ON k.name = u.name"
        )
        self.usage = sql("SELECT version, reserved, bytes FROM {usage} WHERE name = ?")
