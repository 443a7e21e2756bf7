"""The audit table of a PostgreSQL keystore: one place for the audit records of every replica
(``SEALFLOW_AUDIT_POSTGRES``, docs/AUDIT.md "PostgreSQL sink").

``PostgresSink`` is a ``sealflow.service.audit.Sink``: a batch is one INSERT of all its lines,
one round trip and its own transaction (the connection is in autocommit; a backlog of more
than ``CHUNK`` lines after an outage goes as several INSERTs in one transaction). A failure
raises OSError, so the ``Auditor``'s policy applies as for a file (mode required: the batch
stays pending and is written again, before anything newer, by the next flush). A batch whose
commit was made but whose answer was lost (a connection cut at that moment) is written again
too: the unique (writer, seq) and ON CONFLICT DO NOTHING keep one copy of each line. A line of
this writer that was there already though never sent before can only have been put there by
someone else: that is logged, and ``sealflow audit verify --postgres`` names the row.

The sink is ``remote``: in the server, the ``Auditor``'s writer thread writes it (one per
process, ``start_writer``), never the event loop; the CLI writes it inline (docs/AUDIT.md,
"PostgreSQL sink", has what that costs). Every statement is bounded by
``STATEMENT_TIMEOUT_MS``, so a lock held on the table or a database too slow to answer fails
the batch (the server then refuses requests until a write succeeds) rather than hold the
answers waiting for it for as long as it lasts; and a commit does not wait for a synchronous
standby (``_SESSION``), which no timeout bounds. The sink's connections are
``_pg_connections``'s: after a failure to reach the database, batches fail at once for half a
second instead of each waiting for a connect of its own.

``audit_rows`` reads the table back for ``verify``: every row in order of arrival, from one
snapshot.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from contextlib import closing

import orjson
import psycopg
from psycopg.conninfo import conninfo_to_dict

from ._pg_connections import CONNECT_TIMEOUT, KEEPALIVE, Connections, Db
from ._postgres import redact
from .errors import DriverErrors, KeyStoreUnavailable

log = logging.getLogger("sealflow.audit")

TABLE = "sealflow_audit"
# About a thousand times what a turn's batch takes (docs/AUDIT.md, PostgreSQL sink), and
# several times a full INSERT of CHUNK lines: reached by a table locked or a database stalled,
# and then the answers waiting for the batch (and the CLI) wait this long per statement at most.
STATEMENT_TIMEOUT_MS = 250

# The sink's sessions. A commit waits for no synchronous standby (``local``): that wait is
# not bounded by the statement timeout, and a standby that is away would hold every answer
# (and the writer thread) for as long as it is away. A record is then on the primary's disk
# when its answer leaves (a file sink's is in the page cache); a failover can lose the last
# ones not yet replicated, which ``verify`` shows as missing records or an unsealed tail.
_SESSION = f"-c statement_timeout={STATEMENT_TIMEOUT_MS} -c synchronous_commit=local"

# Lines per INSERT: 3 parameters each, and PostgreSQL takes at most 65,535 in a statement.
CHUNK = 1000
# No conflict target: one would need SELECT on its columns, and the service may have INSERT
# only. id never conflicts (the database makes it), so the one key that can is (writer, seq).
_INSERT = "INSERT INTO sealflow_audit (writer, seq, line) VALUES {} ON CONFLICT DO NOTHING"

Row = tuple[str, int, str]


def _errors(url: str) -> DriverErrors:
    return DriverErrors(psycopg.Error, f"audit table {TABLE} in {redact(url)}")


def _insert(db: Db, rows: list[Row]) -> int:
    """One INSERT of ``rows``: how many it stored (the others were there already)."""
    # Only placeholders are formatted in: the values go as parameters.
    statement = _INSERT.format(",".join(["(%s, %s, %s)"] * len(rows)))
    done = db.execute(statement, [value for row in rows for value in row])
    return done.rowcount


def _row(line: bytes) -> Row:
    record = orjson.loads(line)
    return record["writer"], record["seq"], line.decode()


class PostgresSink:
    """Audit lines into the table of the keystore at ``url``. Opening checks that the role may
    insert into it (KeyStoreUnavailable if not): a start that could never write its trail
    fails there, with the GRANT to run, instead of refusing every request later."""

    remote = True  # a round trip per batch: the server writes it off the event loop

    def __init__(self, url: str) -> None:
        self._errors = _errors(url)
        given = conninfo_to_dict(url).get("options") or ""  # the URL's own, kept
        params = {"autocommit": True, "options": f"{given} {_SESSION}".strip()}
        self._connections = Connections(
            url, self._errors, "sealflow-audit", max_idle=1, params=params
        )
        self._unsure: dict[str, int] = {}  # writer: the last seq sent in a batch that failed
        self._failing = False
        try:
            with self._errors, self._connections.connection() as db:
                row = db.execute(
                    "SELECT current_user, has_table_privilege(%s, 'INSERT')", (TABLE,)
                ).fetchone()
        except BaseException:
            self._connections.close()
            raise
        if row is None or not row[1]:
            self._connections.close()
            role = row[0] if row else "the role of the keystore URL"
            raise KeyStoreUnavailable(
                f"SEALFLOW_AUDIT_POSTGRES is set and role {role} may not insert into table"
                f" {TABLE}: GRANT INSERT ON {TABLE} TO {role} (docs/AUDIT.md)"
            )

    def write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        rows = [_row(line) for line in lines]
        try:
            with self._errors, self._connections.connection() as db:
                if len(rows) <= CHUNK:
                    stored = _insert(db, rows)
                else:
                    with db.transaction():
                        chunks = range(0, len(rows), CHUNK)
                        stored = sum(_insert(db, rows[i : i + CHUNK]) for i in chunks)
        except KeyStoreUnavailable as exc:
            for writer, seq, _ in rows:  # may have been committed: its answer was not read
                self._unsure[writer] = max(seq, self._unsure.get(writer, 0))
            if not self._failing:
                self._failing = True
                log.error("audit records not written: %s", exc)
            raise OSError(errno.EIO, str(exc)) from None
        self._stored(rows, stored)

    def _stored(self, rows: list[Row], stored: int) -> None:
        new = sum(1 for writer, seq, _ in rows if seq > self._unsure.get(writer, 0))
        self._unsure.clear()
        if self._failing:
            self._failing = False
            log.info("audit records written again")
        if stored < new:
            log.error(
                "%d audit record(s) of this process were in table %s before it wrote them:"
                " rows forged by someone who can write the table (`sealflow audit verify"
                " --postgres` names them)",
                new - stored,
                TABLE,
            )

    def close(self) -> None:
        self._connections.close()


def audit_rows(url: str) -> Iterator[tuple[int, bytes]]:
    """The audit table's rows in order of arrival, from one snapshot: each row's id and its
    line as stored (UTF-8, without a newline). KeyStoreUnavailable if it cannot be read."""
    errors = _errors(url)
    with errors:
        db = psycopg.connect(
            url,
            connect_timeout=CONNECT_TIMEOUT,
            application_name="sealflow-audit-verify",
            **KEEPALIVE,
        )
    with errors, closing(db), db.transaction():
        db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        with db.cursor(name="sealflow_audit_rows") as cur:
            cur.itersize = 10_000
            cur.execute("SELECT id, line::text FROM sealflow_audit ORDER BY id")
            for row_id, line in cur:
                yield row_id, line.encode()
