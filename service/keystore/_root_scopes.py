"""The first start's root token: every scope, and the one change of it since.

``ROOT_SCOPES`` is what ``sealflow serve`` gives the token it prints at a keystore's first
start. Releases before the ``export:<glob>`` scope gave it ``admin encrypt:* decrypt:*``, and
``admin`` then implied export; now it does not, so the root token of such a keystore would lose
export at the upgrade although it is documented as having every scope. ``grant_export`` gives it
``export:*`` once, the first time this release opens the keystore: a token labelled ``root``,
not revoked, whose row passes its MAC check and whose scopes are exactly the old root scopes.
Done once (noted in the keystore's meta table), so that a token made later with those scopes
and that label gets what it was made with and no more.
"""

from __future__ import annotations

from ._dialect import Connection
from ._tables import Tables

ROOT_SCOPES = ["admin", "encrypt:*", "decrypt:*", "export:*"]
OLD_ROOT_SCOPES = ("admin", "encrypt:*", "decrypt:*")
NOTE = "root_export_granted"


def granted(db: Connection, tables: Tables) -> bool:
    """Whether ``grant_export`` has run on this keystore (a read only)."""
    return db.execute(tables.sql.meta_value, (NOTE,)).fetchone() is not None


def grant_export(db: Connection, tables: Tables) -> list[str]:
    """Inside the caller's write transaction: ``export:*`` to the old root token(s), unless done
    before; the ids of the tokens changed."""
    if granted(db, tables):  # another process may have done it since the caller looked
        return []
    changed = []
    for _, token in tables.tokens(db).values():  # rows that fail their MAC are left out
        if token.label == "root" and token.scopes == OLD_ROOT_SCOPES and not token.revoked:
            tables.write_scopes(db, token.id, " ".join(ROOT_SCOPES))
            changed.append(token.id)
    db.execute(tables.sql.note_meta, (NOTE, b"1"))
    return changed
