"""A store's tables, read and written alike for every store: what a read returns is checked
against its MAC (``_rows``), what a write stores is MAC'd or wrapped (``_integrity``), and the
SQL is the store's dialect of one text (``_dialect``). Each call runs on the connection it is
given, inside whatever transaction the caller holds (``_writes``, or a store's cache reload).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from sealflow.engine import Algorithm

from ._base import KeyInfo, TokenInfo
from ._dialect import Connection, Sql
from ._integrity import LEGACY_TOKEN_ROW, LIMITS_ROW, TOKEN_ROW, Integrity, key_row_form, refuse
from ._key_types import KeyType, fresh_material, of
from ._rows import PolicyRow, key_info, policy_mac, present, token_info, with_limits, with_policy
from .errors import KeyNotFound, KeyStoreCorrupt, TokenNotFound

# The meta row holding the import wrapping key (``_imports``), wrapped under the master key.
WRAPPING_KEY_META = "import_wrapping_key"
# A key's authenticated columns (KEY_IMPORTED_ROW), as stored.
KeyRow = tuple[str, str, int, int, float, int, int]
# A token's authenticated columns (TOKEN_ROW), as stored.
TokenRow = tuple[Any, ...]
_TOKEN_WIDTH = len(TOKEN_ROW.columns)
# A row written before lifetimes, as its new columns' defaults fill it (the schemas' DEFAULTs):
# ttl, expire_at, explicit_max_ttl, renewable, num_uses, uses, parent, orphan.
_LEGACY_DEFAULTS = (0, None, 0, 0, 0, 0, "", 1)


class Tables:
    """One store's rows; ``where`` names the store in logs and messages."""

    __slots__ = ("_integrity", "_where", "sql")

    def __init__(self, sql: Sql, integrity: Integrity, where: str) -> None:
        self.sql = sql
        self._integrity = integrity
        self._where = where

    @property
    def integrity(self) -> Integrity:
        return self._integrity

    @property
    def where(self) -> str:
        return self._where

    # -- keys

    def keys(self, db: Connection, name: str | None = None) -> dict[str, KeyInfo | None]:
        """Every key, or the one named (absent if it is not there), assembled from its rows:
        its own row with its versions, then its limits, then its policy. None for a key one of
        whose rows fails its check (logged once)."""
        sql = self.sql
        args: tuple[str, ...] = () if name is None else (name,)
        if name is None:
            statements = (sql.keys, sql.limits, sql.policies)
        else:
            statements = (sql.key, sql.key_limits, sql.key_policy)
        # The key rows and their versions in one statement: one consistent snapshot of both.
        key_rows, limit_rows, policy_rows = (db.execute(s, args).fetchall() for s in statements)
        keys = {
            key_name: key_info(self._integrity, list(group), self._where)
            for key_name, group in itertools.groupby(key_rows, key=lambda row: row[0])
        }
        keys = with_limits(self._integrity, keys, limit_rows, self._where)
        return with_policy(self._integrity, keys, policy_rows, self._where)

    def locked_key(self, db: Connection, name: str) -> KeyInfo:
        """The key, checked, its row locked for the caller's transaction (``Dialect.for_update``);
        KeyNotFound, or KeyStoreCorrupt for a key whose rows fail their check."""
        if db.execute(self.sql.lock_key, (name,)).fetchone() is None:
            raise KeyNotFound(f"key {name!r} not found")
        return present(self.keys(db, name), name)

    def material(self, db: Connection, info: KeyInfo, version: int) -> bytes | None:
        """A version's unwrapped material, or None if the key has no such version. The version's
        creation time picks the version of this key, never of one created since in its place.
        KeyStoreCorrupt, logged once, if it does not unwrap."""
        born = [v.created_at for v in info.versions if v.version == version]
        args = (info.name, version, born[0] if born else None)
        row = db.execute(self.sql.wrapped, args).fetchone()
        if row is None:
            return None
        try:
            return self._integrity.unwrap(
                info.name, version, info.key_type, info.created_exportable, row[0]
            )
        except KeyStoreCorrupt:
            refuse(self._where, f"key {info.name!r} version {version}")
            raise

    def insert_key(self, db: Connection, row: KeyRow) -> bool:
        """The key's row (KEY_IMPORTED_ROW's columns), MAC'd; False, with nothing written, if
        the name is taken."""
        mac = self._integrity.mac(*key_row_form(row))
        inserted = db.execute(self.sql.insert_key, (*row, mac))
        if inserted.rowcount != 1:
            return False
        # Counts an earlier release kept of a deleted key of this name are not this key's
        # (SQLite's key_usage has no foreign key to remove them; PostgreSQL's has none left).
        db.execute(self.sql.forget_usage, (row[0],))
        return True

    def add_version(
        self,
        db: Connection,
        name: str,
        version: int,
        alg: KeyType | Algorithm,
        exportable: bool,
        material: bytes | None = None,
    ) -> None:
        """A version of ``material`` (an import), else of fresh random material, wrapped under
        ``exportable``: the flag the key was created with, for every version (``_integrity``)."""
        if material is None:
            material = fresh_material(alg if isinstance(alg, KeyType) else of(alg))
        wrapped = self._integrity.wrap(name, version, alg, exportable, material)
        db.execute(self.sql.insert_version, (name, version, wrapped, time.time()))

    def wrapping_key(self, db: Connection, fresh: bytes | None = None) -> bytes | None:
        """The import wrapping key's private half (PKCS #8 DER) as stored, or None; ``fresh``
        is stored first unless one is there already, so of replicas racing to make it, every
        one reads back the one stored first. KeyStoreCorrupt if it does not unwrap."""
        if fresh is not None:
            blob = self._integrity.wrap_wrapping_key(fresh)
            db.execute(self.sql.note_meta, (WRAPPING_KEY_META, blob))
        row = db.execute(self.sql.meta_value, (WRAPPING_KEY_META,)).fetchone()
        if row is None:
            return None
        try:
            return self._integrity.unwrap_wrapping_key(bytes(row[0]))
        except KeyStoreCorrupt:
            refuse(self._where, "the import wrapping key")
            raise KeyStoreCorrupt("the import wrapping key fails its integrity check") from None

    def write_limits(self, db: Connection, row: tuple[str, int, float]) -> None:
        db.execute(self.sql.write_limits, (*row, self._integrity.mac(LIMITS_ROW, row)))

    def write_min_decryption(self, db: Connection, name: str, version: int) -> None:
        """The key's row with a new min_decryption_version, MAC'd again."""
        self.write_key_row(db, name, min_decryption_version=version)

    def write_key_row(
        self,
        db: Connection,
        name: str,
        *,
        min_decryption_version: int | None = None,
        imported: bool | None = None,
    ) -> None:
        """The key's row with what changes in it (None: unchanged; ``imported`` False also
        clears ``allow_rotation``), MAC'd again. The caller has checked it (``locked_key``) in
        this transaction: a refused row is never re-signed."""
        stored = tuple(db.execute(self.sql.key_row, (name,)).fetchone())
        least = stored[3] if min_decryption_version is None else min_decryption_version
        flags = stored[5:] if imported is None else (int(imported), stored[6] if imported else 0)
        row = (*stored[:3], least, stored[4], *flags)
        mac = self._integrity.mac(*key_row_form(row))
        db.execute(self.sql.write_key_row, (least, *flags, mac, name))

    def write_policy(self, db: Connection, row: PolicyRow) -> None:
        db.execute(self.sql.write_policy, (*row, policy_mac(self._integrity, row)))

    def trim(self, db: Connection, name: str, below: int) -> None:
        """Remove the key's versions below ``below`` (their wrapped material) and their usage;
        the caller writes the policy row that says so in the same transaction (``_lifecycle``)."""
        db.execute(self.sql.trim_usage, (name, below))
        db.execute(self.sql.trim_versions, (name, below))

    def delete_key(self, db: Connection, name: str) -> None:
        """Every row of the key: usage, limits, policy, versions (its wrapped material), its own."""
        for statement in self.sql.delete_key:
            db.execute(statement, (name,))

    # -- tokens

    def tokens(self, db: Connection) -> dict[bytes, tuple[bytes, TokenInfo]]:
        """Every token whose row passes its check, by digest (``_rows.live_token`` looks them
        up), in creation order; a row that fails is left out, logged once."""
        tokens: dict[bytes, tuple[bytes, TokenInfo]] = {}
        for stored in db.execute(self.sql.tokens).fetchall():
            row, mac = tuple(stored[:_TOKEN_WIDTH]), stored[_TOKEN_WIDTH]
            if self._integrity.verify(TOKEN_ROW, row, mac):
                tokens[row[1]] = (row[1], token_info(row))
            else:
                refuse(self._where, f"token {row[0]!r}")
        return tokens

    def insert_token(self, db: Connection, row: TokenRow) -> None:
        db.execute(self.sql.insert_token, (*row, self._integrity.mac(TOKEN_ROW, row)))

    def revoke_token(self, db: Connection, token_id: str) -> list[TokenRow]:
        """The token's row, revoked now unless it was already (then unchanged), then the rows
        of its descendants not created orphan, revoked now with it, as Vault revokes a token's
        tree. TokenNotFound; KeyStoreCorrupt for a row that fails its check
        (``checked_token``); a descendant whose row fails is left as it is (refused anyway)."""
        now = time.time()
        row = self.checked_token(db, token_id)
        if row[5] is None:
            row = self.update_token(db, row, revoked_at=now)
        rows, parents = [row], [token_id]
        while parents:
            children = db.execute(self.sql.token_children, (parents.pop(),)).fetchall()
            for (child_id,) in children:
                try:
                    child = self.checked_token(db, child_id)
                except KeyStoreCorrupt:
                    continue
                rows.append(self.update_token(db, child, revoked_at=now))
                parents.append(child_id)
        return rows

    def update_token(
        self,
        db: Connection,
        row: TokenRow,
        *,
        revoked_at: float | None = None,
        expire_at: float | None = None,
        uses: int | None = None,
    ) -> TokenRow:
        """The token's row with what changes in a token's life (None: unchanged), MAC'd again
        and written. ``row`` is the row as ``checked_token`` read it in this transaction: a
        row that fails its check is never re-signed."""
        new = list(row)
        for index, value in ((5, revoked_at), (7, expire_at), (11, uses)):
            if value is not None:
                new[index] = value
        changed = tuple(new)
        mac = self._integrity.mac(TOKEN_ROW, changed)
        db.execute(self.sql.update_token, (changed[5], changed[7], changed[11], mac, row[0]))
        return changed

    def sweep_tokens(self, db: Connection, before: float) -> int:
        """Delete the rows of tokens that expired before ``before``; how many."""
        return max(db.execute(self.sql.sweep_tokens, (before,)).rowcount, 0)

    def remac_legacy_tokens(self, db: Connection) -> tuple[int, list[str]]:
        """Every token row that passes its check as rows were MAC'd before lifetimes
        (LEGACY_TOKEN_ROW, over the first six columns; its lifetime columns then hold their
        defaults, which is what such a token had: no expiry, no use limit, no parent) MAC'd
        again under TOKEN_ROW; the number done, and the ids of rows that pass neither check,
        which are left as they are (refused, never re-signed). A row that passes TOKEN_ROW's
        check already is left alone."""
        done, failed = 0, []
        for stored in db.execute(self.sql.tokens).fetchall():
            row, mac = tuple(stored[:_TOKEN_WIDTH]), stored[_TOKEN_WIDTH]
            if self._integrity.verify(TOKEN_ROW, row, mac):
                continue
            if row[6:] == _LEGACY_DEFAULTS and self._integrity.verify(
                LEGACY_TOKEN_ROW, row[:6], mac
            ):
                db.execute(self.sql.write_token_mac, (self._integrity.mac(TOKEN_ROW, row), row[0]))
                done += 1
            else:
                failed.append(str(row[0]))
        return done, failed

    def write_scopes(self, db: Connection, token_id: str, scopes: str) -> None:
        """The token's row with other scopes, MAC'd again (``_root_scopes``, the one caller).
        TokenNotFound; KeyStoreCorrupt for a row that fails its check."""
        row = self.checked_token(db, token_id)
        row = (row[0], row[1], scopes, *row[3:])
        db.execute(self.sql.write_scopes, (scopes, self._integrity.mac(TOKEN_ROW, row), token_id))

    def checked_token(self, db: Connection, token_id: str) -> TokenRow:
        """The token's row as stored, checked (and locked for the caller's transaction): a
        row that fails is never re-signed, which would make whatever was written into it
        genuine."""
        stored = db.execute(self.sql.token, (token_id,)).fetchone()
        if stored is None:
            raise TokenNotFound(f"token {token_id!r} not found")
        row, mac = tuple(stored[:_TOKEN_WIDTH]), stored[_TOKEN_WIDTH]
        if not self._integrity.verify(TOKEN_ROW, row, mac):
            refuse(self._where, f"token {token_id!r}")
            raise KeyStoreCorrupt(
                f"token {token_id!r} fails its integrity check: it is refused already,"
                " and is left as it is"
            )
        return row
