"""The embedded keystore: one SQLite file in WAL mode, shared safely by several processes."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sealflow.engine import Algorithm
from sealflow.service.envelope import valid_name

from ._base import KeyInfo, KeyVersionInfo, TokenInfo, valid_scope, valid_secret
from ._masterkey import KeyWrapper
from .errors import (
    InvalidRequest,
    KeyExists,
    KeyNotFound,
    KeyStoreUnavailable,
    TokenNotFound,
)

SCHEMA_VERSION = 1
_MAX_VERSION = 0xFFFFFFFF  # four bytes in the envelope and in the wrapping AAD
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS keys (name TEXT PRIMARY KEY, algorithm TEXT NOT NULL,"
    " exportable INTEGER NOT NULL, min_decryption_version INTEGER NOT NULL,"
    " created_at REAL NOT NULL)",
    # Append-only: rows are never updated or deleted, and the primary key refuses reuse.
    "CREATE TABLE IF NOT EXISTS key_versions (name TEXT NOT NULL, version INTEGER NOT NULL,"
    " wrapped BLOB NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (name, version))",
    "CREATE TABLE IF NOT EXISTS tokens (id TEXT PRIMARY KEY, digest BLOB NOT NULL UNIQUE,"
    " scopes TEXT NOT NULL, label TEXT NOT NULL, created_at REAL NOT NULL, revoked_at REAL)",
)
_KEYS_SQL = (
    "SELECT k.name, k.algorithm, k.exportable, k.min_decryption_version, v.version, v.created_at"
    " FROM keys k JOIN key_versions v ON v.name = k.name"
)
_TOKENS_SQL = "SELECT id, digest, scopes, label, created_at, revoked_at FROM tokens"


class SQLiteKeyStore:
    """A ``KeyStore`` whose reads come from memory, refreshed when another connection commits.

    ``PRAGMA data_version`` changes whenever another connection (in this process or another)
    has committed, so one cheap pragma per call keeps the cache exact. Unwrapped material is
    kept across refreshes: a key version is immutable once written.

    ``max_staleness`` (seconds) skips the pragma when the last one is more recent: at
    thousands of requests a second one pragma (~4 us) per request was a tenth of the cost
    of a small request, and a write from another process a millisecond late is invisible
    to anyone. The default, 0, checks on every call.
    """

    def __init__(self, path: Path, master_key: bytes, max_staleness: float = 0.0) -> None:
        self._path = path
        self._max_staleness = max_staleness
        self._checked = -1.0
        self._wrapper = KeyWrapper(master_key)
        # The service calls in from the event loop and from worker threads.
        self._lock = threading.Lock()
        self._data_version = -1
        self._keys: dict[str, KeyInfo] | None = None
        self._tokens: dict[bytes, tuple[bytes, TokenInfo]] | None = None
        self._material: dict[tuple[str, int], bytes] = {}
        with self._locked():
            _create_private(path)
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            self._open()
        except BaseException:
            self._conn.close()
            raise

    def _open(self) -> None:
        with self._locked():
            self._conn.execute("PRAGMA busy_timeout = 10000")
            _enable_wal(self._conn)
            # Writes are rare and a lost key version loses data: pay for an fsync per commit.
            self._conn.execute("PRAGMA synchronous = FULL")
        with self._transaction() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                meta = {"schema_version": SCHEMA_VERSION, "check": self._wrapper.check_blob()}
                db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise KeyStoreUnavailable(f"keystore {self._path} has an unknown schema version")
        if not self._wrapper.opens(meta.get("check", b"")):
            raise KeyStoreUnavailable(f"the master key does not open keystore {self._path}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._material.clear()
            self._keys = self._tokens = None

    # -- keys

    def create_key(self, name: str, algorithm: Algorithm, exportable: bool = False) -> KeyInfo:
        if not valid_name(name):
            raise InvalidRequest(f"invalid key name {name!r}")
        if not isinstance(algorithm, Algorithm):
            raise InvalidRequest(f"unknown algorithm {algorithm!r}")
        row = (name, algorithm.value, exportable, time.time())
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM keys WHERE name = ?", (name,)).fetchone():
                raise KeyExists(f"key {name!r} already exists")
            db.execute("INSERT INTO keys VALUES (?, ?, ?, 1, ?)", row)
            self._add_version(db, name, 1, algorithm)
            return _query_keys(db, name)[name]

    def rotate_key(self, name: str) -> KeyInfo:
        with self._transaction() as db:
            # Inside BEGIN IMMEDIATE no other writer can take the same next version.
            info = self._locked_key(db, name)
            self._add_version(db, name, info.latest + 1, info.algorithm)
            return _query_keys(db, name)[name]

    def set_min_decryption_version(self, name: str, version: int) -> KeyInfo:
        with self._transaction() as db:
            info = self._locked_key(db, name)
            if not 1 <= version <= info.latest:
                raise InvalidRequest(
                    f"min_decryption_version must be between 1 and {info.latest}, not {version}"
                )
            db.execute("UPDATE keys SET min_decryption_version = ? WHERE name = ?", (version, name))
            return _query_keys(db, name)[name]

    def get_key(self, name: str) -> KeyInfo:
        with self._locked():
            info = self._key_cache().get(name)
        if info is None:
            raise KeyNotFound(f"key {name!r} not found")
        return info

    def list_keys(self) -> list[KeyInfo]:
        with self._locked():
            return list(self._key_cache().values())

    def key_material(self, name: str, version: int) -> bytes:
        if not 1 <= version <= _MAX_VERSION:
            raise KeyNotFound(f"key {name!r} version {version} not found")
        # No data_version check: a cached version cannot change, and a miss reads the file.
        with self._locked():
            material = self._material.get((name, version))
            if material is not None:
                return material
            row = self._conn.execute(
                "SELECT k.algorithm, v.wrapped FROM key_versions v JOIN keys k ON k.name = v.name"
                " WHERE v.name = ? AND v.version = ?",
                (name, version),
            ).fetchone()
            if row is None:
                raise KeyNotFound(f"key {name!r} version {version} not found")
            material = self._wrapper.unwrap(name, version, row[1])
            if len(material) != Algorithm(row[0]).spec.key_len:
                raise KeyStoreUnavailable(f"key {name!r} version {version} has the wrong length")
            self._material[name, version] = material
            return material

    def _add_version(self, db: sqlite3.Connection, name: str, version: int, alg: Algorithm) -> None:
        wrapped = self._wrapper.wrap(name, version, os.urandom(alg.spec.key_len))
        row = (name, version, wrapped, time.time())
        db.execute("INSERT INTO key_versions VALUES (?, ?, ?, ?)", row)

    def _locked_key(self, db: sqlite3.Connection, name: str) -> KeyInfo:
        info = _query_keys(db, name).get(name)
        if info is None:
            raise KeyNotFound(f"key {name!r} not found")
        return info

    def _key_cache(self) -> dict[str, KeyInfo]:
        self._refresh()
        if self._keys is None:
            self._keys = _query_keys(self._conn)
        return self._keys

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
        row = (token_id, _digest(secret), " ".join(scopes), label, time.time(), None)
        with self._transaction() as db:
            db.execute("INSERT INTO tokens VALUES (?, ?, ?, ?, ?, ?)", row)
        return _token(row), secret

    def list_tokens(self) -> list[TokenInfo]:
        with self._locked():
            return [info for _, info in self._token_cache().values()]

    def revoke_token(self, token_id: str) -> TokenInfo:
        with self._transaction() as db:
            db.execute(
                "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (time.time(), token_id),
            )
            row = db.execute(_TOKENS_SQL + " WHERE id = ?", (token_id,)).fetchone()
        if row is None:
            raise TokenNotFound(f"token {token_id!r} not found")
        return _token(row)

    def find_token(self, secret: str) -> TokenInfo | None:
        digest = _digest(secret)
        with self._locked():
            entry = self._token_cache().get(digest)
        if entry is None:
            return None
        # The lookup is keyed by a SHA-256 digest, so its timing says nothing useful about
        # the secret; the final equality check is still constant-time, as the spec asks.
        stored, info = entry
        return info if hmac.compare_digest(stored, digest) and not info.revoked else None

    def _token_cache(self) -> dict[bytes, tuple[bytes, TokenInfo]]:
        self._refresh()
        if self._tokens is None:
            # Tokens are never deleted, so rowid order is creation order, clock or no clock.
            rows = self._conn.execute(_TOKENS_SQL + " ORDER BY rowid").fetchall()
            self._tokens = {row[1]: (row[1], _token(row)) for row in rows}
        return self._tokens

    # -- plumbing

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


def _enable_wal(db: sqlite3.Connection) -> None:
    # Turning a new file to WAL needs it to itself and SQLite does not wait for that (no busy
    # handler), so processes opening a new keystore together retry; later opens are no-ops.
    for attempt in range(200):
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or attempt == 199:
                raise
        time.sleep(0.05)


def _query_keys(db: sqlite3.Connection, name: str | None = None) -> dict[str, KeyInfo]:
    # One statement, so the keys and their versions come from one consistent snapshot.
    where, args = (" WHERE k.name = ?", (name,)) if name is not None else ("", ())
    rows = db.execute(_KEYS_SQL + where + " ORDER BY k.name, v.version", args).fetchall()
    keys = {}
    for key_name, group in itertools.groupby(rows, key=lambda row: row[0]):
        versions = list(group)
        _, algorithm, exportable, min_version, _, _ = versions[0]
        keys[key_name] = KeyInfo(
            name=key_name,
            algorithm=Algorithm(algorithm),
            exportable=bool(exportable),
            min_decryption_version=min_version,
            versions=tuple(KeyVersionInfo(v[4], v[5]) for v in versions),
        )
    return keys


def _token(row: tuple[Any, ...]) -> TokenInfo:
    token_id, _, scopes, label, created_at, revoked_at = row
    return TokenInfo(token_id, tuple(scopes.split()), label, created_at, revoked_at is not None)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _create_private(path: Path) -> None:
    """Create a missing database file as 0600 (SQLite gives -wal and -shm the same mode)."""
    # Any other problem (a directory, no permission) is reported by sqlite3.connect.
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
