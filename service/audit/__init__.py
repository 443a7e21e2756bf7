"""The audit trail: who used which key, when and from where, as tamper-evident JSON lines.

This package makes, writes and checks the records; the server and the CLI decide what to
record (docs/AUDIT.md has the schema, ``schema.json`` beside this file the same as a JSON
Schema). It imports nothing of the server, the CLI or the keystore (the settings only, for
``open_auditor``): the master key comes in as bytes.

The API (all of it thread-safe except ``Chain``, which the ``Auditor`` locks):

- ``audit_key(master_key: bytes) -> bytes``: the 32-byte audit key, HKDF-SHA-256 of the master
  key with info b"sealflow audit v1". Every ``key`` below is this key.
- ``hmac_field(key: bytes, value: bytes | str) -> str``: ``"hmac-sha256:<hex>"`` of the value
  (a str as UTF-8), for ``aad_hmac``, ``context_hmac`` and ``token_hmac``; what
  ``sealflow audit hmac VALUE`` prints.
- ``writer_id() -> str``: ``host:pid:random``, a new chain's name (one per process, one per
  CLI invocation).
- ``Chain(key: bytes, writer: str)``: one writer's hash chain. ``line(record: dict) -> bytes``
  adds ``writer``, ``seq`` (1, 2, ...) and ``prev`` (hex SHA-256 of the previous line as
  written, without its newline; null first) and returns the JSON line without a newline;
  ``checkpoint(now: float) -> bytes`` is a ``{"type": "checkpoint", "time", "hmac"}`` line,
  chained the same way, whose hmac (HMAC-SHA-256 under a key HKDF-derived from the audit key,
  never the key of ``hmac_field``) covers the writer, its seq, prev and time.
- ``Sink`` (Protocol: ``write(lines: list[bytes]) -> None``, all lines or OSError;
  ``close() -> None``; ``remote: bool``, a batch is a round trip to another process, written
  on the auditor's writer thread once it is started),
  ``FileSink(path: Path, rotate_bytes: int)`` (0600, O_APPEND, rotated
  to ``<path>.<UTC time>`` past ``rotate_bytes``, 0 never; shared by processes) and
  ``StdoutSink()``. ``FileSink.CHECK_SECONDS`` (0.1): how often the path itself is checked.
  The third sink, a PostgreSQL keystore's audit table, is the keystore's
  (``sealflow.service.keystore.audit_table``): it needs the keystore's database.
- ``Auditor(key, sinks, writer, mode, checkpoint_every=1000, checkpoint_seconds=10.0,
  constant=None)`` (``constant``: fields every record carries, encoded once; a record must
  not repeat one),
  ``mode`` ``"required"`` or ``"best_effort"``: ``record(fields: Mapping[str, object], when:
  float | None = None) -> int`` queues one record of an event at ``when`` (Unix time, now if
  None; values must be JSON's) and returns its ticket; ``written`` (every record up to that
  ticket is written); ``hmac(value)``;
  ``flush() -> bool`` writes the queue as one batch to every sink, with the checkpoints due,
  True if every sink took it; ``failing`` (required: the last flush left lines unwritten;
  they stay queued for the next one), ``dropped`` (best_effort: lines lost), ``close() ->
  bool`` (a final checkpoint if a record is unsealed, flush, sinks closed); ``writer``.
  ``start_writer(done: Callable[[int, bool], None]) -> bool``: if a sink is remote, batches
  are written from then on by one thread of the auditor's (``flush`` chains and hands over,
  several batches queued meanwhile go as one write), and ``done(upto, wrote)`` is called on
  that thread after each write; False (nothing changes) if every sink is local. ``cut`` (the
  last ticket chained into a batch), ``failed`` (the last ticket of the last failed write),
  ``threaded``; ``close`` waits for the thread's last write at most ``CLOSE_SECONDS``.
- ``verify(paths: Iterable[Path], key: bytes, strict: bool) -> Report``: every writer's chain
  and checkpoints through the files (rotated files first, by time, the live file last);
  ``Report.ok``, ``records``, ``first`` and ``last`` (record times), ``error`` (the first bad
  record, a ``Finding``: path, line, message) and ``unsealed`` (tails after a writer's last
  checkpoint in a live file; errors with ``strict``).
- ``verify_rows(table: str, rows: Iterable[tuple[int, bytes]], key, strict) -> Report``: the
  same check over the rows of an audit table in order of arrival (each its id and its line,
  without a newline); a ``Finding``'s path is then the table's name and its line the row's id,
  and the table is live (an unsealed tail is a warning).
- ``open_auditor(settings, master_key, table: Sink | None, constant=None) -> Auditor | None``:
  a new writer over the sinks the settings name (``SEALFLOW_AUDIT_FILE``, ``_STDOUT``,
  ``_ROTATE_BYTES``, ``_MODE``) and ``table``, the keystore's audit table the caller opened for
  ``SEALFLOW_AUDIT_POSTGRES`` (or None); None when there is no sink: the server's and the
  CLI's.
- ``SCHEMA``: the path of ``schema.json``; ``MODES``, ``Mode``: the two failure modes.

For whoever calls it: ``record`` costs one ``orjson.dumps`` and a lock and returns a ticket
(``written`` says when it is written), and raises at once on a value JSON cannot hold
(TypeError), a field the auditor sets (ValueError: ``time`` is the ``when`` argument) or after
``close`` (RuntimeError); ``hmac(value)`` is ``hmac_field`` under the auditor's key.
``flush`` does the I/O (for a file an flock, an fstat and a write per batch; for the
keystore's audit table a round trip to the database, docs/AUDIT.md "PostgreSQL sink"), or
with ``start_writer`` hands it to the writer thread: call it once per event-loop turn, and at
least every ``checkpoint_seconds`` so that an idle writer's records get sealed; ``close`` at
shutdown. In mode required a sink that keeps failing holds at most ``MAX_PENDING`` lines (the
rest are counted in ``dropped``).
"""

from pathlib import Path

from ._auditor import MAX_PENDING, MODES, Auditor, Mode
from ._chain import Chain, writer_id
from ._keys import audit_key, hmac_field
from ._settings import open_auditor
from ._sinks import FileSink, Sink, StdoutSink
from ._verify import Finding, Report, verify, verify_rows

SCHEMA = Path(__file__).with_name("schema.json")

__all__ = [
    "MAX_PENDING",
    "MODES",
    "SCHEMA",
    "Auditor",
    "Chain",
    "FileSink",
    "Finding",
    "Mode",
    "Report",
    "Sink",
    "StdoutSink",
    "audit_key",
    "hmac_field",
    "open_auditor",
    "verify",
    "verify_rows",
    "writer_id",
]
