"""What the audit tests share: sample records of every type, the files a path rotated into,
and every line written read back through the record's JSON Schema (schema.json, loaded as
the package data it ships as)."""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema_rs

MASTER = bytes(range(32))
SCHEMA: dict[str, Any] = json.loads(
    importlib.resources.files("sealflow.service.audit").joinpath("schema.json").read_text()
)
VALIDATOR = jsonschema_rs.Draft202012Validator(SCHEMA)
HMAC = "hmac-sha256:" + "ab" * 32

# One of each kind, with every field its kind may have (checkpoints are the chain's own).
REQUEST: dict[str, object] = {
    "type": "request",
    "request_id": "req-1.a_B",
    "replica": "host-a:1234",
    "accessor": "tok_abc",
    "label": "batch jobs",
    "remote_addr": "192.0.2.7",
    "method": "POST",
    "route": "/v1/keys/{name}/encrypt",
    "operation": "encrypt",
    "key": "default",
    "version": 3,
    "mode": "records",
    "status": 200,
    "bytes_in": 1024,
    "bytes_out": 1052,
    "records": 4,
    "origin": "http",
    "aad_hmac": HMAC,
    "context_hmac": HMAC,
}
CHANGE: dict[str, object] = {
    "type": "change",
    "replica": "host-a:99",
    "operation": "key_rotate",
    "key": "default",
    "version": 4,
    "origin": "cli",
    "os_user": "alice",
}
AUTH_FAILURE: dict[str, object] = {
    "type": "auth_failure",
    "request_id": "r2",
    "remote_addr": "198.51.100.1",
    "method": "GET",
    "route": "/v1/keys",
    "status": 401,
    "error": "unauthorized",
    "origin": "http",
    "token_hmac": HMAC,
}
SAMPLES = [REQUEST, CHANGE, AUTH_FAILURE]


def files_of(live: Path) -> list[Path]:
    """The live file's rotated files (oldest first), then the live file if it exists."""
    rotated = sorted(live.parent.glob(live.name + ".*"))
    return rotated + ([live] if live.exists() else [])


@dataclass(frozen=True)
class Line:
    path: Path
    number: int
    raw: bytes  # without its newline
    record: dict[str, Any]


def lines(paths: list[Path]) -> list[Line]:
    """Every line of the files in order, each checked against the schema."""
    out = []
    for path in paths:
        data = path.read_bytes()
        assert data == b"" or data.endswith(b"\n"), f"{path} ends inside a line"
        for number, raw in enumerate(data.splitlines(), 1):
            record = json.loads(raw)
            errors = [e.message for e in VALIDATOR.iter_errors(record)]
            assert errors == [], f"{path}:{number}: {errors}"
            out.append(Line(path, number, raw, record))
    return out
