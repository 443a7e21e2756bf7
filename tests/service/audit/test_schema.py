"""The record's JSON Schema: every kind of record the Auditor writes passes, and what a record
may not be (a field of another kind, a value in the clear, a CLI record without its user)
fails. The other audit tests check every line they write against it too (records.lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sealflow.service.audit import SCHEMA, Auditor, FileSink, audit_key, writer_id

from .records import AUTH_FAILURE, CHANGE, HMAC, REQUEST, SAMPLES, VALIDATOR, lines

SEALED = {"time": "2024-05-01T12:00:00.000001Z", "writer": "w", "seq": 1, "prev": None}


def test_every_kind_of_record_written_validates(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    auditor = Auditor(audit_key(b"k" * 32), [FileSink(path, 0)], writer_id(), "required")
    for sample in SAMPLES:
        auditor.record(sample)
    assert auditor.close()
    written = lines([path])  # each line checked against the schema
    kinds = [line.record["type"] for line in written]
    assert kinds == ["request", "change", "auth_failure", "checkpoint"]


def test_the_schema_ships_beside_the_package() -> None:
    assert SCHEMA.name == "schema.json"
    assert SCHEMA.is_file()


@pytest.mark.parametrize(
    ("record", "why"),
    [
        ({**REQUEST, "plaintext": "hello"}, "a field no kind has"),
        ({**REQUEST, "aad_hmac": "my secret aad"}, "a value in the clear"),
        ({**REQUEST, "token_hmac": HMAC}, "a token's HMAC on a request"),
        ({k: v for k, v in REQUEST.items() if k != "status"}, "a request without its status"),
        ({k: v for k, v in REQUEST.items() if k != "origin"}, "a request without its origin"),
        ({**REQUEST, "versions": [1, 2]}, "version and versions both"),
        (
            {**{k: v for k, v in REQUEST.items() if k != "version"}, "versions": [2]},
            "versions of one: that is version",
        ),
        ({**REQUEST, "aad_hmac": [HMAC]}, "a list of one HMAC: that is the HMAC"),
        ({**REQUEST, "aad_hmac": [HMAC, HMAC]}, "the same HMAC twice"),
        ({**REQUEST, "context_hmac": [HMAC, "my context"]}, "a context in the clear"),
        ({**REQUEST, "route": "v1/keys/x/encrypt"}, "not a route's template"),
        ({**CHANGE, "bytes_in": 5}, "a change with a body's size"),
        ({k: v for k, v in CHANGE.items() if k != "os_user"}, "a CLI record without its user"),
        ({k: v for k, v in CHANGE.items() if k != "operation"}, "a change without operation"),
        ({**AUTH_FAILURE, "key": "default"}, "an auth failure naming a key"),
        ({k: v for k, v in AUTH_FAILURE.items() if k != "status"}, "a failure without status"),
        ({"type": "checkpoint"}, "a checkpoint without its hmac"),
        ({"type": "checkpoint", "hmac": HMAC, "status": 200}, "a checkpoint with more"),
        ({**REQUEST, "type": "access"}, "an unknown kind"),
        ({**REQUEST, "request_id": "a b"}, "a request id with a space"),
    ],
)
def test_what_a_record_may_not_be(record: dict[str, object], why: str) -> None:
    assert not VALIDATOR.is_valid({**SEALED, **record}), why


def test_a_batch_names_its_versions_and_each_distinct_value() -> None:
    other = "hmac-sha256:" + "cd" * 32
    batch = {k: v for k, v in REQUEST.items() if k != "version"}
    batch.update(versions=[1, 3], aad_hmac=[HMAC, other], context_hmac=[other, HMAC])
    assert VALIDATOR.is_valid({**SEALED, **batch})


@pytest.mark.parametrize("missing", ["time", "type", "writer", "seq", "prev"])
def test_every_record_has_its_place_in_a_chain(missing: str) -> None:
    record = {**SEALED, **REQUEST}
    assert VALIDATOR.is_valid(record)
    del record[missing]
    assert not VALIDATOR.is_valid(record)


def test_a_time_must_have_microseconds_and_z() -> None:
    assert not VALIDATOR.is_valid({**SEALED, **REQUEST, "time": "2024-05-01T12:00:00Z"})
    assert not VALIDATOR.is_valid({**SEALED, **REQUEST, "time": "2024-05-01T12:00:00.000001"})
