"""The embedded keystore: one SQLite file in WAL mode, shared safely by several processes.

What this store does its own way: its connection, its dialect of the shared SQL, and its cache
with its freshness check (``PRAGMA data_version``). Its writes are ``_writes``'s and its rows
``_tables``'s, as for every store; the file itself (creation, checks at open, the upgrade from
schema 1) is ``_sqlite_file``'s; what the master key vouches for in each row is
``_integrity``'s.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path

from . import _sqlite_file
from ._approle_rows import AppRoleTables
from ._base import KeyInfo, KeyStoreHealth, Slot, TokenInfo
from ._cert_rows import CertTables
from ._dialect import Dialect, Sql, TableNames
from ._integrity import Integrity
from ._kek_follow import FOLLOWED, follow
from ._masterkey import KeyWrapper
from ._rows import MAX_VERSION, forget_replaced, live_token, present, usable
from ._snapshot import Snapshot, Store
from ._tables import Tables
from ._writes import Writes
from .errors import DriverErrors, KeyNotFound

# No row locks: BEGIN IMMEDIATE makes a write transaction the only writer of the whole file.
# Usage rows are read whole (``_usage_rows.reserved`` keeps the slots asked for). Rowid order
# is creation order, clock or no clock: a new row's rowid is above every row there (only
# expired tokens are ever deleted, ``sweep_tokens``; a rowid SQLite reuses is above the rest).
_SQL = Sql(
    Dialect(
        "?",
        TableNames(
            "keys", "key_versions", "tokens", "key_limits", "key_policy", "key_usage", "meta"
        ),
        for_update="",
        for_share="",
        creation_order="rowid",
        slots=lambda slots: ("", ()),
    )
)
_SNAPSHOT = Store("?", lambda table: table, "rowid")

Rows = list[tuple[object, ...]]


def _errors(what: str) -> DriverErrors:
    """sqlite3's errors as keystore errors: the one mapping, around every call into SQLite."""
    return DriverErrors(sqlite3.Error, what)


class SQLiteKeyStore(Writes[sqlite3.Connection]):
    """A ``KeyStore`` whose reads come from memory, refreshed when another connection commits.

    ``PRAGMA data_version`` changes whenever another connection (in this process or another)
    has committed, so one cheap pragma per call keeps the cache exact. Every row is checked
    against its MAC when it is read into the cache; unwrapped material is kept across
    refreshes by key identity (``Slot``: a key version is immutable while its key lives),
    behind its key's checked row, and dropped when a refresh finds its key deleted
    (``_rows.forget_replaced``).

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
        self._tables = Tables(_SQL, self._integrity, str(path))
        self._approle = AppRoleTables("?", "", "", self._integrity, str(path))
        self._cert = CertTables("?", "", "", self._integrity, str(path))
        self._errors = _errors(f"keystore {path}")
        # The service calls in from the event loop and from worker threads.
        self._lock = threading.Lock()
        self._data_version = -1
        # None for a key whose row failed its check: known, and refused.
        self._keys: dict[str, KeyInfo | None] | None = None
        self._tokens: dict[bytes, tuple[bytes, TokenInfo]] | None = None
        self._material: dict[Slot, bytes] = {}  # by key identity: _rows.forget_replaced
        if not os.path.lexists(path):
            with _errors(f"cannot create keystore {path}"):
                _sqlite_file.create(path, self._integrity)
        with self._errors:
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            with self._connection() as db:
                if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
                    self._follow(db)
                _sqlite_file.open_file(db, path, self._integrity, KeyWrapper(master_key))
            self._upgrade_token_macs()  # first: every read of tokens checks the new MAC
            self._grant_root_export()
        except BaseException:
            self._conn.close()
            raise

    @classmethod
    def create_new(
        cls,
        path: Path,
        master_key: bytes,
        provision: Callable[[SQLiteKeyStore], None],
        meta: Mapping[str, bytes] | None = None,
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

        with _errors(f"cannot create keystore {path}"):
            return _sqlite_file.create(path, Integrity(master_key), fill, meta)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._material.clear()
            self._keys = self._tokens = None

    def health(self) -> KeyStoreHealth:
        # A local file: every read checks it, so the cache is never older than max_staleness.
        return KeyStoreHealth(True, time.monotonic(), "none", 0)

    def stale(self, max_age: float) -> bool:
        return False  # a local file, read directly: never out of date for long

    # -- reads, from the cache
    #
    # A cache may be read as it is, without the lock, while it was checked against the
    # database less than ``max_staleness`` ago (``_refresh``): the test spelled out in each
    # read below (``# fresh``), a call less per read on every small request. A cache is
    # replaced whole, never changed in place, so a reader holds one consistent snapshot.

    def get_key(self, name: str) -> KeyInfo:
        keys = self._keys
        if keys is None or time.monotonic() - self._checked >= self._max_staleness:  # fresh
            with self._connection():
                keys = self._key_cache()
        return present(keys, name)

    def list_keys(self) -> list[KeyInfo]:
        with self._connection():
            return [info for info in self._key_cache().values() if info is not None]

    def key_material(self, name: str, version: int) -> bytes:
        return self._material_of(name, None, version)

    def stored_material(self, name: str, version: int) -> bytes:
        """``key_material`` of a soft-deleted key too: for ``_migrate``'s check only."""
        return self._material_of(name, None, version, in_use=False)

    def material(self, slot: Slot) -> bytes:
        return self._material_of(slot.name, slot.born, slot.version)

    def _material_of(
        self, name: str, born: float | None, version: int, in_use: bool = True
    ) -> bytes:
        """A version's material, of the key born then (``born`` None: the key of the name now);
        ``in_use``: refused for a soft-deleted key (``_rows.usable``)."""
        if not 1 <= version <= MAX_VERSION:
            raise KeyNotFound(f"key {name!r} version {version} not found")
        keys = self._keys
        if keys is not None and time.monotonic() - self._checked < self._max_staleness:  # fresh
            # The common case, without the lock: a fresh cache and a version seen before.
            info = present(keys, name)
            usable(info, version, in_use)
            if born is None or info.born == born:
                material = self._material.get(info.slot(version))
                if material is not None:
                    return material
        with self._connection() as db:
            # The key's row is checked on every call; a cached version cannot change.
            info = present(self._key_cache(), name)
            usable(info, version, in_use)
            if born is not None and info.born != born:
                raise KeyNotFound(f"key {name!r} not found (deleted; a new key has its name)")
            slot = info.slot(version)
            material = self._material.get(slot)
            if material is None:
                material = self._tables.material(db, info, version)
                if material is None:
                    raise KeyNotFound(f"key {name!r} version {version} not found")
                self._material[slot] = material
            return material

    def list_tokens(self) -> list[TokenInfo]:
        with self._connection():
            return [info for _, info in self._token_cache().values()]

    def find_token(self, secret: str) -> TokenInfo | None:
        tokens = self._tokens
        if tokens is None or time.monotonic() - self._checked >= self._max_staleness:  # fresh
            with self._connection():
                tokens = self._token_cache()
        return live_token(tokens, secret)

    # -- migration

    def export_rows(self) -> tuple[Rows, Rows, Rows, Rows, Rows, Rows]:
        """Every row as stored, from one snapshot, in ``PostgresKeyStore.import_rows``'s order:
        keys, versions, tokens, limits, usage, policies (``_migrate``). Reads only."""
        statements = (
            "SELECT name, algorithm, exportable, min_decryption_version, created_at, mac,"
            " imported, allow_rotation FROM keys",
            "SELECT name, version, wrapped, created_at FROM key_versions ORDER BY name, version",
            # Rowid order is creation order (_SQL).
            "SELECT id, digest, scopes, label, created_at, revoked_at, ttl, expire_at,"
            " explicit_max_ttl, renewable, num_uses, uses, parent, orphan, mac FROM tokens"
            " ORDER BY rowid",
            # Opening the file made the tables added since schema 2, so they are there.
            "SELECT name, max_encryptions, auto_rotate_period, mac FROM key_limits",
            "SELECT name, version, reserved, bytes FROM key_usage",
            "SELECT name, min_encryption_version, deletion_allowed, made_exportable,"
            " plaintext_backup, mac, min_available_version, soft_deleted"
            " FROM key_policy",
        )
        with self._connection() as db:
            db.execute("BEGIN")  # one snapshot of every table
            try:
                keys, versions, tokens, limits, usage, policies = (
                    db.execute(statement).fetchall() for statement in statements
                )
                return keys, versions, tokens, limits, usage, policies
            finally:
                db.execute("COMMIT")

    # -- backup and restore (``_backup``)

    def snapshot(self) -> Snapshot:
        with self._connection() as db:
            # One read transaction: in WAL mode its first read fixes what every later one sees,
            # while writers go on committing.
            db.execute("BEGIN")
            try:
                return _SNAPSHOT.read(db)
            finally:
                db.execute("COMMIT")

    def restore(self, snapshot: Snapshot, replace: bool = False) -> None:
        with self._transaction() as db:
            _SNAPSHOT.put(db, snapshot, replace, str(self._path))

    # -- the cache and its freshness; called holding the connection

    def _key_cache(self) -> dict[str, KeyInfo | None]:
        self._refresh()
        if self._keys is None:
            keys = self._tables.keys(self._conn)
            # Before the new cache is seen: material of a deleted key never outlives it.
            forget_replaced(self._material, keys)
            self._keys = keys
        return self._keys

    def _token_cache(self) -> dict[bytes, tuple[bytes, TokenInfo]]:
        self._refresh()
        if self._tokens is None:
            self._tokens = self._tables.tokens(self._conn)
        return self._tokens

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
            self._follow(self._conn)

    def _follow(self, db: sqlite3.Connection) -> None:
        """The KEK generations the records say are in use (``_kek_follow``)."""
        rows = db.execute("SELECT key, value FROM meta WHERE key IN (?, ?)", FOLLOWED).fetchall()
        follow(self._integrity, dict(rows), str(self._path))

    # -- connection

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, to this thread alone, its errors mapped. Outside ``_transaction``
        each statement commits by itself."""
        with self._lock, self._errors:
            yield self._conn

    @contextmanager
    def _transaction(self, changes: bool = True) -> Iterator[sqlite3.Connection]:
        with self._connection() as db:
            # IMMEDIATE takes the write lock up front, so read-then-write cannot race.
            db.execute("BEGIN IMMEDIATE")
            try:
                # Under the write lock: a rotation's step is a write too, so this writes under
                # the KEK every reader will hold (``_kek_follow``).
                self._follow(db)
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                if changes:
                    self._keys = self._tokens = None
