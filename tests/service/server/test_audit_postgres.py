"""The audit table (``SEALFLOW_AUDIT_POSTGRES=1``, issue 25 item 4) against real ``sealflow
serve`` replicas on a real PostgreSQL keystore: both replicas and the CLI write to it, every
record is on record once and verifies, tampering with a row is named by ``sealflow audit verify
--postgres``, mode required refuses requests while the table cannot be written and serves
again once it can, and the service role needs INSERT on the table and nothing more.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import jsonschema_rs
import orjson
import psycopg
import pytest

from sealflow.service.audit import SCHEMA
from tests.postgres import Cluster
from tests.service.conftest import SEALFLOW, Server, start_server
from tests.service.server.test_audit_trail import status_of, verify

MASTER = base64.b64encode(os.urandom(32)).decode()
ROOT = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
SEAL = "/v1/keys/default/encrypt?mode=single"

Row = tuple[int, dict[str, Any], str]  # id, record, line as stored


def replica(folder: Path, url: str, **settings: object) -> Server:
    """A server on the keystore at ``url`` whose one audit sink is its table (mode required,
    the default); its ``cli`` runs with the same settings."""
    srv = start_server(
        folder, keystore_url=url, master_key=MASTER, root_token=ROOT, audit_postgres=1, **settings
    )
    srv.token = ROOT
    srv.env.update(SEALFLOW_KEYSTORE_URL=url, SEALFLOW_MASTER_KEY=MASTER)
    return srv


def sealflow(url: str, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with the settings of the replicas: the keystore at ``url``, the audit table."""
    env = {
        **os.environ,
        "SEALFLOW_KEYSTORE_URL": url,
        "SEALFLOW_MASTER_KEY": MASTER,
        "SEALFLOW_DATA_DIR": str(folder),
        "SEALFLOW_AUDIT_POSTGRES": "1",
    }
    return subprocess.run(  # noqa: S603
        [SEALFLOW, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def table(url: str) -> list[Row]:
    with psycopg.connect(url) as conn:
        stored = conn.execute("SELECT id, line::text FROM sealflow_audit ORDER BY id").fetchall()
    return [(row_id, json.loads(line), line) for row_id, line in stored]


@pytest.fixture(scope="module")
def trail(postgres: Cluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A keystore whose audit table two replicas and the CLI wrote to, every writer closed
    cleanly: the name of its database (a template for the tampering cases)."""
    folder = tmp_path_factory.mktemp("audit-postgres")
    url = postgres.new_database()
    servers = [replica(folder / f"replica{i}", url) for i in range(2)]
    try:
        for srv in servers:
            with srv.client() as c:
                for _ in range(3):
                    sealed = c.post(SEAL, content=b"attack at dawn")
                    assert sealed.status_code == 200
                assert c.post("/v1/decrypt", content=sealed.content).status_code == 200
                transit = {"plaintext": base64.b64encode(b"hi").decode()}
                assert c.post("/v1/transit/encrypt/default", json=transit).status_code == 200
        rotated = servers[0].cli("keys", "rotate", "default")
        assert rotated.returncode == 0, rotated.stderr
    finally:
        for srv in servers:
            srv.stop()  # SIGTERM: a clean shutdown, the last records and a final checkpoint
    return url.rsplit("/", 1)[1]


def copy_of(postgres: Cluster, name: str) -> str:
    """A new database made from database ``name`` (no one may be connected to it)."""
    copy = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {copy} TEMPLATE {name}")
    return postgres.url(copy)


def test_two_replicas_and_the_cli_write_one_table_that_verifies(
    postgres: Cluster, trail: str, tmp_path: Path
) -> None:
    url = postgres.url(trail)
    rows = table(url)
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    for _, record, _ in rows:
        validator.validate(record)
    requests = [r for _, r, _ in rows if r["type"] == "request"]
    assert len({r["replica"] for r in requests}) == 2
    assert len({r["writer"] for r in requests}) == 2
    sealed = [r for r in requests if r["operation"] == "encrypt" and r.get("mode") == "single"]
    assert len(sealed) == 6  # three per replica, each once
    cli = [r for _, r, _ in rows if r.get("origin") == "cli"]
    assert [r["operation"] for r in cli] == ["key_rotate"]
    assert cli[0]["os_user"]
    assert cli[0]["key"] == "default"
    # Each writer's seqs are 1, 2, ... in order of arrival: no line twice, none missing.
    for writer in {r["writer"] for _, r, _ in rows}:
        seqs = [r["seq"] for _, r, _ in rows if r["writer"] == writer]
        assert seqs == list(range(1, len(seqs) + 1))
        assert [r["type"] for _, r, _ in rows if r["writer"] == writer][-1] == "checkpoint"
    done = sealflow(url, tmp_path, "audit", "verify", "--postgres", "--strict")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ok: {len(rows)} records, ")
    assert done.stderr == ""


def _of(rows: list[Row], writer: str) -> list[Row]:
    return [row for row in rows if row[1]["writer"] == writer]


def _middle(rows: list[Row]) -> tuple[Row, Row, Row]:
    """A request of a replica's chain with its writer's records before and after it."""
    writer = next(r["writer"] for _, r, _ in rows if r["type"] == "request")
    mine = _of(rows, writer)
    i = next(i for i, row in enumerate(mine) if i and row[1]["type"] == "request")
    return mine[i - 1], mine[i], mine[i + 1]


def _forge(conn: psycopg.Connection[Any], after: Row, **fields: object) -> Row:
    """A row put on the chain of ``after``'s writer, with its seq and prev right."""
    record = {**fields, "writer": after[1]["writer"], "seq": after[1]["seq"] + 1}
    record["prev"] = hashlib.sha256(after[2].encode()).hexdigest()
    line = orjson.dumps(record).decode()
    row = conn.execute(
        "INSERT INTO sealflow_audit (writer, seq, line) VALUES (%s, %s, %s) RETURNING id",
        (record["writer"], record["seq"], line),
    ).fetchone()
    assert row is not None
    return int(row[0]), record, line


def changed(conn: psycopg.Connection[Any], rows: list[Row]) -> tuple[str, str]:
    _, row, after = _middle(rows)
    conn.execute(
        "UPDATE sealflow_audit SET line = replace(line::text, '\"status\":200',"
        " '\"status\":403')::json WHERE id = %s",
        (row[0],),
    )
    return (
        f"sealflow_audit:{after[0]}: prev is not the hash of writer {row[1]['writer']}'s record"
        f" before it, at sealflow_audit:{row[0]}: that record was changed, or this one forged"
    ), ""


def deleted(conn: psycopg.Connection[Any], rows: list[Row]) -> tuple[str, str]:
    before, row, after = _middle(rows)
    conn.execute("DELETE FROM sealflow_audit WHERE id = %s", (row[0],))
    seq = after[1]["seq"]
    return (
        f"sealflow_audit:{after[0]}: writer {row[1]['writer']}'s seq {seq} comes after its seq"
        f" {seq - 2} at sealflow_audit:{before[0]}: the 1 record(s) between are missing"
    ), ""


def forged_and_sealed(conn: psycopg.Connection[Any], rows: list[Row]) -> tuple[str, str]:
    """A record put on a closed chain, with a checkpoint that would seal it: none but the
    master key's holder can make that checkpoint."""
    last = _of(rows, rows[0][1]["writer"])[-1]
    forged = _forge(conn, last, time=last[1]["time"], type="request", operation="decrypt")
    seal = {"time": last[1]["time"], "type": "checkpoint", "hmac": "hmac-sha256:" + "0" * 64}
    checkpoint = _forge(conn, forged, **seal)
    return f"sealflow_audit:{checkpoint[0]}: the checkpoint's hmac does not verify", ""


def forged_at_the_end(conn: psycopg.Connection[Any], rows: list[Row]) -> tuple[str, str]:
    """A record put on a closed chain: proven by nothing, so an unsealed tail, which
    ``--strict`` refuses (docs/AUDIT.md: what an attacker can hide)."""
    last = _of(rows, rows[0][1]["writer"])[-1]
    forged = _forge(conn, last, time=last[1]["time"], type="request", operation="decrypt")[0]
    tail = (
        f"sealflow_audit:{forged}: unsealed tail: writer {last[1]['writer']}'s last 1 record(s),"
        f" to sealflow_audit:{forged}"
    )
    return tail, "--strict"


TAMPERING: dict[str, Callable[[psycopg.Connection[Any], list[Row]], tuple[str, str]]] = {
    f.__name__: f for f in (changed, deleted, forged_and_sealed, forged_at_the_end)
}


@pytest.mark.parametrize("tampering", sorted(TAMPERING))
def test_tampering_with_the_table_is_named(
    postgres: Cluster, trail: str, tmp_path: Path, tampering: str
) -> None:
    url = copy_of(postgres, trail)
    with psycopg.connect(url) as conn:
        expected, flag = TAMPERING[tampering](conn, table(url))
    done = sealflow(url, tmp_path, "audit", "verify", "--postgres", *([flag] if flag else []))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: {expected}" in done.stderr, done.stderr
    assert done.stdout == ""
    if flag:  # without --strict the tail is a warning, not an error
        lenient = sealflow(url, tmp_path, "audit", "verify", "--postgres")
        assert lenient.returncode == 0, lenient.stderr
        assert f"warning: {expected}" in lenient.stderr


def test_required_mode_refuses_while_the_table_is_locked_and_recovers(
    postgres: Cluster, tmp_path: Path
) -> None:
    url = postgres.new_database()
    srv = replica(tmp_path / "srv", url)
    try:
        with srv.client() as c:
            assert c.post(SEAL, content=b"before").status_code == 200
            with psycopg.connect(url) as holder:
                # Another session holds the table: every INSERT waits on it, and the server's
                # gives up after its statement timeout.
                holder.execute("LOCK TABLE sealflow_audit IN EXCLUSIVE MODE")
                answers: list[int] = []
                while answers.count(200) == len(answers):
                    answers.append(status_of(srv, SEAL))
                    assert len(answers) < 100, "the table never refused a write"
                assert answers[-1] in (0, 503)  # dropped unanswered, or refused
                for _ in range(5):
                    refused = c.post(SEAL, content=b"during")
                    assert refused.status_code == 503
                    assert refused.json()["error"]["code"] == "audit_unavailable"
                assert c.get("/readyz").json()["status"] == "audit_unavailable"
                assert c.get("/healthz").status_code == 200
                # No 200 left without its record in the table (reads pass the lock).
                stored = [r for _, r, _ in table(url) if r["type"] == "request"]
                assert [r["status"] for r in stored] == [200] * (1 + answers.count(200))
                holder.rollback()  # the lock goes: the next write succeeds
            while c.get("/readyz").status_code != 200:
                time.sleep(0.05)  # the server tries again every second
            assert c.post(SEAL, content=b"after").status_code == 200
        log = srv.log.read_text()
        assert "audit records not written: audit table sealflow_audit" in log
        assert "canceling statement due to statement timeout" in log  # why, for the operator
        assert "audit records written again" in log
    finally:
        srv.stop()
    done = sealflow(url, tmp_path, "audit", "verify", "--postgres", "--strict")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ok: {len(table(url))} records")


def waiting_insert(watcher: psycopg.Connection[Any]) -> tuple[int, object] | None:
    """The server's audit INSERT waiting on a lock, if one is (its session and when it
    began): the same pair before and after an answer means the answer left while it waited."""
    row = watcher.execute(
        "SELECT pid, query_start FROM pg_stat_activity WHERE application_name = 'sealflow-audit'"
        " AND state = 'active' AND wait_event_type = 'Lock' AND query LIKE 'INSERT%'"
    ).fetchone()
    return None if row is None else (row[0], row[1])


def test_a_locked_table_holds_up_no_probe_and_no_success(postgres: Cluster, tmp_path: Path) -> None:
    """The table's writes are the writer thread's, not the event loop's: while the server's
    INSERT waits on a lock another session holds, probes are answered (20 of them, each seen
    answered while the same INSERT was still waiting; on an event loop that waits for the
    INSERT none can be), and no data request gets a 200 until the lock goes; then they do."""
    url = postgres.new_database()
    srv = replica(tmp_path / "srv", url)
    try:
        with (
            srv.client() as c,
            httpx.Client(base_url=srv.url, timeout=60) as probe,
            psycopg.connect(url, autocommit=True) as watcher,
        ):
            assert c.post(SEAL, content=b"before").status_code == 200
            with psycopg.connect(url) as holder:
                holder.execute("LOCK TABLE sealflow_audit IN EXCLUSIVE MODE")
                # A request whose record waits on the lock; once its write fails, the server
                # tries again every second, each INSERT waiting on the lock in turn.
                first: list[int] = []
                asking = threading.Thread(target=lambda: first.append(status_of(srv, SEAL)))
                asking.start()
                during = looks = 0
                while during < 20:
                    looks += 1
                    assert looks < 5000, f"only {during} probes answered while an INSERT waited"
                    before = waiting_insert(watcher)
                    if before is None:
                        time.sleep(0.01)
                        continue
                    assert probe.get("/healthz").status_code == 200
                    if waiting_insert(watcher) == before:
                        during += 1
                asking.join()
                assert first[0] in (0, 503)  # dropped unanswered: its record was not written
                for _ in range(3):
                    assert status_of(srv, SEAL) in (0, 503)
                assert probe.get("/readyz").status_code == 503
                stored = [r for _, r, _ in table(url) if r["type"] == "request"]
                assert [r["status"] for r in stored] == [200]  # nothing else got through
                holder.rollback()  # the lock goes: the next write succeeds
            while probe.get("/readyz").status_code != 200:
                time.sleep(0.05)  # the server tries again every second
            assert c.post(SEAL, content=b"after").status_code == 200
    finally:
        srv.stop()
    done = sealflow(url, tmp_path, "audit", "verify", "--postgres", "--strict")
    assert done.returncode == 0, done.stderr


def read_answer(stream: BinaryIO) -> tuple[bytes, bytes]:
    """One HTTP/1.1 answer of a declared length from ``stream``: its head and its body."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = stream.read(1)
        assert byte, "the connection ended inside a head"
        head += byte
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    body = b""
    while len(body) < length:
        more = stream.read(length - len(body))
        assert more, "the connection ended inside a body"
        body += more
    return head, body


def test_pipelined_answers_keep_their_order_while_records_are_written(
    postgres: Cluster, tmp_path: Path
) -> None:
    """On one connection, answers that wait for their record (a seal) and answers that need
    none (a probe) leave in the order asked: a probe's answer waits behind a seal's whose
    batch is still on its way to the table. A file beside the table gets the same lines (the
    writer thread writes both), the final checkpoint included."""
    url = postgres.new_database()
    audit = tmp_path / "audit.log"
    srv = replica(tmp_path / "srv", url, audit_file=audit)
    try:
        seal = (
            f"POST {SEAL} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ROOT}\r\n"
            "content-length: 5\r\n\r\nhello"
        ).encode()
        health = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
        with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as sock:
            sock.sendall((seal + health) * 10)
            stream = sock.makefile("rb")
            answers = [read_answer(stream) for _ in range(20)]
        for n, (head, body) in enumerate(answers):
            assert head.startswith(b"HTTP/1.1 200 "), head
            assert (b'"status"' in body) == (n % 2 == 1), (n, body[:40])
        stored = [r for _, r, _ in table(url) if r["type"] == "request"]
        assert len(stored) == 10
    finally:
        srv.stop()
    assert [line for _, _, line in table(url)] == audit.read_text().splitlines()
    checked = verify(audit, srv, "--strict")
    assert checked.returncode == 0, checked.stderr
    done = sealflow(url, tmp_path, "audit", "verify", "--postgres", "--strict")
    assert done.returncode == 0, done.stderr


def test_the_table_with_an_sqlite_keystore_is_a_clear_error(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SEALFLOW_DATA_DIR": str(tmp_path / "data"),
        "SEALFLOW_AUDIT_POSTGRES": "1",
    }
    env.pop("SEALFLOW_KEYSTORE_URL", None)
    for command in (["serve", "--port", "0"], ["keys", "list"]):
        done = subprocess.run(  # noqa: S603
            [SEALFLOW, *command], capture_output=True, text=True, env=env, timeout=120, check=False
        )
        assert done.returncode == 1, (command, done.stderr)
        assert "SEALFLOW_AUDIT_POSTGRES=1" in done.stderr
        assert "this keystore is SQLite" in done.stderr
    verify = [SEALFLOW, "audit", "verify", "--postgres"]
    done = subprocess.run(verify, capture_output=True, text=True, env=env, timeout=120, check=False)  # noqa: S603
    assert done.returncode == 1
    assert "--postgres checks the audit table of a PostgreSQL keystore" in done.stderr
    both = subprocess.run(  # noqa: S603
        [*verify, str(tmp_path / "audit.log")], capture_output=True, text=True, env=env,
        timeout=120, check=False,
    )  # fmt: skip
    assert both.returncode == 2
    assert "not both" in both.stderr


def test_the_service_role_needs_insert_only(postgres: Cluster, tmp_path: Path) -> None:
    """docs/AUDIT.md's GRANTs: the table handed to a role of its own, the service left with
    INSERT (no SELECT, UPDATE, DELETE or TRUNCATE); it audits all the same."""
    url = postgres.new_database()
    database = url.rsplit("/", 1)[1]
    service = f"svc_{uuid.uuid4().hex[:8]}"
    owner = f"audit_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {service} LOGIN")
        admin.execute(f"ALTER DATABASE {database} OWNER TO {service}")
    as_service = url.replace("postgres@", f"{service}@")
    # The first start makes the keystore as the service role, which owns its tables.
    replica(tmp_path / "first", as_service).stop()
    with psycopg.connect(url, autocommit=True) as admin:  # docs/AUDIT.md, as given there
        admin.execute(f"CREATE ROLE {owner} NOLOGIN")
        admin.execute(f"ALTER TABLE sealflow_audit OWNER TO {owner}")
        admin.execute(f"GRANT INSERT ON sealflow_audit TO {service}")
    srv = replica(tmp_path / "srv", as_service)
    try:
        with srv.client() as c:
            assert c.post(SEAL, content=b"on record").status_code == 200
    finally:
        srv.stop()
    assert [r["status"] for _, r, _ in table(url) if r["type"] == "request"] == [200]
    with psycopg.connect(as_service, autocommit=True) as conn:
        for statement in (
            "UPDATE sealflow_audit SET line = '{}'",
            "DELETE FROM sealflow_audit",
            "TRUNCATE sealflow_audit",
            "SELECT count(*) FROM sealflow_audit",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"GRANT SELECT ON sealflow_audit TO {service}")  # for verify, as documented
    checked = sealflow(as_service, tmp_path, "audit", "verify", "--postgres", "--strict")
    assert checked.returncode == 0, checked.stderr
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"REVOKE INSERT ON sealflow_audit FROM {service}")
    refused = sealflow(as_service, tmp_path, "keys", "rotate", "default")
    assert refused.returncode == 1
    assert f"role {service} may not insert into table sealflow_audit" in refused.stderr
    assert f"GRANT INSERT ON sealflow_audit TO {service}" in refused.stderr
