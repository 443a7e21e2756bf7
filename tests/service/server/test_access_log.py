"""The access log's line, built field by field (``AccessRecord.fields``, ``AccessLog.write``)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os

import orjson
import pytest

from sealflow.service.server._logging import AccessLog, AccessRecord, timestamp


def _line(
    record: AccessRecord, capfd: pytest.CaptureFixture[str], ended: float = 0.0
) -> dict[str, object]:
    wall: list[float] = []

    async def write() -> None:
        log = AccessLog()
        log.write(record.fields(), ended)
        wall.append(log.wall_clock + ended)
        log.flush()

    access = logging.getLogger("sealflow.access")
    level = access.level
    access.setLevel(logging.INFO)
    try:
        asyncio.run(write())
    finally:
        access.setLevel(level)
    line = capfd.readouterr().err.strip()
    assert os.linesep not in line
    entry: dict[str, object] = orjson.loads(line)
    # The line keeps its own text of the second: the same as every other line's.
    assert entry["ts"] == timestamp(wall[0])
    return entry


def test_every_field_of_the_record_reaches_the_line_in_order(
    capfd: pytest.CaptureFixture[str],
) -> None:
    record = AccessRecord(200, "POST", "/v1/keys/{name}/encrypt", 0.125, "k", 3, "single",
                          1024, 1076, "decryption_failed", True, False,
                          "3f9a0c1d2b4e5f60-26", "203.0.113.7", "tok_0123456789abcdef", [1, 3], 12,
                          {"c2VjcmV0IGFhZA=="}, {"c2VjcmV0IGNvbnRleHQ="})  # fmt: skip
    entry = _line(record, capfd)
    assert list(entry)[:4] == ["ts", "level", "logger", "msg"]
    # Every field reaches the line but these two: the AADs and contexts a Transit request
    # sent, which only the audit record names, as HMACs (a field added to the record and not
    # to fields() fails here).
    audit_only = ["aads", "contexts"]
    names = [field.name for field in dataclasses.fields(AccessRecord)]
    assert names[-2:] == audit_only
    assert list(entry)[4:] == names[:-2]
    expected = dataclasses.asdict(record)
    assert {name: entry[name] for name in names[:-2]} == {n: expected[n] for n in names[:-2]}
    line = orjson.dumps(entry)
    for value in ("c2VjcmV0IGFhZA==", "c2VjcmV0IGNvbnRleHQ=", "secret aad", "secret context"):
        assert value.encode() not in line


def test_one_version_or_several_never_both() -> None:
    record = AccessRecord()
    record.used(2)
    record.used(2)
    assert (record.version, record.versions) == (2, None)
    record.used(1)
    assert (record.version, record.versions) == (None, [1, 2])
    record.used_all([3, 1, 3])
    assert (record.version, record.versions) == (None, [1, 2, 3])
    record.used(2)
    assert record.fields()["versions"] == [1, 2, 3]
    assert "version" not in record.fields()
    one = AccessRecord()
    one.used_all({4: 4, 5: 4}.values())
    one.used_all([])
    assert (one.version, one.versions) == (4, None)


def test_unset_fields_are_left_out(capfd: pytest.CaptureFixture[str]) -> None:
    entry = _line(AccessRecord(404, "GET", "other", 0.5, bytes_out=12), capfd)
    assert {k: v for k, v in entry.items() if k not in ("ts", "level", "logger", "msg")} == {
        "status": 404,
        "method": "GET",
        "route": "other",
        "duration_ms": 0.5,
        "bytes_out": 12,
    }


@pytest.mark.parametrize("ended", [0.0, 0.9995, 12.3456, 86_400.001])
def test_the_line_has_the_time_it_ended(capfd: pytest.CaptureFixture[str], ended: float) -> None:
    _line(AccessRecord(200, "POST", "other", 0.5), capfd, ended)
