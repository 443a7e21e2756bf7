"""``sealflow keystore rotate-master``: a new random KEK, every row wrapped or MAC'd under the
old one rewritten under it in batches of bounded transactions, and the provider changed in the
same step if asked (docs/SERVICE.md, The key hierarchy).

1. ``begin``: the next generation's record (KEK_new and the unchanged stable secret, sealed by
   the target provider) and KEK_new wrapped under KEK_old are written in one transaction,
   before any row. Every running process (and each of this store's later transactions) reads
   them (``_kek_follow``): from then on it writes under KEK_new, and reads each value under
   the generation written in front of it (``_generations``).
2. ``step``: one transaction rewrites up to ``batch`` rows still under KEK_old, table by table
   in key order: a version's material unwrapped and wrapped again, a row's MAC checked under
   KEK_old and made under KEK_new. A row that fails its check is left as it is (refused
   before, refused after: never re-signed).
3. ``finish``: one transaction rewrites whatever is left (rows written under KEK_old by a
   process that had not followed yet), the check value under KEK_new, and replaces the record
   with the next one, deleting the next record and the copy of KEK_new.

Each transaction is serialised with every other write of the keystore (SQLite's write lock;
PostgreSQL's changes row, whose bump also tells the replicas, and the rows it reads locked FOR
UPDATE against the writes that do not bump it), so a row is never rewritten from values
another writer changed meanwhile. Killed anywhere, the keystore opens with the
old provider, which reads both generations, and ``rotate-master`` run again resumes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._dialect import Connection
from ._generations import HEAD_LEN, head
from ._integrity import (
    CERT_ROLE_ROW,
    KEY_IMPORTED_ROW,
    LIMITS_ROW,
    POLICY_LIFECYCLE_ROW,
    PUBLIC_KEY_ROW,
    ROLE_ROW,
    SECRET_ID_ROW,
    TOKEN_ROW,
    Integrity,
    Row,
    key_row_form,
)
from ._kek import COPY_META, NEXT_META, RECORD_META, Keys, Record
from ._public_keys import PREFIX as PUBLIC_PREFIX
from ._rows import policy_form
from ._tables import WRAPPING_KEY_META
from ._writes import Writes
from .errors import KeyStoreUnavailable

Form = Callable[[Sequence[Any]], tuple[Row, Sequence[Any]]]


def _whole(row: Row) -> Form:
    return lambda values: (row, values)


@dataclass(frozen=True, slots=True)
class _MacTable:
    """A table of MAC'd rows: its SQLite name, its key column, its columns, how a row is MAC'd."""

    name: str
    key: str
    row: Row
    form: Form


_MAC_TABLES = (
    _MacTable("keys", "name", KEY_IMPORTED_ROW, key_row_form),
    _MacTable("tokens", "id", TOKEN_ROW, _whole(TOKEN_ROW)),
    _MacTable("key_limits", "name", LIMITS_ROW, _whole(LIMITS_ROW)),
    _MacTable("key_policy", "name", POLICY_LIFECYCLE_ROW, policy_form),
    _MacTable("approle_roles", "name", ROLE_ROW, _whole(ROLE_ROW)),
    _MacTable("approle_secret_ids", "accessor", SECRET_ID_ROW, _whole(SECRET_ID_ROW)),
    _MacTable("cert_roles", "name", CERT_ROLE_ROW, _whole(CERT_ROLE_ROW)),
)
# What a batch works through, in this order: each a table, or the versions, or the meta rows.
_SOURCES = ("key_versions", *(t.name for t in _MAC_TABLES), "meta")


@dataclass(slots=True)
class Progress:
    """What a run did: rows rewritten, and those left as they were because they fail their
    check (refused before the rotation, refused after it)."""

    rewritten: int = 0
    refused: list[str] = field(default_factory=list)


class Rotation:
    """One run of ``rotate-master`` over an open store (held by the caller, who closes it)."""

    def __init__(self, store: Writes[Any], batch: int) -> None:
        if batch < 1:
            raise ValueError("the batch size must be at least 1")
        self._store = store
        self._batch = batch
        sql = store.sql_dialect
        self._param = sql.param
        self._lock = sql.for_update
        self._names = {name: _table_name(sql.tables.meta, name) for name in _SOURCES}
        # Where each source's batches got to in this run: rows past it may still be old ones
        # that failed their check, which are skipped rather than read again.
        self._after: dict[str, tuple[Any, ...]] = {}
        self.progress = Progress()

    @property
    def _integrity(self) -> Integrity:
        return self._store.integrity

    # -- 1. begin (or resume)

    def pending(self) -> Record | None:
        """The next generation's record, if a rotation is under way."""
        with self._store.exclusive() as db:
            value = self._meta(db, NEXT_META)
        return None if value is None else Record.decode(value, self._store.where)

    def begin(self, current: Record, new: Keys, target: Record) -> None:
        """Write the next record ``target`` (sealed by the target provider over ``new``) and
        KEK_new wrapped under KEK_old, if the record is still ``current``; KeyStoreUnavailable
        if another run changed it meanwhile."""
        with self._store.exclusive() as db:
            if self._meta(db, RECORD_META) != current.encode() or self._meta(db, NEXT_META):
                raise KeyStoreUnavailable(
                    f"keystore {self._store.where}: its key record changed while rotate-master"
                    " started (another run?); nothing was rotated, run it again"
                )
            copy = self._integrity.wrap_next(new.kek, target.generation)
            for key, value in ((NEXT_META, target.encode()), (COPY_META, copy)):
                db.execute(self._sql("INSERT INTO {meta} (key, value) VALUES (?, ?)"), (key, value))

    def holds(self, keys: Keys, generation: int) -> bool:
        """Whether the store writes under ``keys``' KEK as ``generation`` (a resumed run checks
        that the copy and the target provider's record agree)."""
        with self._store.exclusive():
            return self._integrity.writes_with(keys.kek, generation)

    # -- 2. batches

    def step(self) -> int:
        """One transaction of at most ``batch`` rows; the number rewritten (0: none left)."""
        with self._store.exclusive() as db:
            self._writing(db)
            for source in _SOURCES:
                done = self._rewrite(db, source, self._batch)
                if done:
                    return done
        return 0

    # -- 3. finish

    def finish(self, target: Record) -> None:
        """The rows left, the check value and the record, in one transaction."""
        with self._store.exclusive() as db:
            self._writing(db, target)
            self._after.clear()
            for source in _SOURCES:
                while self._rewrite(db, source, self._batch):
                    pass
            meta = self._sql("UPDATE {meta} SET value = ? WHERE key = ?")
            db.execute(meta, (self._integrity.check_blob(), "check"))
            db.execute(meta, (target.encode(), RECORD_META))
            for key in (NEXT_META, COPY_META):
                db.execute(self._sql("DELETE FROM {meta} WHERE key = ?"), (key,))

    # -- rows

    def _writing(self, db: Connection, target: Record | None = None) -> None:
        """Refuse to write unless the store writes under the next generation (it read the copy
        when this transaction began)."""
        value = self._meta(db, NEXT_META)
        if value is None or (target is not None and value != target.encode()):
            raise KeyStoreUnavailable(
                f"keystore {self._store.where}: no rotation under way any more (another run"
                " finished it?)"
            )
        if self._integrity.generation != Record.decode(value, self._store.where).generation:
            raise KeyStoreUnavailable(f"keystore {self._store.where}: the next KEK is not held")

    def _rewrite(self, db: Connection, source: str, limit: int) -> int:
        if source == "key_versions":
            return self._versions(db, limit)
        if source == "meta":
            return self._meta_rows(db, limit)
        table = next(t for t in _MAC_TABLES if t.name == source)
        more = {"key": table.key, "columns": ", ".join(table.row.columns), "t": source}
        select = "SELECT {key}, {columns}, mac FROM {t}"
        rows = self._pending(db, source, select, "mac", (table.key,), limit, more=more)
        done = 0
        update = self._sql("UPDATE {t} SET mac = ? WHERE {key} = ?", more)
        for stored in rows:
            values = tuple(stored[1:-1])
            row, covered = table.form(values)
            mac = bytes(stored[-1])
            if self._integrity.verify(row, covered, mac):
                db.execute(update, (self._integrity.mac(row, covered), stored[0]))
                done += 1
            else:
                self.progress.refused.append(f"{source} {stored[0]!r}")
        return self._count(done, len(rows))

    def _versions(self, db: Connection, limit: int) -> int:
        select = (
            "SELECT v.name, v.version, v.wrapped, k.algorithm, k.exportable FROM {t} v"
            " JOIN {keys} k ON k.name = v.name"
        )
        key = ("v.name", "v.version")
        rows = self._pending(db, "key_versions", select, "v.wrapped", key, limit)
        update = self._sql("UPDATE {key_versions} SET wrapped = ? WHERE name = ? AND version = ?")
        done = 0
        for name, version, wrapped, algorithm, exportable in rows:
            new = self._integrity.rewrap_material(
                name, version, algorithm, exportable, bytes(wrapped)
            )
            if new is None:
                self.progress.refused.append(f"key {name!r} version {version}")
            else:
                db.execute(update, (new, name, version))
                done += 1
        return self._count(done, len(rows))

    def _meta_rows(self, db: Connection, limit: int) -> int:
        """The import wrapping key (wrapped) and the public-key-only keys (MAC'd)."""
        select = "SELECT key, value FROM {t} WHERE (key = ? OR key LIKE ?) AND"
        rows = self._pending(
            db, "meta", select, "value", ("key",), limit, (WRAPPING_KEY_META, PUBLIC_PREFIX + "%")
        )
        update = self._sql("UPDATE {meta} SET value = ? WHERE key = ?")
        done = 0
        for key, stored in rows:
            value = bytes(stored)
            if key == WRAPPING_KEY_META:
                new = self._integrity.rewrap_wrapping_key(value)
            else:
                new = self._public_key(key[len(PUBLIC_PREFIX) :], value)
            if new is None:
                self.progress.refused.append(f"meta {key!r}")
            else:
                db.execute(update, (new, key))
                done += 1
        return self._count(done, len(rows))

    def _public_key(self, name: str, value: bytes) -> bytes | None:
        integrity = self._integrity
        size = integrity.mac_length(value)
        mac, payload = value[:size], value[size:]
        try:
            fields = json.loads(payload)
            row = (name, *(fields[column] for column in PUBLIC_KEY_ROW.columns[1:]))
        except (ValueError, KeyError, TypeError):
            return None
        if not integrity.verify(PUBLIC_KEY_ROW, row, mac):
            return None
        return integrity.mac(PUBLIC_KEY_ROW, row) + payload

    def _pending(
        self,
        db: Connection,
        source: str,
        select: str,
        blob: str,
        key: tuple[str, ...],
        limit: int,
        args: tuple[Any, ...] = (),
        more: dict[str, str] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Up to ``limit`` rows of ``source`` whose ``blob`` is not under the next generation,
        after the last one this run saw, in key order; remembers where it got to."""
        after = self._after.get(source)
        where = f" substr({blob}, 1, {HEAD_LEN}) <> ?"
        params: tuple[Any, ...] = (*args, head(self._integrity.generation))
        if after is not None:
            where += f" AND ({', '.join(key)}) > ({', '.join('?' * len(key))})"
            params += after
        names = {"t": source, **(more or {}), "order": ", ".join(key), "limit": str(int(limit))}
        keyword = "" if select.endswith("AND") else " WHERE"
        # Locked (PostgreSQL): the few writes that do not take the changes row (a token's or a
        # secret id's uses) wait, and then read the row as rewritten.
        text = select + keyword + where + " ORDER BY {order} LIMIT {limit}" + self._lock
        rows = [tuple(row) for row in db.execute(self._sql(text, names), params).fetchall()]
        if rows:
            self._after[source] = tuple(rows[-1][: len(key)])
        return rows

    def _count(self, done: int, seen: int) -> int:
        self.progress.rewritten += done
        # A batch of refused rows only still moves on: report it as work, not as the end.
        return done or seen

    def _meta(self, db: Connection, key: str) -> bytes | None:
        row = db.execute(self._sql("SELECT value FROM {meta} WHERE key = ?"), (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def _sql(self, text: str, more: dict[str, str] | None = None) -> str:
        """``text`` with the store's table names (``{t}``: the table of ``more``'s source) and
        its driver's placeholder."""
        names = {**self._names, **(more or {})}
        names["t"] = self._names[names["t"]] if "t" in names else ""
        return text.format_map(names).replace("?", self._param)


def _table_name(meta: str, name: str) -> str:
    """A table's name in the store whose meta table is ``meta`` (PostgreSQL's: sealflow_...)."""
    return meta[: -len("meta")] + name


def batches(rotation: Rotation) -> Iterator[int]:
    """Run the batches, yielding each one's count."""
    while done := rotation.step():
        yield done
