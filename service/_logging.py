"""Structured logs: one JSON object per line, on stderr.

Only fields passed explicitly are logged; the access log's fields come from a
fixed list (method, route, status, bytes, duration, key name and version), so
key material, tokens and bodies cannot reach the log by accident.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

access = logging.getLogger("sealflow.access")
log = logging.getLogger("sealflow")

# uvicorn's line when an app leaves a response unfinished: that is how a stream
# that failed authentication midway is cut off, and the access log records it.
_UNFINISHED = "ASGI callable returned without completing response."


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
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


class _DropUnfinished(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _UNFINISHED


def configure(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.error").addFilter(_DropUnfinished())
