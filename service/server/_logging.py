"""Structured logs: one JSON object per line, on stderr.

Only fields passed explicitly are logged; the access log's fields come from a
fixed list (method, route, status, bytes, duration, key name and version(s), records, request
id, client address), so key material, tokens, AADs and bodies cannot reach the log by accident.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

access = logging.getLogger("sealflow.access")
log = logging.getLogger("sealflow")

_second: tuple[int, str] = (-1, "")


def timestamp(t: float) -> str:
    """ISO 8601 UTC with milliseconds; strftime once a second, not once a line."""
    global _second
    second, text = _second
    if int(t) != second:
        second, text = int(t), time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
        _second = (second, text)  # one tuple: a reader on another thread sees a matching pair
    return f"{text}.{int(t % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


@dataclass(slots=True)
class AccessRecord:
    """One request's access-log line, filled in as the request goes.

    Only these fields can reach the log; unset ones (None) are left out of the line, and so
    are ``aads`` and ``contexts`` always: values a client sent that only the audit record
    names, as HMACs.
    """

    status: int = 0  # 0 until a response starts (and if it never does)
    method: str = ""
    route: str = ""
    duration_ms: float = 0.0
    key: str | None = None
    version: int | None = None  # the one key version used (``used``)
    mode: str | None = None
    bytes_in: int | None = None
    bytes_out: int | None = None
    error: str | None = None
    duplex: bool | None = None  # True when answered in full duplex (Sealflow-Duplex: 1)
    aborted: bool | None = None  # True when a started response was cut off
    request_id: str | None = None  # X-Request-Id, as the response has it
    remote_addr: str | None = None  # the client's IP address (``_forwarded``)
    target_accessor: str | None = None  # the token a token route named (its accessor)
    versions: list[int] | None = None  # the versions used, sorted, when several (never both)
    records: int | None = None  # the records of mode=records, the items of a batch_input
    # For the audit record only, never the access log: Transit's associated_data and context
    # values as sent (base64), distinct. Empty sets only while an audit trail is on (set by
    # the front door), so that a request without one collects nothing.
    aads: set[str] | None = None
    contexts: set[str] | None = None

    def used(self, version: int) -> None:
        """A key version the request sealed or opened under: ``version`` while it is the
        only one, ``versions`` once there are several."""
        known = self.version
        if known == version:
            return
        if known is None and self.versions is None:
            self.version = version
            return
        self.used_all((version,))

    def used_all(self, versions: Iterable[int]) -> None:
        """``used`` for each of ``versions`` (a group's, once per group)."""
        seen = set(versions)
        if self.version is not None:
            seen.add(self.version)
        if self.versions is not None:
            seen.update(self.versions)
        if len(seen) == 1:
            self.version, self.versions = seen.pop(), None
        elif seen:
            self.version, self.versions = None, sorted(seen)

    def fields(self) -> dict[str, object]:
        """The fields set, for the access log's line and the audit record (which adds its own
        to the same dict: built once per request)."""
        # Spelled out, not a loop over the fields: a getattr per field cost 0.5 us a line.
        fields: dict[str, object] = {
            "status": self.status,
            "method": self.method,
            "route": self.route,
            "duration_ms": self.duration_ms,
        }
        if self.key is not None:
            fields["key"] = self.key
        if self.version is not None:
            fields["version"] = self.version
        if self.mode is not None:
            fields["mode"] = self.mode
        if self.bytes_in is not None:
            fields["bytes_in"] = self.bytes_in
        if self.bytes_out is not None:
            fields["bytes_out"] = self.bytes_out
        if self.error is not None:
            fields["error"] = self.error
        if self.duplex is not None:
            fields["duplex"] = self.duplex
        if self.aborted is not None:
            fields["aborted"] = self.aborted
        if self.request_id is not None:
            fields["request_id"] = self.request_id
        if self.remote_addr is not None:
            fields["remote_addr"] = self.remote_addr
        if self.target_accessor is not None:
            fields["target_accessor"] = self.target_accessor
        if self.versions is not None:
            fields["versions"] = self.versions
        if self.records is not None:
            fields["records"] = self.records
        return fields


# A line: '{"ts":"<second>' (kept for the second), then this with the milliseconds.
_HEAD = b'%s.%03dZ","level":"info","logger":"sealflow.access","msg":"request",'


class AccessLog:
    """The request log: one JSON line per request, written in batches from the event loop.

    Through ``logging`` a line cost ~35 us (a LogRecord, the handler lock, the
    formatter, one unbuffered write to stderr), more than a small request's
    crypto and I/O together. Here a line is one ``orjson.dumps`` into a list (0.2 us; the
    standard library's encoder took 3.7 us), and the list goes to stderr in one write every
    ``interval`` seconds and at shutdown. Same format as the other lines; off below level
    info.
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self._lines: list[bytes] = []
        self._timer: asyncio.TimerHandle | None = None
        # '{"ts":"YYYY-MM-DDTHH:MM:SS' of the second the last line was in (``timestamp``'s
        # text, formatted once a second and kept as bytes).
        self._second: tuple[int, bytes] = (-1, b"")
        self._set_clock()

    def _set_clock(self) -> None:
        # Unix time is perf_counter() plus this (the audit record's time too): one clock read
        # per request, not two. Set again at every flush, so a step of the system clock shows
        # within a flush interval.
        self.wall_clock = time.time() - time.perf_counter()

    @property
    def enabled(self) -> bool:
        return access.isEnabledFor(logging.INFO)

    def write(self, fields: dict[str, object], ended: float) -> None:
        """Log a request (``AccessRecord.fields``) that ended at ``ended``
        (``time.perf_counter()``); the caller checks ``enabled`` first."""
        # '{"ts":...,"msg":"request",' then the fields' object without its opening brace.
        t = self.wall_clock + ended
        second, text = self._second
        if int(t) != second:
            second = int(t)
            text = b'{"ts":"' + time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)).encode()
            self._second = (second, text)
        self._lines.append(_HEAD % (text, int(t % 1 * 1000)) + orjson.dumps(fields)[1:])
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self.flush)

    def flush(self) -> None:
        self._timer = None
        self._set_clock()
        if self._lines:
            lines, self._lines = self._lines, []
            with contextlib.suppress(OSError):  # stderr closed: nowhere to log to
                os.write(2, b"\n".join(lines) + b"\n")


def configure(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    # sealflow.access replaces uvicorn's access log: a second line per request, through
    # logging, cost a fifth of a small request's time. Without handlers uvicorn skips it.
    uvicorn_access = logging.getLogger("uvicorn.access")
    uvicorn_access.handlers.clear()
    uvicorn_access.propagate = False
