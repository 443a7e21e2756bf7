"""The audit key, HMAC fields, one writer's chain and its checkpoints, record times."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
from pathlib import Path

import orjson

from sealflow.service.audit import Chain, audit_key, hmac_field, verify, writer_id
from sealflow.service.audit._chain import timestamp

from .records import MASTER, REQUEST, VALIDATOR


def test_the_audit_key_is_hkdf_sha256_of_the_master_key_as_rfc_5869_writes_it() -> None:
    # RFC 5869 with no salt: PRK = HMAC(zeros, IKM); T(1) = HMAC(PRK, info || 0x01).
    prk = hmac.new(bytes(32), MASTER, hashlib.sha256).digest()
    okm = hmac.new(prk, b"sealflow audit v1\x01", hashlib.sha256).digest()
    assert audit_key(MASTER) == okm
    assert audit_key(os.urandom(32)) != okm


def test_an_hmac_field_is_hmac_sha256_of_the_utf8_value() -> None:
    key = audit_key(MASTER)
    want = hmac.new(key, "clé".encode(), hashlib.sha256).hexdigest()
    assert hmac_field(key, "clé") == hmac_field(key, "clé".encode()) == f"hmac-sha256:{want}"
    assert hmac_field(audit_key(os.urandom(32)), "clé") != f"hmac-sha256:{want}"


def test_each_line_names_the_hash_of_the_line_before_it() -> None:
    chain = Chain(audit_key(MASTER), "w1")
    first = chain.line(REQUEST)
    second = chain.line({**REQUEST, "status": 403, "error": "forbidden"})
    records = [json.loads(first), json.loads(second)]
    assert [(r["writer"], r["seq"]) for r in records] == [("w1", 1), ("w1", 2)]
    assert records[0]["prev"] is None
    assert records[1]["prev"] == hashlib.sha256(first).hexdigest()
    assert {k: v for k, v in records[0].items() if k not in ("writer", "seq", "prev")} == REQUEST
    assert b"\n" not in first
    assert chain.seq == 2


def test_a_record_cannot_set_the_chain_s_own_fields() -> None:
    chain = Chain(audit_key(MASTER), "w1")
    line = json.loads(chain.line({**REQUEST, "writer": "someone else", "seq": 7, "prev": "x"}))
    assert (line["writer"], line["seq"], line["prev"]) == ("w1", 1, None)


def test_a_checkpoint_is_chained_and_valid_and_a_line_like_it_without_the_key_is_not(
    tmp_path: Path,
) -> None:
    key = audit_key(MASTER)
    chain = Chain(key, "w1")
    lines = [chain.line({**REQUEST, "time": timestamp(1e9)}), chain.checkpoint(1e9 + 1)]
    checkpoint = json.loads(lines[1])
    assert set(checkpoint) == {"type", "time", "hmac", "writer", "seq", "prev"}
    assert (checkpoint["type"], checkpoint["seq"]) == ("checkpoint", 2)
    assert checkpoint["prev"] == hashlib.sha256(lines[0]).hexdigest()
    assert VALIDATOR.is_valid(checkpoint)
    path = tmp_path / "audit.log"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    report = verify([path], key, strict=True)
    assert (report.ok, report.records) == (True, 2)
    # The server writes hmac_field(key, value) of values callers send (an AAD): no value,
    # even the exact message a checkpoint covers, yields a checkpoint's hmac.
    message = orjson.dumps(["w1", 2, checkpoint["prev"], checkpoint["time"]])
    forged = {**checkpoint, "hmac": hmac_field(key, message)}
    path.write_bytes(lines[0] + b"\n" + orjson.dumps(forged) + b"\n")
    report = verify([path], key, strict=False)
    assert report.error is not None
    assert (report.error.line, "hmac does not verify" in report.error.message) == (2, True)


def test_record_times_are_utc_with_microseconds() -> None:
    assert timestamp(0.5) == "1970-01-01T00:00:00.500000Z"
    assert timestamp(1_700_000_000.123456) == "2023-11-14T22:13:20.123456Z"
    assert timestamp(1.9999999) == "1970-01-01T00:00:01.999999Z"
    assert timestamp(2.0) == "1970-01-01T00:00:02.000000Z"


def test_every_writer_id_is_new_and_names_host_and_process() -> None:
    ids = {writer_id() for _ in range(100)}
    assert len(ids) == 100
    host, pid, _ = next(iter(ids)).rsplit(":", 2)
    assert (host, pid) == (socket.gethostname(), str(os.getpid()))
