"""The shared keystore: PostgreSQL, for replicas on several hosts.

Reads never touch the database: keys (with their unwrapped material) and tokens are held in
memory, reloaded whole when another process changed them (``_pg_watch``: LISTEN/NOTIFY, and
polling when the notification connection is lost) and right after this process's own writes.
Writes are one transaction each, on a connection of the store's own (``_pg_connections``: it
fails at once while the database is down, and recovers within a second); every write
locks the one ``sealflow_changes`` row, so writes from all replicas are serialised and the
next version of a key is always latest + 1, never a duplicate or a gap.

What this store does its own way: its connections, its dialect of the shared SQL, its cache reloaded
whole, and its change feed. Its writes are ``_writes``'s and its rows ``_tables``'s, as for
every store; the schema is ``_pg_schema``'s; what the master key vouches for in each row is
``_integrity``'s, exactly as in the SQLite store.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import _pg_schema
from ._approle_rows import AppRoleTables
from ._base import KeyInfo, KeyStoreHealth, Slot, TokenInfo
from ._cert_rows import CertTables
from ._dialect import Dialect, Sql, TableNames
from ._integrity import Integrity
from ._kek_follow import FOLLOWED, follow
from ._pg_connections import Connections
from ._pg_watch import Watcher
from ._rows import MAX_VERSION, forget_replaced, live_token, present, usable
from ._snapshot import Snapshot, Store
from ._tables import Tables
from ._writes import Writes
from .errors import DriverErrors, KeyNotFound, KeyStoreCorrupt, KeyStoreUnavailable

Db = psycopg.Connection[tuple[Any, ...]]


def _in_slots(slots: Sequence[Slot]) -> tuple[str, tuple[object, ...]]:
    # Only the slots asked for: usage rows of every key and version add up over a keystore's life.
    pairs = " WHERE (u.name, u.version) IN (SELECT * FROM unnest(%s::text[], %s::bigint[]))"
    return pairs, ([s.name for s in slots], [s.version for s in slots])


# Writers of every replica run side by side: rows read to be written are locked FOR UPDATE, a
# key whose usage is being reserved FOR SHARE (it cannot be deleted meanwhile). seq: creation
# order, whatever the clocks of the replicas say.
_SQL = Sql(
    Dialect(
        "%s",
        TableNames(
            "sealflow_keys",
            "sealflow_key_versions",
            "sealflow_tokens",
            "sealflow_key_limits",
            "sealflow_key_policy",
            "sealflow_usage",
            "sealflow_meta",
        ),
        for_update=" FOR UPDATE",
        for_share=" FOR SHARE",
        creation_order="seq",
        slots=_in_slots,
    )
)


# sealflow_usage: its SQLite twin is key_usage. The lock keeps every writer out of a restore's
# tables (and each restore out of another's) until it commits; readers go on.
_SNAPSHOT = Store(
    "%s",
    lambda table: "sealflow_usage" if table == "key_usage" else f"sealflow_{table}",
    "seq",
    lock="LOCK TABLE {tables} IN SHARE ROW EXCLUSIVE MODE",
)


def _errors(what: str) -> DriverErrors:
    """psycopg's errors as keystore errors: the one mapping, around every call into
    PostgreSQL, the watcher's included."""
    return DriverErrors(psycopg.Error, what)


def redact(url: str) -> str:
    """The URL without its password, for logs and messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(unparsable URL)"
    params.pop("password", None)
    return make_conninfo("", **params)


class PostgresKeyStore(Writes[Db]):
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
        meta: Mapping[str, bytes] | None = None,
        watch: bool = True,
        poll_interval: float = 0.5,
    ) -> None:
        self._url = url
        self._where = redact(url)
        self._integrity = Integrity(master_key)
        self._tables = Tables(_SQL, self._integrity, self._where)
        self._approle = AppRoleTables(
            "%s", "sealflow_", " FOR UPDATE", self._integrity, self._where
        )
        self._cert = CertTables("%s", "sealflow_", " FOR UPDATE", self._integrity, self._where)
        self._errors = _errors(f"keystore {self._where}")
        self._keys: dict[str, KeyInfo | None] = {}
        self._tokens: dict[bytes, tuple[bytes, TokenInfo]] = {}
        self._material: dict[Slot, bytes] = {}  # by key identity: _rows.forget_replaced
        self._generation = -1
        self._reload_lock = threading.Lock()  # one reload at a time (held over its queries)
        # Held only while a reload's results are put in place: a reader that must see keys and
        # material as one reload left them waits for that, never for the database.
        self._swap_lock = threading.Lock()
        self._ambient: Db | None = None  # the open transaction of provision
        self._closed = False
        self.created = False
        self._connections = Connections(url, self._errors)
        self._follows = False  # not before the schema is there: the first transaction makes it
        try:
            with self._transaction(changes=False) as db:
                made = db.execute("SELECT to_regclass('sealflow_meta') IS NOT NULL").fetchone()
                if made is not None and made[0]:
                    self._follow(db)
                elif meta is not None:
                    # A new keystore given a record (migrate): its check value is written under
                    # the generation the record names, as the copied rows are.
                    follow(self._integrity, meta, self._where)
                self.created = _pg_schema.migrate(db, self._integrity, self._where, meta)
                if self.created and provision is not None:
                    self._ambient = db
                    try:
                        provision(self)
                    finally:
                        self._ambient = None
            self._follows = True
            self._upgrade_token_macs()  # first: every read of tokens checks the new MAC
            self._grant_root_export()
            self._sync(force=True)
        except BaseException:
            self._connections.close()
            raise
        self._watcher = Watcher(url, self._sync, poll_interval, self._errors) if watch else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._watcher is not None:
            self._watcher.close()
        self._connections.close()
        self._material.clear()
        self._keys, self._tokens = {}, {}

    def health(self) -> KeyStoreHealth:
        watcher = self._watcher
        if watcher is None:
            return KeyStoreHealth(True, time.monotonic(), "none", 0)
        return KeyStoreHealth(watcher.reachable, watcher.synced_at, watcher.mode, watcher.fallbacks)

    def stale(self, max_age: float) -> bool:
        watcher = self._watcher  # None: reloaded before every read, never stale
        return watcher is not None and watcher.stale(max_age)

    # -- reads, from the cache

    def get_key(self, name: str) -> KeyInfo:
        self._read()
        return present(self._keys, name)

    def list_keys(self) -> list[KeyInfo]:
        self._read()
        return [info for info in self._keys.values() if info is not None]

    def key_material(self, name: str, version: int) -> bytes:
        self._read()
        return self._material_of(present(self._keys, name), version)

    def stored_material(self, name: str, version: int) -> bytes:
        """``key_material`` of a soft-deleted key too: for ``_migrate``'s check only."""
        self._read()
        return self._material_of(present(self._keys, name), version, in_use=False)

    def material(self, slot: Slot) -> bytes:
        self._read()
        info = present(self._keys, slot.name)
        if info.born != slot.born:
            raise KeyNotFound(f"key {slot.name!r} not found (deleted; a new key has its name)")
        return self._material_of(info, slot.version)

    def _material_of(self, info: KeyInfo, version: int, in_use: bool = True) -> bytes:
        usable(info, version, in_use)
        slot = info.slot(version)
        material = self._material.get(slot)
        if material is not None:
            return material
        name = info.name
        if not 1 <= version <= MAX_VERSION or all(v.version != version for v in info.versions):
            raise KeyNotFound(f"key {name!r} version {version} not found")
        with self._swap_lock:  # keys and material as one reload left them, together
            material, keys = self._material.get(slot), self._keys
        if material is not None:
            return material
        now = keys.get(name)
        if name not in keys or (now is not None and now.born != info.born):
            # Deleted (maybe made again) while this call ran: the cache was reloaded meanwhile.
            raise KeyNotFound(f"key {name!r} not found")
        # Loaded with its key, so only a version that failed to unwrap is missing.
        raise KeyStoreCorrupt(f"key {name!r} version {version} fails its integrity check")

    def list_tokens(self) -> list[TokenInfo]:
        self._read()
        return [info for _, info in self._tokens.values()]

    def find_token(self, secret: str) -> TokenInfo | None:
        self._read()
        return live_token(self._tokens, secret)

    # -- migration

    def import_rows(
        self,
        keys: list[tuple[object, ...]],
        versions: list[tuple[object, ...]],
        tokens: list[tuple[object, ...]],
        limits: list[tuple[object, ...]],
        usage: list[tuple[object, ...]],
        policies: list[tuple[object, ...]],
        approle: tuple[list[tuple[object, ...]], list[tuple[object, ...]]] = ([], []),
        cert_roles: list[tuple[object, ...]] | None = None,
        public_keys: list[tuple[object, ...]] | None = None,
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
                cur.executemany(
                    "INSERT INTO sealflow_keys (name, algorithm, exportable,"
                    " min_decryption_version, created_at, mac, imported, allow_rotation)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    keys,
                )
                cur.executemany(
                    "INSERT INTO sealflow_key_versions VALUES (%s, %s, %s, %s)", versions
                )
                cur.executemany(
                    "INSERT INTO sealflow_tokens (id, digest, scopes, label, created_at,"
                    " revoked_at, ttl, expire_at, explicit_max_ttl, renewable, num_uses, uses,"
                    " parent, orphan, mac) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
                    " %s, %s, %s, %s)",
                    tokens,
                )
                cur.executemany("INSERT INTO sealflow_key_limits VALUES (%s, %s, %s, %s)", limits)
                cur.executemany("INSERT INTO sealflow_usage VALUES (%s, %s, %s, %s)", usage)
                cur.executemany(
                    "INSERT INTO sealflow_key_policy (name, min_encryption_version,"
                    " deletion_allowed, made_exportable, plaintext_backup, mac,"
                    " min_available_version, soft_deleted)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    policies,
                )
                cur.executemany(self._approle.insert_role, approle[0])
                cur.executemany(self._approle.insert_secret_id, approle[1])
                cur.executemany(self._cert.insert, cert_roles or [])
                # Public-key-only keys: meta rows, MAC'd over their name (``_public_keys``).
                cur.executemany(self._tables.sql.note_meta, public_keys or [])

    # -- backup and restore (``_backup``)

    def snapshot(self) -> Snapshot:
        with self._errors, self._connections.connection() as db, db.transaction():
            # One snapshot of every table, while the replicas go on writing.
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return _SNAPSHOT.read(db)

    def restore(self, snapshot: Snapshot, replace: bool = False) -> None:
        with self._transaction() as db:
            _SNAPSHOT.put(db, snapshot, replace, self._where)

    # -- the cache and its freshness

    def _read(self) -> None:
        """Before a read: nothing with a watcher (the cache is current), else a sync."""
        if self._closed:
            raise KeyStoreUnavailable(f"keystore {self._where} is closed")
        if self._watcher is None:
            self._sync()

    def _sync(self, force: bool = False) -> None:
        """Reload the cache if the keystore changed since the last load (or ``force``): keys,
        the material of their versions not cached yet, and tokens, from one snapshot."""
        with self._reload_lock:
            with self._errors, self._connections.connection() as db, db.transaction():
                db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                row = db.execute("SELECT generation FROM sealflow_changes").fetchone()
                generation = int(row[0]) if row else 0
                if generation == self._generation and not force:
                    return
                self._follow(db)
                keys = self._tables.keys(db)
                material = self._unwrapped(db, keys)
                tokens = self._tables.tokens(db)
            # Replaced whole, never changed in place: a reader holds one consistent snapshot.
            # The material first: a reader of the new keys finds their material (by slot: never
            # an old key's, whatever it read when).
            with self._swap_lock:
                self._material = material
                self._keys, self._tokens = keys, tokens
            self._generation = generation

    def _unwrapped(self, db: Db, keys: dict[str, KeyInfo | None]) -> dict[Slot, bytes]:
        """The material of every version of ``keys``, by slot (``forget_replaced``): what is
        cached of a key still the same (a version never changes while its key lives), the rest
        unwrapped now. Built in a copy, so that readers of the old cache keep what they read
        meanwhile, and a reload that fails changes nothing: a deleted key's material goes with
        it, and is never taken for a new key's (another slot)."""
        material = dict(self._material)
        forget_replaced(material, keys)
        for info in keys.values():
            if info is None:
                continue
            for v in info.versions:
                slot = info.slot(v.version)
                if slot in material:
                    continue
                # One that does not unwrap is left out (refused, logged): key_material says so.
                with contextlib.suppress(KeyStoreCorrupt):
                    found = self._tables.material(db, info, v.version)
                    if found is not None:
                        material[slot] = found
        return material

    # -- connections

    @contextmanager
    def _transaction(self, changes: bool = True) -> Iterator[Db]:
        """One transaction on a connection of the store's; the cache is reloaded after it commits.

        ``changes``: count the change and NOTIFY the other processes (at commit).
        """
        if self._ambient is not None:
            yield self._ambient
            return
        if self._closed:
            raise KeyStoreUnavailable(f"keystore {self._where} is closed")
        with self._errors, self._connections.connection() as db, db.transaction():
            if changes:
                db.execute("UPDATE sealflow_changes SET generation = generation + 1")
                db.execute(f"NOTIFY {_pg_schema.CHANNEL}")
            # With ``changes``, serialised with every write by the row just locked, a rotation's
            # steps included: this writes under the KEK every reader will hold
            # (``_kek_follow``). Without, the rows such a transaction rewrites (a token's uses)
            # are locked against a rotation's step, whose rows it then reads as rewritten.
            if self._follows:
                self._follow(db)
            yield db
        if changes:
            # Written; if the reload fails the watcher reloads once the database answers again.
            with contextlib.suppress(KeyStoreUnavailable):
                self._sync()

    def _follow(self, db: Db) -> None:
        rows = db.execute(
            "SELECT key, value FROM sealflow_meta WHERE key IN (%s, %s)", FOLLOWED
        ).fetchall()
        follow(self._integrity, {key: bytes(value) for key, value in rows}, self._where)

    def _connection(self) -> AbstractContextManager[Db]:
        return self._transaction(changes=False)
