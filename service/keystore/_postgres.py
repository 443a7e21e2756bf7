"""The shared keystore: PostgreSQL, for replicas on several hosts.

Reads never touch the database: keys (with their unwrapped material) and tokens are held in
memory, reloaded whole when another process changed them (``_pg_watch``: LISTEN/NOTIFY, and
polling when the notification connection is lost) and right after this process's own writes.
Writes are one transaction each, on a connection from a ``psycopg_pool`` pool; every write
locks the one ``sealflow_changes`` row, so writes from all replicas are serialised and the
next version of a key is always latest + 1, never a duplicate or a gap. The schema is
``_pg_schema``'s; what the master key vouches for in each row is ``_integrity``'s, exactly as
in the SQLite store.
"""

from __future__ import annotations

import contextlib
import hmac
import itertools
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from sealflow.engine import Algorithm

from . import _pg_schema, _pg_usage
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
from ._pg_watch import Watcher
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

_KEYS_SQL = (
    "SELECT k.name, k.algorithm, k.exportable, k.min_decryption_version, k.created_at, k.mac,"
    " v.version, v.created_at FROM sealflow_keys k"
    " JOIN sealflow_key_versions v ON v.name = k.name"
)
_LIMITS_SQL = "SELECT name, max_encryptions, auto_rotate_period, mac FROM sealflow_key_limits"
_POLICY_SQL = (
    "SELECT name, min_encryption_version, deletion_allowed, made_exportable, mac"
    " FROM sealflow_key_policy"
)
_TOKENS_SQL = "SELECT id, digest, scopes, label, created_at, revoked_at, mac FROM sealflow_tokens"
# Seconds a write waits for a connection before it is KeyStoreUnavailable (503).
_WRITE_TIMEOUT = 5.0

Db = psycopg.Connection[tuple[Any, ...]]


def redact(url: str) -> str:
    """The URL without its password, for logs and messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(unparsable URL)"
    params.pop("password", None)
    return make_conninfo("", **params)


class PostgresKeyStore(VersionWrites[Db]):
    """A ``KeyStore`` on PostgreSQL; see the module docstring.

    ``provision`` runs in the transaction that creates the schema, and only then: the first
    start of a new keystore puts in it what it must hold (key ``default``, the root token)
    in the same step as the tables, so no replica ever sees an empty keystore.
    ``watch=False`` (the CLI) reloads before every read instead of listening.
    """

    def __init__(
        self,
        url: str,
        master_key: bytes,
        *,
        provision: Callable[[PostgresKeyStore], None] | None = None,
        watch: bool = True,
        poll_interval: float = 0.5,
    ) -> None:
        self._url = url
        self._where = redact(url)
        self._integrity = Integrity(master_key)
        self._keys: dict[str, KeyInfo | None] = {}
        self._tokens: dict[bytes, tuple[bytes, TokenInfo]] = {}
        self._token_list: list[TokenInfo] = []
        self._material: dict[tuple[str, int], bytes] = {}
        self._born: dict[str, float] = {}  # _rows.forget_replaced
        self._generation = -1
        self._reload_lock = threading.Lock()
        self._ambient: Db | None = None  # the open transaction of provision
        self._closed = False
        self.created = False
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=4,
            open=False,
            name="sealflow-keystore",
            check=ConnectionPool.check_connection,
            kwargs={"connect_timeout": 5, "application_name": "sealflow-keystore"},
        )
        try:
            self._pool.open(wait=True, timeout=10)
        except psycopg.Error as exc:
            self._pool.close()
            reason = _reason(exc)
            raise KeyStoreUnavailable(f"cannot open keystore {self._where}: {reason}") from None
        try:
            with self._transaction(bump=False) as db:
                self.created = _pg_schema.migrate(db, self._integrity, self._where)
                if self.created and provision is not None:
                    self._ambient = db
                    try:
                        provision(self)
                    finally:
                        self._ambient = None
            self._sync(force=True)
        except BaseException:
            self._pool.close()
            raise
        self._watcher = Watcher(url, self._sync, poll_interval) if watch else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._watcher is not None:
            self._watcher.close()
        self._pool.close()
        self._material.clear()
        self._keys, self._tokens, self._token_list = {}, {}, []

    def health(self) -> KeyStoreHealth:
        watcher = self._watcher
        if watcher is None:
            return KeyStoreHealth(True, time.monotonic(), "none", 0)
        return KeyStoreHealth(watcher.reachable, watcher.synced_at, watcher.mode, watcher.fallbacks)

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
        row = (name, algorithm.value, int(exportable), 1, time.time())
        with self._transaction() as db:
            inserted = db.execute(
                "INSERT INTO sealflow_keys VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (name) DO NOTHING",
                (*row, self._integrity.mac(KEY_ROW, row)),
            )
            if inserted.rowcount != 1:
                raise KeyExists(f"key {name!r} already exists")
            self._add_version(db, name, 1, algorithm, exportable)
            if max_encryptions is not None or auto_rotate_period is not None:
                info = self._locked_key(db, name)
                self._write_limits(db, limits_row(info, max_encryptions, auto_rotate_period))
            return self._locked_key(db, name)

    def _write_limits(self, db: Db, row: tuple[str, int, float]) -> None:
        db.execute(
            "INSERT INTO sealflow_key_limits VALUES (%s, %s, %s, %s) ON CONFLICT (name) DO UPDATE"
            " SET max_encryptions = excluded.max_encryptions,"
            " auto_rotate_period = excluded.auto_rotate_period, mac = excluded.mac",
            (*row, self._integrity.mac(LIMITS_ROW, row)),
        )

    # -- usage (``_pg_usage``): no change counted or announced, caches do not hold it

    def reserve_usage(self, slot: Slot, want: int, limit: int, nbytes: int = 0) -> tuple[int, int]:
        with self._transaction(bump=False) as db:
            return _pg_usage.reserve(db, slot, want, limit, nbytes)

    def release_usage(self, slot: Slot, count: int, nbytes: int = 0) -> None:
        with self._transaction(bump=False) as db:
            _pg_usage.release(db, slot, count, nbytes)

    def reserved(self, slots: list[Slot]) -> dict[Slot, int]:
        if not slots:
            return {}
        with self._transaction(bump=False) as db:
            return _pg_usage.reserved(db, slots)

    def usage(self, name: str) -> dict[int, VersionUsage]:
        with self._transaction(bump=False) as db:
            return _pg_usage.usage(db, name)

    def _write_min_decryption(self, db: Db, name: str, version: int) -> None:
        stored = db.execute(
            "SELECT name, algorithm, exportable, min_decryption_version, created_at"
            " FROM sealflow_keys WHERE name = %s",
            (name,),
        ).fetchone()
        assert stored is not None  # locked by the caller
        row = (*stored[:3], version, stored[4])
        db.execute(
            "UPDATE sealflow_keys SET min_decryption_version = %s, mac = %s WHERE name = %s",
            (version, self._integrity.mac(KEY_ROW, row), name),
        )

    def _write_policy(self, db: Db, row: PolicyRow) -> None:
        db.execute(
            "INSERT INTO sealflow_key_policy (name, min_encryption_version, deletion_allowed,"
            " made_exportable, mac) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE"
            " SET min_encryption_version = excluded.min_encryption_version,"
            " deletion_allowed = excluded.deletion_allowed,"
            " made_exportable = excluded.made_exportable, mac = excluded.mac",
            (*row, policy_mac(self._integrity, row)),
        )

    def _delete_rows(self, db: Db, name: str) -> None:
        # Children first (foreign keys); the change is announced at commit like any write, and
        # every replica's reload drops the key and its material (_load, forget_replaced).
        tables = ("usage", "key_limits", "key_policy", "key_versions", "keys")
        for table in tables:
            db.execute(f"DELETE FROM sealflow_{table} WHERE name = %s", (name,))  # noqa: S608

    def get_key(self, name: str) -> KeyInfo:
        self._read()
        return present(self._keys, name)

    def list_keys(self) -> list[KeyInfo]:
        self._read()
        return [info for info in self._keys.values() if info is not None]

    def key_material(self, name: str, version: int) -> bytes:
        self._read()
        info = present(self._keys, name)
        material = self._material.get((name, version))
        if material is not None:
            return material
        if not 1 <= version <= MAX_VERSION or all(v.version != version for v in info.versions):
            raise KeyNotFound(f"key {name!r} version {version} not found")
        if name not in self._keys:  # deleted while this call ran (the cache was reloaded)
            raise KeyNotFound(f"key {name!r} not found")
        # Loaded with its key, so only a version that failed to unwrap is missing.
        raise KeyStoreCorrupt(f"key {name!r} version {version} fails its integrity check")

    def _add_version(
        self, db: Db, name: str, version: int, alg: Algorithm, exportable: bool
    ) -> None:
        material = os.urandom(alg.spec.key_len)
        wrapped = self._integrity.wrap(name, version, alg, exportable, material)
        db.execute(
            "INSERT INTO sealflow_key_versions VALUES (%s, %s, %s, %s)",
            (name, version, wrapped, time.time()),
        )

    def _locked_key(self, db: Db, name: str) -> KeyInfo:
        if db.execute("SELECT 1 FROM sealflow_keys WHERE name = %s FOR UPDATE", (name,)).rowcount:
            rows = db.execute(_KEYS_SQL + " WHERE k.name = %s ORDER BY v.version", (name,))
            keys = {name: key_info(self._integrity, rows.fetchall(), self._where)}
            limits = db.execute(_LIMITS_SQL + " WHERE name = %s", (name,)).fetchall()
            policies = db.execute(_POLICY_SQL + " WHERE name = %s", (name,)).fetchall()
            keys = with_limits(self._integrity, keys, limits, self._where)
            keys = with_policy(self._integrity, keys, policies, self._where)
        else:
            keys = {}
        return present(keys, name)

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
                "INSERT INTO sealflow_tokens (id, digest, scopes, label, created_at, revoked_at,"
                " mac) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (*row, self._integrity.mac(TOKEN_ROW, row)),
            )
        return token_info(row), secret

    def list_tokens(self) -> list[TokenInfo]:
        self._read()
        return list(self._token_list)

    def revoke_token(self, token_id: str) -> TokenInfo:
        with self._transaction() as db:
            stored = db.execute(_TOKENS_SQL + " WHERE id = %s FOR UPDATE", (token_id,)).fetchone()
            if stored is None:
                raise TokenNotFound(f"token {token_id!r} not found")
            row, mac = tuple(stored[:6]), stored[6]
            if not self._integrity.verify(TOKEN_ROW, row, mac):
                refuse(self._where, f"token {token_id!r}")
                raise KeyStoreCorrupt(
                    f"token {token_id!r} fails its integrity check: it is refused already,"
                    " and is left as it is"
                )
            if row[5] is None:
                row = (*row[:5], time.time())
                db.execute(
                    "UPDATE sealflow_tokens SET revoked_at = %s, mac = %s WHERE id = %s",
                    (row[5], self._integrity.mac(TOKEN_ROW, row), token_id),
                )
        return token_info(row)

    def find_token(self, secret: str) -> TokenInfo | None:
        self._read()
        wanted = digest(secret)
        entry = self._tokens.get(wanted)
        if entry is None:
            return None
        stored, info = entry
        return info if hmac.compare_digest(stored, wanted) and not info.revoked else None

    # -- migration

    def import_rows(
        self,
        keys: list[tuple[object, ...]],
        versions: list[tuple[object, ...]],
        tokens: list[tuple[object, ...]],
        limits: list[tuple[object, ...]],
        usage: list[tuple[object, ...]],
        policies: list[tuple[object, ...]],
    ) -> None:
        """Rows of another store, as stored (``_migrate``), in one transaction, into an empty
        keystore: KeyStoreUnavailable if it holds keys or tokens already."""
        with self._transaction() as db:
            held = db.execute(
                "SELECT (SELECT count(*) FROM sealflow_keys),"
                " (SELECT count(*) FROM sealflow_tokens)"
            ).fetchone()
            if held is not None and any(held):
                raise KeyStoreUnavailable(
                    f"keystore {self._where} is not empty ({held[0]} keys, {held[1]} tokens):"
                    " migrate into a new database, before any replica starts on it"
                )
            with db.cursor() as cur:
                cur.executemany("INSERT INTO sealflow_keys VALUES (%s, %s, %s, %s, %s, %s)", keys)
                cur.executemany(
                    "INSERT INTO sealflow_key_versions VALUES (%s, %s, %s, %s)", versions
                )
                cur.executemany(
                    "INSERT INTO sealflow_tokens (id, digest, scopes, label, created_at,"
                    " revoked_at, mac) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    tokens,
                )
                cur.executemany("INSERT INTO sealflow_key_limits VALUES (%s, %s, %s, %s)", limits)
                cur.executemany("INSERT INTO sealflow_usage VALUES (%s, %s, %s, %s)", usage)
                cur.executemany(
                    "INSERT INTO sealflow_key_policy (name, min_encryption_version,"
                    " deletion_allowed, made_exportable, mac) VALUES (%s, %s, %s, %s, %s)",
                    policies,
                )

    # -- the cache

    def _read(self) -> None:
        """Before a read: nothing with a watcher (the cache is current), else a sync."""
        if self._closed:
            raise KeyStoreUnavailable(f"keystore {self._where} is closed")
        if self._watcher is None:
            self._sync()

    def _sync(self, force: bool = False) -> None:
        """Reload the cache if the keystore changed since the last load (or ``force``)."""
        with self._reload_lock:
            try:
                with self._pool.connection(timeout=_WRITE_TIMEOUT) as db, db.transaction():
                    db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    row = db.execute("SELECT generation FROM sealflow_changes").fetchone()
                    generation = int(row[0]) if row else 0
                    if generation == self._generation and not force:
                        return
                    keys = db.execute(_KEYS_SQL + " ORDER BY k.name, v.version").fetchall()
                    limits = db.execute(_LIMITS_SQL).fetchall()
                    policies = db.execute(_POLICY_SQL).fetchall()
                    tokens = db.execute(_TOKENS_SQL + " ORDER BY seq").fetchall()
            except psycopg.Error as exc:
                raise KeyStoreUnavailable(f"keystore {self._where}: {_reason(exc)}") from None
            self._load(keys, limits, policies, tokens)
            self._generation = generation

    def _load(
        self,
        key_rows: list[tuple[Any, ...]],
        limit_rows: list[tuple[Any, ...]],
        policy_rows: list[tuple[Any, ...]],
        token_rows: list[tuple[Any, ...]],
    ) -> None:
        keys = {
            name: key_info(self._integrity, list(group), self._where)
            for name, group in itertools.groupby(key_rows, key=lambda row: row[0])
        }
        keys = with_limits(self._integrity, keys, limit_rows, self._where)
        keys = with_policy(self._integrity, keys, policy_rows, self._where)
        # A deleted key's material goes with it (and is never taken for a new key's): pruned in
        # a copy, so that readers of the old cache keep what they read meanwhile.
        material = dict(self._material)
        forget_replaced(material, self._born, keys)
        wanted = [
            (info, v.version, v.created_at)
            for info in keys.values()
            if info is not None
            for v in info.versions
            if (info.name, v.version) not in material
        ]
        if wanted:
            self._unwrap(wanted, material)
        tokens: dict[bytes, tuple[bytes, TokenInfo]] = {}
        token_list = []
        for stored in token_rows:
            row, mac = tuple(stored[:6]), stored[6]
            if self._integrity.verify(TOKEN_ROW, row, mac):
                info = token_info(row)
                tokens[row[1]] = (row[1], info)
                token_list.append(info)
            else:
                refuse(self._where, f"token {row[0]!r}")
        # Replaced whole, never changed in place: a reader holds one consistent snapshot. The
        # material first: a reader of the new keys never finds an old key's material.
        self._material = material
        self._keys, self._tokens, self._token_list = keys, tokens, token_list

    def _unwrap(
        self, wanted: list[tuple[KeyInfo, int, float]], material: dict[tuple[str, int], bytes]
    ) -> None:
        """Unwrap versions not seen before (a version never changes while its key lives); the
        creation time picks the version loaded, not one of a key made since in its place."""
        with self._pool.connection(timeout=_WRITE_TIMEOUT) as db:
            for info, version, born in wanted:
                row = db.execute(
                    "SELECT wrapped FROM sealflow_key_versions WHERE name = %s AND version = %s"
                    " AND created_at = %s",
                    (info.name, version, born),
                ).fetchone()
                try:
                    if row is None:
                        raise KeyStoreCorrupt(f"key {info.name!r} version {version} vanished")
                    material[info.name, version] = self._integrity.unwrap(
                        info.name, version, info.algorithm, info.created_exportable, row[0]
                    )
                except KeyStoreCorrupt:
                    refuse(self._where, f"key {info.name!r} version {version}")

    @contextmanager
    def _transaction(self, bump: bool = True) -> Iterator[Db]:
        """One write transaction; the cache is reloaded after it commits.

        ``bump``: count the change and NOTIFY the other processes (at commit).
        """
        if self._ambient is not None:
            yield self._ambient
            return
        if self._closed:
            raise KeyStoreUnavailable(f"keystore {self._where} is closed")
        try:
            with self._pool.connection(timeout=_WRITE_TIMEOUT) as db, db.transaction():
                if bump:
                    db.execute("UPDATE sealflow_changes SET generation = generation + 1")
                    db.execute(f"NOTIFY {_pg_schema.CHANNEL}")
                yield db
        except psycopg.Error as exc:
            raise KeyStoreUnavailable(f"keystore {self._where}: {_reason(exc)}") from None
        if bump:
            # Written; if the reload fails the watcher reloads once the database answers again.
            with contextlib.suppress(KeyStoreUnavailable):
                self._sync()


def _reason(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
