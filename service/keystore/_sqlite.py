"""The embedded keystore: one SQLite file in WAL mode, shared safely by several processes.

The file itself (creation, checks at open, the upgrade from schema 1) is ``_sqlite_file``'s;
what the master key vouches for in each row is ``_integrity``'s.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from sealflow.engine import Algorithm

from . import _sqlite_file, _sqlite_usage
from ._base import (
    KeyInfo,
    KeyStoreHealth,
    Slot,
    TokenInfo,
    VersionUsage,
    valid_key_name,
    valid_scope,
    valid_secret,
)
from ._integrity import KEY_ROW, LIMITS_ROW, TOKEN_ROW, Integrity, refuse
from ._masterkey import KeyWrapper
from ._rows import (
    MAX_VERSION,
    PolicyRow,
    digest,
    forget_replaced,
    key_info,
    limits_row,
    policy_mac,
    present,
    token_info,
    with_limits,
    with_policy,
)
from ._writes import VersionWrites
from .errors import (
    InvalidRequest,
    KeyExists,
    KeyNotFound,
    KeyStoreCorrupt,
    KeyStoreUnavailable,
    TokenNotFound,
)

log = logging.getLogger("sealflow.keystore")

# The row's columns in KEY_ROW.columns order, its MAC, then one version per result row.
_KEYS_SQL = (
    "SELECT k.name, k.algorithm, k.exportable, k.min_decryption_version, k.created_at, k.mac,"
    " v.version, v.created_at FROM keys k JOIN key_versions v ON v.name = k.name"
)
_KEY_ROW_SQL = (
    "SELECT name, algorithm, exportable, min_decryption_version, created_at FROM keys"
    " WHERE name = ?"
)
_LIMITS_SQL = "SELECT name, max_encryptions, auto_rotate_period, mac FROM key_limits"
_POLICY_SQL = (
    "SELECT name, min_encryption_version, deletion_allowed, made_exportable, mac FROM key_policy"
)
# TOKEN_ROW.columns order, then the MAC.
_TOKENS_SQL = "SELECT id, digest, scopes, label, created_at, revoked_at, mac FROM tokens"


class SQLiteKeyStore(VersionWrites[sqlite3.Connection]):
    """A ``KeyStore`` whose reads come from memory, refreshed when another connection commits.

    ``PRAGMA data_version`` changes whenever another connection (in this process or another)
    has committed, so one cheap pragma per call keeps the cache exact. Every row is checked
    against its MAC when it is read into the cache; unwrapped material is kept across
    refreshes (a key version is immutable while its key lives), behind its key's checked row,
    and dropped when a refresh finds its key deleted (``_rows.forget_replaced``).

    ``max_staleness`` (seconds) skips the pragma when the last one is more recent: at
    thousands of requests a second one pragma (~4 us) per request was a tenth of the cost
    of a small request, and a write from another process a millisecond late is invisible
    to anyone. The default, 0, checks on every call.

    A missing file is created (``_sqlite_file.create``); an existing one must be a whole,
    undamaged keystore, and one of schema 1 is upgraded in place.
    """

    def __init__(self, path: Path, master_key: bytes, max_staleness: float = 0.0) -> None:
        self._path = path
        self._max_staleness = max_staleness
        self._checked = -1.0
        self._integrity = Integrity(master_key)
        # The service calls in from the event loop and from worker threads.
        self._lock = threading.Lock()
        self._data_version = -1
        # None for a key whose row failed its check: known, and refused.
        self._keys: dict[str, KeyInfo | None] | None = None
        self._tokens: dict[bytes, tuple[bytes, TokenInfo]] | None = None
        self._material: dict[tuple[str, int], bytes] = {}
        self._born: dict[str, float] = {}  # _rows.forget_replaced
        if not os.path.lexists(path):
            _sqlite_file.create(path, self._integrity)
        with self._locked():
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            with self._locked():
                legacy = KeyWrapper(master_key)
                _sqlite_file.open_file(self._conn, path, self._integrity, legacy)
        except BaseException:
            self._conn.close()
            raise

    @classmethod
    def create_new(
        cls, path: Path, master_key: bytes, provision: Callable[[SQLiteKeyStore], None]
    ) -> bool:
        """Create the keystore with what ``provision`` writes into it, in one step.

        False, with nothing written, if the file exists (another process may have just
        created it).
        """
        if os.path.lexists(path):
            return False

        def fill(tmp: Path) -> None:
            with closing(cls(tmp, master_key)) as store:
                provision(store)

        return _sqlite_file.create(path, Integrity(master_key), fill)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._material.clear()
            self._keys = self._tokens = None

    def health(self) -> KeyStoreHealth:
        # A local file: every read checks it, so the cache is never older than max_staleness.
        return KeyStoreHealth(True, time.monotonic(), "none", 0)

    # -- keys

    def create_key(
        self,
        name: str,
        algorithm: Algorithm,
        exportable: bool = False,
        max_encryptions: int | None = None,
        auto_rotate_period: float | None = None,
    ) -> KeyInfo:
        if not valid_key_name(name):
            raise InvalidRequest(f"invalid key name {name!r}")
        if not isinstance(algorithm, Algorithm):
            raise InvalidRequest(f"unknown algorithm {algorithm!r}")
        # As SQLite hands them back (exportable as 0 or 1), so the MAC verifies on reading.
        row = (name, algorithm.value, int(exportable), 1, time.time())
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM keys WHERE name = ?", (name,)).fetchone():
                raise KeyExists(f"key {name!r} already exists")
            # What an earlier release still counted against a deleted key of this name (the
            # table has no foreign key to refuse it; this one's writes name the key's identity,
            # _sqlite_usage) is not this key's.
            db.execute("DELETE FROM key_usage WHERE name = ?", (name,))
            db.execute(
                "INSERT INTO keys VALUES (?, ?, ?, ?, ?, ?)",
                (*row, self._integrity.mac(KEY_ROW, row)),
            )
            self._add_version(db, name, 1, algorithm, exportable)
            if max_encryptions is not None or auto_rotate_period is not None:
                info = self._locked_key(db, name)
                self._write_limits(db, limits_row(info, max_encryptions, auto_rotate_period))
            return self._locked_key(db, name)

    def _write_limits(self, db: sqlite3.Connection, row: tuple[str, int, float]) -> None:
        db.execute(
            "INSERT OR REPLACE INTO key_limits VALUES (?, ?, ?, ?)",
            (*row, self._integrity.mac(LIMITS_ROW, row)),
        )

    # -- usage (``_sqlite_usage``)

    def reserve_usage(self, slot: Slot, want: int, limit: int, nbytes: int = 0) -> tuple[int, int]:
        with self._locked():
            return _sqlite_usage.reserve(self._conn, slot, want, limit, nbytes)

    def release_usage(self, slot: Slot, count: int, nbytes: int = 0) -> None:
        with self._locked():
            _sqlite_usage.release(self._conn, slot, count, nbytes)

    def reserved(self, slots: list[Slot]) -> dict[Slot, int]:
        with self._locked():
            return _sqlite_usage.reserved(self._conn, slots)

    def usage(self, name: str) -> dict[int, VersionUsage]:
        with self._locked():
            return _sqlite_usage.usage(self._conn, name)

    def _write_min_decryption(self, db: sqlite3.Connection, name: str, version: int) -> None:
        stored = db.execute(_KEY_ROW_SQL, (name,)).fetchone()
        row = (*stored[:3], version, stored[4])
        db.execute(
            "UPDATE keys SET min_decryption_version = ?, mac = ? WHERE name = ?",
            (version, self._integrity.mac(KEY_ROW, row), name),
        )

    def _write_policy(self, db: sqlite3.Connection, row: PolicyRow) -> None:
        db.execute(
            "INSERT OR REPLACE INTO key_policy (name, min_encryption_version, deletion_allowed,"
            " made_exportable, mac) VALUES (?, ?, ?, ?, ?)",
            (*row, policy_mac(self._integrity, row)),
        )

    def _delete_rows(self, db: sqlite3.Connection, name: str) -> None:
        for table in ("key_usage", "key_limits", "key_policy", "key_versions", "keys"):
            db.execute(f"DELETE FROM {table} WHERE name = ?", (name,))  # noqa: S608
        for k in [k for k in self._material if k[0] == name]:
            del self._material[k]
        self._born.pop(name, None)

    def get_key(self, name: str) -> KeyInfo:
        keys = self._keys
        if keys is None or not self._fresh():
            with self._locked():
                keys = self._key_cache()
        return present(keys, name)

    def list_keys(self) -> list[KeyInfo]:
        with self._locked():
            return [info for info in self._key_cache().values() if info is not None]

    def key_material(self, name: str, version: int) -> bytes:
        if not 1 <= version <= MAX_VERSION:
            raise KeyNotFound(f"key {name!r} version {version} not found")
        keys = self._keys
        if keys is not None and self._fresh():
            # The common case, without the lock: a fresh cache and a version seen before.
            present(keys, name)
            material = self._material.get((name, version))
            if material is not None:
                return material
        with self._locked():
            # The key's row is checked on every call; a cached version cannot change.
            info = present(self._key_cache(), name)
            material = self._material.get((name, version))
            if material is not None:
                return material
            # The version of this key (its creation time), not of one that replaced it since.
            born = [v.created_at for v in info.versions if v.version == version]
            row = self._conn.execute(
                "SELECT wrapped FROM key_versions WHERE name = ? AND version = ?"
                " AND created_at = ?",
                (name, version, born[0] if born else None),
            ).fetchone()
            if row is None:
                raise KeyNotFound(f"key {name!r} version {version} not found")
            try:
                material = self._integrity.unwrap(
                    name, version, info.algorithm, info.created_exportable, row[0]
                )
            except KeyStoreCorrupt:
                refuse(str(self._path), f"key {name!r} version {version}")
                raise
            self._material[name, version] = material
            return material

    def _add_version(
        self, db: sqlite3.Connection, name: str, version: int, alg: Algorithm, exportable: bool
    ) -> None:
        material = os.urandom(alg.spec.key_len)
        wrapped = self._integrity.wrap(name, version, alg, exportable, material)
        db.execute(
            "INSERT INTO key_versions VALUES (?, ?, ?, ?)", (name, version, wrapped, time.time())
        )

    def _locked_key(self, db: sqlite3.Connection, name: str) -> KeyInfo:
        return present(self._query_keys(db, name), name)

    def _key_cache(self) -> dict[str, KeyInfo | None]:
        self._refresh()
        if self._keys is None:
            keys = self._query_keys(self._conn)
            # Before the new cache is seen: material of a deleted key never outlives it.
            forget_replaced(self._material, self._born, keys)
            self._keys = keys
        return self._keys

    def _query_keys(
        self, db: sqlite3.Connection, name: str | None = None
    ) -> dict[str, KeyInfo | None]:
        # One statement, so the keys and their versions come from one consistent snapshot.
        where, args = (" WHERE k.name = ?", (name,)) if name is not None else ("", ())
        rows = db.execute(_KEYS_SQL + where + " ORDER BY k.name, v.version", args).fetchall()
        keys = {
            key_name: key_info(self._integrity, list(group), str(self._path))
            for key_name, group in itertools.groupby(rows, key=lambda row: row[0])
        }
        where = where.replace("k.name", "name")
        limits = db.execute(_LIMITS_SQL + where, args).fetchall()
        policies = db.execute(_POLICY_SQL + where, args).fetchall()
        keys = with_limits(self._integrity, keys, limits, str(self._path))
        return with_policy(self._integrity, keys, policies, str(self._path))

    # -- tokens

    def create_token(
        self, scopes: list[str], label: str = "", secret: str | None = None
    ) -> tuple[TokenInfo, str]:
        if isinstance(scopes, str) or not scopes or not all(map(valid_scope, scopes)):
            raise InvalidRequest(f"a token needs one or more valid scopes, not {scopes!r}")
        if secret is not None and not valid_secret(secret):
            raise InvalidRequest("a given token must be 43 or more URL-safe base64 characters")
        token_id = "tok_" + secrets.token_hex(8)
        secret = secret if secret is not None else secrets.token_urlsafe(32)
        row = (token_id, digest(secret), " ".join(scopes), label, time.time(), None)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO tokens VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*row, self._integrity.mac(TOKEN_ROW, row)),
            )
        return token_info(row), secret

    def list_tokens(self) -> list[TokenInfo]:
        with self._locked():
            return [info for _, info in self._token_cache().values()]

    def revoke_token(self, token_id: str) -> TokenInfo:
        with self._transaction() as db:
            stored = db.execute(_TOKENS_SQL + " WHERE id = ?", (token_id,)).fetchone()
            if stored is None:
                raise TokenNotFound(f"token {token_id!r} not found")
            row, mac = stored[:6], stored[6]
            if not self._integrity.verify(TOKEN_ROW, row, mac):
                # Re-signing it would make whatever was written into it genuine.
                refuse(str(self._path), f"token {token_id!r}")
                raise KeyStoreCorrupt(
                    f"token {token_id!r} fails its integrity check: it is refused already,"
                    " and is left as it is"
                )
            if row[5] is None:
                row = (*row[:5], time.time())
                db.execute(
                    "UPDATE tokens SET revoked_at = ?, mac = ? WHERE id = ?",
                    (row[5], self._integrity.mac(TOKEN_ROW, row), token_id),
                )
        return token_info(row)

    def find_token(self, secret: str) -> TokenInfo | None:
        wanted = digest(secret)
        tokens = self._tokens
        if tokens is None or not self._fresh():
            with self._locked():
                tokens = self._token_cache()
        entry = tokens.get(wanted)
        if entry is None:
            return None
        # The lookup is keyed by a SHA-256 digest, so its timing says nothing useful about
        # the secret; the final equality check is still constant-time, as the spec asks.
        stored, info = entry
        return info if hmac.compare_digest(stored, wanted) and not info.revoked else None

    def _token_cache(self) -> dict[bytes, tuple[bytes, TokenInfo]]:
        self._refresh()
        if self._tokens is None:
            tokens = {}
            # Tokens are never deleted, so rowid order is creation order, clock or no clock.
            for stored in self._conn.execute(_TOKENS_SQL + " ORDER BY rowid").fetchall():
                row, mac = stored[:6], stored[6]
                if self._integrity.verify(TOKEN_ROW, row, mac):
                    tokens[row[1]] = (row[1], token_info(row))
                else:
                    refuse(str(self._path), f"token {row[0]!r}")
            self._tokens = tokens
        return self._tokens

    # -- plumbing

    def _fresh(self) -> bool:
        """Whether the caches may be read as they are, without the lock: checked against the
        database less than ``max_staleness`` ago (``_refresh``). A cache is replaced whole,
        never changed in place, so a reader holds one consistent snapshot."""
        return time.monotonic() - self._checked < self._max_staleness

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < self._max_staleness:
            return
        self._checked = now
        # Our own commits do not change data_version; _transaction drops the cache for those.
        (version,) = self._conn.execute("PRAGMA data_version").fetchone()
        if version != self._data_version:
            self._data_version = version
            self._keys = self._tokens = None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            try:
                yield
            except sqlite3.Error as exc:
                raise KeyStoreUnavailable(f"keystore {self._path}: {exc}") from None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._locked():
            # IMMEDIATE takes the write lock up front, so read-then-write cannot race.
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            finally:
                self._keys = self._tokens = None
