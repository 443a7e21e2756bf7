"""The first start's root token: every scope, and the changes of it since.

``ROOT_SCOPES`` is what ``sealflow serve`` gives the token it prints at a keystore's first
start. The root token is documented as holding every scope, so each release that adds scopes
gives them to the root token of a keystore made before it, once, at its first open of that
keystore (``GRANTS``, in order): a token labelled ``root``, not revoked, whose row passes its
MAC check and whose scopes are exactly the root scopes of the release before. Releases before
``export:<glob>`` gave ``admin encrypt:* decrypt:*`` (``admin`` then implied export); releases
before ``hmac``, ``sign`` and ``verify`` gave ``admin encrypt:* decrypt:* export:*``. Each grant
is done once (noted in the keystore's meta table), so that a token made later with those scopes
and that label gets what it was made with and no more.
"""

from __future__ import annotations

from ._dialect import Connection
from ._tables import Tables

ROOT_SCOPES = ["admin", "encrypt:*", "decrypt:*", "export:*", "hmac:*", "sign:*", "verify:*"]
# (the meta note that says it was done, the root scopes before it, the root scopes after it)
GRANTS = (
    (
        "root_export_granted",
        ("admin", "encrypt:*", "decrypt:*"),
        ("admin", "encrypt:*", "decrypt:*", "export:*"),
    ),
    (
        "root_hmac_sign_verify_granted",
        ("admin", "encrypt:*", "decrypt:*", "export:*"),
        tuple(ROOT_SCOPES),
    ),
)


def granted(db: Connection, tables: Tables) -> bool:
    """Whether every grant has run on this keystore (a read only)."""
    return all(db.execute(tables.sql.meta_value, (note,)).fetchone() for note, _, _ in GRANTS)


def grant(db: Connection, tables: Tables) -> list[tuple[str, str]]:
    """Inside the caller's write transaction: each grant not done before, in order; the ids of
    the tokens changed, each with the scopes it was given."""
    changed = []
    for note, before, after in GRANTS:
        if db.execute(tables.sql.meta_value, (note,)).fetchone() is not None:
            continue  # another process may have done it since the caller looked
        for _, token in tables.tokens(db).values():  # rows that fail their MAC are left out
            if token.label == "root" and token.scopes == before and not token.revoked:
                tables.write_scopes(db, token.id, " ".join(after))
                added = " ".join(scope for scope in after if scope not in before)
                changed.append((token.id, added))
        db.execute(tables.sql.note_meta, (note, b"1"))
    return changed
