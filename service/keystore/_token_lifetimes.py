"""Token rows of a keystore made before token lifetimes, MAC'd again once.

Such rows were MAC'd over six columns (``_integrity.LEGACY_TOKEN_ROW``); the lifetime columns
the schema adds (``_sqlite_file.USAGE_COLUMNS``, ``_pg_schema``'s migration) take defaults that
say what those tokens were: no expiry, no use limit, no parent. The first open by this release
MACs each row that passes the old check again over every column (``TOKEN_ROW``), in one write
transaction, and notes it in the keystore's meta table so that it runs once. A row that fails
the old check is left as it is: it stays refused, and is never signed with a MAC that would make
whatever was written into it genuine. After this an older release refuses every token of the
keystore (its check is the old one): every process of a keystore is upgraded together
(docs/SERVICE.md, Keystore).
"""

from __future__ import annotations

from ._dialect import Connection
from ._tables import Tables

NOTE = "token_lifetimes"


def done(db: Connection, tables: Tables) -> bool:
    """Whether ``upgrade`` has run on this keystore (a read only)."""
    return db.execute(tables.sql.meta_value, (NOTE,)).fetchone() is not None


def upgrade(db: Connection, tables: Tables) -> tuple[int, list[str]]:
    """Inside the caller's write transaction, unless done before: the rows MAC'd again, and
    the ids of those left refused (``Tables.remac_legacy_tokens``)."""
    if done(db, tables):  # another process may have done it since the caller looked
        return 0, []
    result = tables.remac_legacy_tokens(db)
    db.execute(tables.sql.note_meta, (NOTE, b"1"))
    return result
