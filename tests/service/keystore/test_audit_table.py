"""The audit table's sink (``_pg_audit.PostgresSink``) under the ``Auditor`` on a real
PostgreSQL: a batch whose commit was made but whose answer was lost (a proxy drops it) is
written again and stored once, in order; a synchronous standby that is away holds up no batch;
a row someone else put where the writer's next line goes is logged at once and named by the
check; a backlog larger than one INSERT takes is written whole."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any

import orjson
import psycopg
import pytest

from sealflow.service.audit import Auditor, audit_key, verify_rows, writer_id
from sealflow.service.keystore import AUDIT_TABLE, PostgresKeyStore, PostgresSink, audit_rows
from sealflow.service.keystore._pg_audit import CHUNK
from tests.postgres import Cluster, start_cluster
from tests.tcp_proxy import TcpProxy

MASTER = os.urandom(32)
KEY = audit_key(MASTER)
REQUEST = {"type": "request", "origin": "http", "operation": "encrypt", "status": 200}


def new_keystore(url: str) -> str:
    """The keystore's schema in the database at ``url`` (the audit table with it)."""
    with closing(PostgresKeyStore(url, MASTER, watch=False)):
        pass
    return url


def stored(url: str) -> list[bytes]:
    return [line for _, line in audit_rows(url)]


def until_written(auditor: Auditor) -> None:
    """Flush until the sink takes the batch: after a failure to reach the database it refuses
    for half a second without asking (``_pg_connections``)."""
    for _ in range(200):
        if auditor.flush():
            return
        time.sleep(0.05)
    raise AssertionError("the sink never took the batch")


def test_a_commit_whose_answer_was_lost_is_written_again_and_stored_once(
    postgres: Cluster, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sealflow.audit")
    url = new_keystore(pg_url)
    with TcpProxy("127.0.0.1", postgres.port) as proxy:
        through = url.replace(f":{postgres.port}/", f":{proxy.port}/")
        auditor = Auditor(
            KEY, [PostgresSink(through)], writer_id(), "required", checkpoint_seconds=1e9
        )
        for n in range(2):
            auditor.record({**REQUEST, "n": n})
        assert auditor.flush()
        proxy.mute()  # the INSERT reaches the database; its answer never comes back
        for n in range(2, 5):
            auditor.record({**REQUEST, "n": n})
        with ThreadPoolExecutor(1) as pool:
            flushed = pool.submit(auditor.flush)
            while len(stored(url)) < 5:  # committed (read past the proxy)
                assert not flushed.done()
                time.sleep(0.01)
            proxy.cut()  # the connection ends before the answer arrives
            assert flushed.result() is False
        assert auditor.failing
        proxy.restore()
        auditor.record({**REQUEST, "n": 5})
        until_written(auditor)  # the three lines again, and the new one
        assert auditor.close()
    lines = stored(url)
    records = [orjson.loads(line) for line in lines]
    assert [r["seq"] for r in records] == list(range(1, len(lines) + 1))
    assert [r["n"] for r in records if r["type"] == "request"] == list(range(6))
    report = verify_rows(AUDIT_TABLE, audit_rows(url), KEY, strict=True)
    assert (report.ok, report.records) == (True, len(lines))
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("audit records not written: ") for m in messages)
    assert "audit records written again" in messages
    assert not any("before it wrote them" in m for m in messages)  # expected, not forged


def waiting_for_a_standby(admin: psycopg.Connection[Any], application: str) -> bool:
    found = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        " AND wait_event = 'SyncRep'",
        (application,),
    ).fetchone()
    return found is not None and found[0] > 0


def test_a_synchronous_standby_that_is_away_holds_up_no_batch() -> None:
    """Its commits would wait for the standby as long as it is away, and no statement timeout
    ends that wait: the sink's commits are local (the event loop must not wait on it)."""
    cluster = start_cluster()  # of the test's own: the setting is the whole cluster's
    try:
        url = new_keystore(cluster.new_database())
        sink = PostgresSink(url)
        auditor = Auditor(KEY, [sink], writer_id(), "required", checkpoint_seconds=1e9)
        admin = psycopg.connect(cluster.url(), autocommit=True)
        probe = psycopg.connect(url, autocommit=True, application_name="probe")
        with admin, probe, ThreadPoolExecutor(2) as pool:
            admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'absent'")
            admin.execute("SELECT pg_reload_conf()")
            try:
                # The setting is in force once a commit waits for the standby: a reload reaches
                # each session between its commands, and the checkpointer tells every session
                # that a standby is now required, a little later on a loaded machine. Until
                # then another session's commit goes through: try again, a new table each time.
                waiting = None
                for attempt in range(1000):
                    waiting = pool.submit(probe.execute, f"CREATE TABLE probe_{attempt} ()")
                    while not waiting.done() and not waiting_for_a_standby(admin, "probe"):
                        time.sleep(0.01)
                    if not waiting.done():
                        break  # it waits for the standby, and will until the setting goes
                    waiting.result()
                assert waiting is not None
                assert not waiting.done(), "no commit waited for the standby"
                auditor.record(REQUEST)
                flushed = pool.submit(auditor.flush)
                while not flushed.done():
                    assert not waiting_for_a_standby(admin, "sealflow-audit")
                    time.sleep(0.01)
                assert flushed.result()
            finally:  # every commit still waiting goes on, so that the threads end
                admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
                admin.execute("SELECT pg_reload_conf()")
            waiting.result()
        assert auditor.close()
        assert len(stored(url)) == 2  # the record and its checkpoint
    finally:
        cluster.remove()


def test_a_row_put_where_the_writers_next_line_goes_is_logged_and_named(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = new_keystore(pg_url)
    writer = writer_id()
    auditor = Auditor(KEY, [PostgresSink(url)], writer, "required", checkpoint_seconds=1e9)
    auditor.record({**REQUEST, "n": 0})
    assert auditor.flush()
    first = stored(url)[0]
    # Someone who can write the table takes seq 2 before the writer gets there.
    prev = hashlib.sha256(first).hexdigest()
    forged = orjson.dumps(
        {**REQUEST, "time": "2025-05-01T12:00:00.000000Z", "writer": writer, "seq": 2, "prev": prev}
    )
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO sealflow_audit (writer, seq, line) VALUES (%s, 2, %s)",
            (writer, forged.decode()),
        )
    for n in range(1, 3):
        auditor.record({**REQUEST, "n": n})
    with caplog.at_level(logging.ERROR, logger="sealflow.audit"):
        assert auditor.flush()
    assert any(
        "1 audit record(s) of this process were in table sealflow_audit before it wrote them"
        in r.getMessage()
        for r in caplog.records
    )
    assert auditor.close()
    rows = list(audit_rows(url))
    assert rows[1][1] == forged  # the writer's own seq 2 was not stored
    report = verify_rows(AUDIT_TABLE, rows, KEY, strict=False)
    assert report.error is not None
    assert (report.error.path, report.error.line) == (AUDIT_TABLE, rows[2][0])
    assert f"at {AUDIT_TABLE}:{rows[1][0]}: that record was changed, or this one forged" in (
        report.error.message
    )


def test_a_backlog_larger_than_one_insert_is_written_whole(pg_url: str) -> None:
    url = new_keystore(pg_url)
    sink = PostgresSink(url)
    auditor = Auditor(KEY, [sink], writer_id(), "required", checkpoint_every=10**6)
    for n in range(2 * CHUNK + 7):
        auditor.record({**REQUEST, "n": n})
    assert auditor.close()
    lines = stored(url)
    assert len(lines) == 2 * CHUNK + 8  # and the final checkpoint
    report = verify_rows(AUDIT_TABLE, audit_rows(url), KEY, strict=True)
    assert (report.ok, report.records) == (True, len(lines))
