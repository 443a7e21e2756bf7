"""The audit record's key versions, record counts, and Transit's AAD and context (issue 25),
against a real server: each request's record names the version it used, or the versions when
it used several (a batch of versions, a rewrap, a records decrypt, a rotation half way); the
records of a ``mode=records`` request and the items of a ``batch_input``; and Transit's
``associated_data`` and ``context`` only as HMACs, one per distinct value, which
``sealflow audit hmac`` finds. Every record is checked against the schema."""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

from sealflow.service.audit import SCHEMA
from tests.service.conftest import Server, start_server
from tests.service.server.data.test_records import framed, unframe
from tests.service.server.data.test_records import statuses as records_answered
from tests.service.server.test_audit_trail import records, verify


def statuses(body: bytes) -> list[int]:
    """The status byte of each record a records decrypt answered."""
    return [status for status, _ in records_answered(body)]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Values:
    """AADs and contexts made up for one test: each a text and the base64 sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.raw: list[bytes] = []

    def __call__(self, what: str) -> str:
        raw = f"{what}-{os.urandom(6).hex()}".encode()
        self.raw.append(raw)
        self.sent.append(b64(raw))
        return self.sent[-1]


def hmac_of(srv: Server, value: str) -> str:
    done = srv.cli("audit", "hmac", value)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


@dataclass
class Run:
    """What one server's audit trail and access log say of the requests ``run`` made."""

    srv: Server
    audit: Path
    lines: list[dict[str, Any]]
    by_id: dict[str, dict[str, Any]]  # the request records by X-Request-Id
    access: dict[str, dict[str, Any]]  # the access log's lines by X-Request-Id
    values: Values
    hmac: dict[str, str]  # each value's HMAC, as ``sealflow audit hmac`` prints it

    def on_record(self, rid: str) -> dict[str, Any]:
        r = self.by_id[rid]
        assert r["status"] == 200
        return {k: r[k] for k in ("key", "version", "versions", "records", "mode") if k in r}


AAD1, AAD2, AAD3, CTX1, CTX2, CTX3, HEADER = range(7)  # the values, as made in ``run``


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A server with an audit file, Transit and native records traffic over two versions of
    a key (and keys rotated half way through a batch), then a clean shutdown."""
    tmp_path = tmp_path_factory.mktemp("audit-fields")
    audit = tmp_path / "audit.log"
    srv = start_server(tmp_path / "data", audit_file=audit)
    value = Values()
    aad1, aad2, aad3 = value("aad-one"), value("aad-two"), value("aad-three")
    ctx1, ctx2, ctx3 = value("context-one"), value("context-two"), value("context-three")
    header = value("x-aad-header")  # which Transit ignores
    plain = [b64(os.urandom(12)) for _ in range(8)]
    try:
        with srv.client() as c:
            assert c.post("/v1/keys", json={"name": "t"}).status_code == 201
            capped = {"name": "m", "max_encryptions": 3}  # a batch of 5 rotates it half way
            assert c.post("/v1/keys", json=capped).status_code == 201
            assert c.post("/v1/keys", json={"name": "n", "max_encryptions": 3}).status_code == 201
        vault = {"x-vault-token": srv.token}
        with httpx.Client(base_url=srv.url + "/v1/transit", headers=vault, timeout=60) as t:

            def transit(
                path: str, rid: str, body: dict[str, Any], aad: str | None = None
            ) -> dict[str, Any]:
                headers = {"x-request-id": rid} | ({} if aad is None else {"x-aad": aad})
                answer = t.post(path, json=body, headers=headers)
                assert answer.status_code == 200, answer.text
                data: dict[str, Any] = answer.json()["data"]
                return data

            one = transit("/encrypt/t", "t-enc-v1", {"plaintext": plain[0],
                                                       "associated_data": aad1})  # fmt: skip
            assert one["key_version"] == 1
            with_context = {"plaintext": plain[1], "associated_data": aad1, "context": ctx1}
            assert transit("/encrypt/t", "t-enc-ctx", with_context, header)["key_version"] == 1
            with srv.client() as c:
                three = framed([b"a", b"b", b"c"])
                stored = c.post("/v1/keys/t/encrypt?mode=records", content=three,
                                headers={"x-request-id": "n-rec-v1"})  # fmt: skip
                assert stored.status_code == 200
                assert c.post("/v1/keys/t/rotate").status_code == 200  # version 2
            batch = [
                {"plaintext": plain[2], "key_version": 1, "associated_data": aad2,
                 "context": ctx2},
                {"plaintext": plain[3], "key_version": 2, "associated_data": aad3,
                 "context": ctx2},
                # Every item or none carries a context, as Transit requires.
                {"plaintext": plain[4], "key_version": 2, "associated_data": aad2,
                 "context": ctx2},
            ]  # fmt: skip
            sealed = transit("/encrypt/t", "t-enc-batch", {"batch_input": batch})
            assert [r["key_version"] for r in sealed["batch_results"]] == [1, 2, 2]
            column = {"batch_input": [{"plaintext": p} for p in plain[:5]]}
            assert len(transit("/encrypt/t", "t-enc-column", column)["batch_results"]) == 5
            opened = transit("/decrypt/t", "t-dec-batch", {"batch_input": [
                {"ciphertext": r["ciphertext"], "associated_data": item["associated_data"]}
                for r, item in zip(sealed["batch_results"], batch, strict=True)
            ]})  # fmt: skip
            assert [r["plaintext"] for r in opened["batch_results"]] == plain[2:5]
            single = {"ciphertext": one["ciphertext"], "associated_data": aad1}
            assert transit("/decrypt/t", "t-dec-v1", single)["plaintext"] == plain[0]
            rewrapped = transit("/rewrap/t", "t-rewrap", single)
            assert rewrapped["key_version"] == 2
            datakey = transit("/datakey/plaintext/t", "t-datakey", {"context": ctx3})
            assert datakey["key_version"] == 2
            halfway = {"batch_input": [{"plaintext": p} for p in plain[:5]]}
            split = transit("/encrypt/n", "t-enc-rotating", halfway)
            assert [r["key_version"] for r in split["batch_results"]] == [1, 1, 1, 2, 2]
        with srv.client() as c:

            def native(path: str, rid: str, body: bytes) -> bytes:
                answer = c.post(path, content=body, headers={"x-request-id": rid})
                assert answer.status_code == 200, answer.text
                return answer.content

            later = native("/v1/keys/t/encrypt?mode=records", "n-rec-v2", framed([b"d", b"e"]))
            both = stored.content + later
            assert statuses(native("/v1/keys/t/decrypt?mode=records", "n-dec-t", both)) == [0] * 5
            assert statuses(native("/v1/decrypt?mode=records", "n-dec-any", both)) == [0] * 5
            other = native("/v1/keys/default/encrypt?mode=records", "n-rec-default", framed([b"f"]))
            mixed = native("/v1/decrypt?mode=records", "n-dec-mixed", later + other)
            assert statuses(mixed) == [0] * 3
            rotating = native("/v1/keys/m/encrypt?mode=records", "n-rec-rotating",
                              framed([bytes([i]) for i in range(5)]))  # fmt: skip
            assert native("/v1/decrypt", "n-dec-single", unframe(rotating)[4]) == b"\x04"
    finally:
        srv.stop()
    lines = records(audit)
    by_id = {r["request_id"]: r for r in lines if r["type"] == "request"}
    access = {line.get("request_id", ""): line for line in srv.access()}
    hmacs = {v: hmac_of(srv, v) for v in value.sent}
    return Run(srv, audit, lines, by_id, access, value, hmacs)


def test_every_record_validates_and_the_chain_verifies(run: Run) -> None:
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    for line in run.lines:
        validator.validate(line)
    done = verify(run.audit, run.srv, "--strict")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_successful_request_with_a_body_names_its_bytes(run: Run) -> None:
    """A response of a declared length is put on record as it starts (before the request's
    counts are filled in at its end): its record still names the bytes it read, as the access
    log's line does."""
    posts = [r for r in run.by_id.values() if r["method"] == "POST" and r["status"] == 200]
    assert len(posts) >= 10
    for r in posts:
        assert "bytes_in" in r, r
        assert r["bytes_in"] == run.access[r["request_id"]]["bytes_in"], r


def test_transit_names_the_version_or_the_versions_it_used(run: Run) -> None:
    assert run.on_record("t-enc-v1") == {"key": "t", "version": 1}
    assert run.on_record("t-enc-ctx") == {"key": "t", "version": 1}
    assert run.on_record("t-enc-batch") == {"key": "t", "versions": [1, 2], "records": 3}
    assert run.on_record("t-enc-column") == {"key": "t", "version": 2, "records": 5}
    assert run.on_record("t-dec-batch") == {"key": "t", "versions": [1, 2], "records": 3}
    assert run.on_record("t-dec-v1") == {"key": "t", "version": 1}
    assert run.on_record("t-rewrap") == {"key": "t", "versions": [1, 2]}  # opened, sealed under
    assert run.on_record("t-datakey") == {"key": "t", "version": 2}
    # A batch whose version is used up half way: the key rotates, the rest go under the next.
    assert run.on_record("t-enc-rotating") == {"key": "n", "versions": [1, 2], "records": 5}
    assert run.access["t-enc-batch"]["versions"] == [1, 2]  # the access log says so too
    assert run.access["t-enc-batch"]["records"] == 3


def test_native_records_name_every_version_and_how_many(run: Run) -> None:
    records_mode = {"mode": "records"}
    assert run.on_record("n-rec-v1") == {"key": "t", "version": 1, "records": 3, **records_mode}
    assert run.on_record("n-rec-v2") == {"key": "t", "version": 2, "records": 2, **records_mode}
    both_versions = {"key": "t", "versions": [1, 2], "records": 5, **records_mode}
    assert run.on_record("n-dec-t") == both_versions
    assert run.on_record("n-dec-any") == both_versions
    assert run.on_record("n-dec-mixed") == {"records": 3, **records_mode}  # two keys: neither
    rotating = {"key": "m", "versions": [1, 2], "records": 5, **records_mode}
    assert run.on_record("n-rec-rotating") == rotating
    assert run.on_record("n-dec-single") == {"key": "m", "version": 2, "mode": "single"}
    assert run.access["n-dec-t"]["versions"] == [1, 2]
    assert run.access["n-dec-t"]["records"] == 5


def test_transit_aad_and_context_are_on_record_as_hmacs(run: Run) -> None:
    """The HMAC of each value as sent (base64, as X-AAD's); a batch's distinct ones, sorted."""
    sent, hm, by_id = run.values.sent, run.hmac, run.by_id
    assert by_id["t-enc-v1"]["aad_hmac"] == hm[sent[AAD1]]
    assert "context_hmac" not in by_id["t-enc-v1"]
    assert by_id["t-enc-ctx"]["aad_hmac"] == hm[sent[AAD1]]
    assert by_id["t-enc-ctx"]["context_hmac"] == hm[sent[CTX1]]
    assert by_id["t-enc-batch"]["aad_hmac"] == sorted([hm[sent[AAD2]], hm[sent[AAD3]]])
    assert by_id["t-enc-batch"]["context_hmac"] == hm[sent[CTX2]]
    assert "aad_hmac" not in by_id["t-enc-column"]
    assert by_id["t-dec-batch"]["aad_hmac"] == sorted([hm[sent[AAD2]], hm[sent[AAD3]]])
    assert by_id["t-dec-v1"]["aad_hmac"] == hm[sent[AAD1]]
    assert by_id["t-rewrap"]["aad_hmac"] == hm[sent[AAD1]]
    assert by_id["t-datakey"]["context_hmac"] == hm[sent[CTX3]]


def test_no_aad_or_context_is_written_anywhere_but_their_hmacs_are(run: Run) -> None:
    text = b"".join(f.read_bytes() for f in run.audit.parent.glob("audit.log*"))
    server_log = run.srv.log.read_bytes()
    for raw, sent in zip(run.values.raw, run.values.sent, strict=True):
        for written in (text, server_log):
            assert raw not in written
            assert sent.encode() not in written
        # Found by its HMAC: every one but an X-AAD sent to Transit, which ignores it.
        assert (run.hmac[sent].encode() in text) is (sent != run.values.sent[HEADER])
