"""``sealflow keystore rotate-master`` on an SQLite keystore while its server serves: the server
follows without a restart, the rotation is a change record on the audit trail, audit trails
written before and after verify with the same key, and a run that finds another rotation under
way refuses to start a second one; a backup taken during a rotation restores with it under way,
and it finishes there; migrate refuses a keystore mid-rotation; a token with a use limit, spent
on a PostgreSQL server while a rotation runs, keeps its exact count."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import jsonschema_rs
import psycopg
import pytest

from sealflow.service.audit import SCHEMA
from tests.postgres import Cluster
from tests.service.conftest import SEALFLOW, Server, start_server
from tests.service.keystore.conftest import stored
from tests.service.keystore.restart import open_each, reopened, seal, seal_names


def sealflow(data: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    variables = {f"SEALFLOW_{k.upper()}": v for k, v in env.items()}
    return subprocess.run(  # noqa: S603
        [SEALFLOW, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "SEALFLOW_DATA_DIR": str(data), **variables},
        timeout=300,
        check=False,
    )


def _killed_after(data: Path, batches: int, size: int = 1) -> None:
    """rotate-master (batches of ``size`` rows) killed with SIGKILL after its ``batches``-th
    batch: a rotation left under way."""
    proc = subprocess.Popen(  # noqa: S603
        [SEALFLOW, "keystore", "rotate-master", "--batch-size", str(size)],
        env={**os.environ, "SEALFLOW_DATA_DIR": str(data)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for _ in range(batches):
        assert proc.stderr.readline().startswith(f"rewrapped {size} rows")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()


def test_rotate_master_while_an_sqlite_server_serves(tmp_path: Path) -> None:
    data = tmp_path / "data"
    served, trail = tmp_path / "server-audit.log", tmp_path / "cli-audit.log"
    srv = start_server(data, audit_file=served)
    try:
        with srv.client() as client:
            for i in range(40):
                client.post("/v1/keys", json={"name": f"k{i}"}).raise_for_status()
            envelopes = seal_names(client, "default", "k0", "k39")
            proc = subprocess.Popen(  # noqa: S603
                [SEALFLOW, "keystore", "rotate-master", "--batch-size", "2"],
                env={
                    **os.environ,
                    "SEALFLOW_DATA_DIR": str(data),
                    "SEALFLOW_AUDIT_FILE": str(trail),
                },
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            served_during = 0
            while proc.poll() is None:
                served_during += open_each(client, envelopes)
            assert proc.stderr is not None
            report = proc.stderr.read()
            proc.stderr.close()
            assert proc.returncode == 0, report
            assert served_during > 0
            assert "to generation 1, sealed by the file master-key provider" in report
            assert "the file master key seals the new key-encryption key as it sealed" in report
            # The same process: old envelopes open, and what it writes now opens after a restart.
            open_each(client, envelopes)
            client.post("/v1/keys", json={"name": "after"}).raise_for_status()
            sealed = client.post("/v1/keys/after/encrypt", content=b"after").content
        assert "was not following" not in srv.log.read_text()
    finally:
        srv.stop()
    assert reopened(srv, data, sealed, audit_file=served) == b"after"

    records = [json.loads(line) for line in trail.read_text().splitlines()]
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    for record in records:
        validator.validate(record)
    (change,) = [r for r in records if r["type"] == "change"]
    assert change["operation"] == "master_rotate"
    assert change["origin"] == "cli"
    assert change["from_provider"] == "file"
    assert change["to_provider"] == "file"
    assert change["kek_generation"] == 1
    assert change["resumed"] is False
    assert change["rows"] > 80  # 41 keys' rows and versions, the token
    # The audit key comes from the stable secret, which the rotation carried over: the
    # server's trail from before and after, and the CLI's, verify with the rotated keystore.
    for path in (served, trail):
        checked = sealflow(data, "audit", "verify", str(path))
        assert checked.returncode == 0, checked.stderr


def test_a_run_does_not_start_a_second_rotation_while_one_is_under_way(tmp_path: Path) -> None:
    data = tmp_path / "data"
    start_server(data).stop()
    key = (data / "master.key").read_text().strip()
    _killed_after(data, 1)

    other = sealflow(data, "keystore", "rotate-master", "--to", "env", master_key=key)
    assert other.returncode == 1
    assert other.stderr.splitlines() == [
        f"sealflow: keystore {data / 'keystore.db'}: a rotation to the file master-key provider"
        " is under way; run rotate-master --to file with its settings to finish it"
    ]
    done = sealflow(data, "keystore", "rotate-master")
    assert done.returncode == 0, done.stderr
    assert "to generation 1, sealed by the file master-key provider" in done.stderr
    listed = sealflow(data, "keys", "list")
    assert listed.returncode == 0, listed.stderr
    assert "default" in listed.stdout


def test_migrate_refuses_a_keystore_mid_rotation(
    postgres: Cluster, tmp_path: Path, make_server: Callable[..., Server]
) -> None:
    """Its rows are under two KEKs: nothing is copied until the rotation is finished."""
    srv = make_server()
    data = srv.data_dir
    sealed = seal(srv, b"moved")
    srv.stop()
    _killed_after(data, 2)
    url = postgres.new_database()
    keystore = data / "keystore.db"
    refused = sealflow(data, "keystore", "migrate", "--from", f"sqlite:{keystore}", "--to", url)
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"sealflow: keystore {keystore}: a rotate-master is under way; finish it first (run it"
        " again)"
    ]
    with closing(psycopg.connect(url)) as pg:
        tables = pg.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'sealflow%'")
        assert tables.fetchone() == (0,)  # nothing written to the target

    finished = sealflow(data, "keystore", "rotate-master")
    assert finished.returncode == 0, finished.stderr
    moved = sealflow(data, "keystore", "migrate", "--from", f"sqlite:{keystore}", "--to", url)
    assert moved.returncode == 0, moved.stderr
    settings = {"keystore_url": url, "master_key_file": data / "master.key"}
    assert reopened(srv, tmp_path / "pg", sealed, **settings) == b"moved"


def test_a_use_limited_token_keeps_its_count_through_a_rotation_on_postgresql(
    postgres: Cluster, tmp_path: Path
) -> None:
    """A token's uses are written without bumping the change counter: each such write and each
    rotation batch are serialised on the token's row, so no use is lost or counted twice and
    the row's MAC stays valid under whichever KEK wrote it last."""
    data, url = tmp_path / "data", postgres.new_database()
    master = base64.b64encode(os.urandom(32)).decode()
    srv = start_server(data, keystore_url=url, master_key=master)
    limit = 100_000
    try:
        made = srv.cli("tokens", "create", "--scope", "encrypt:default", "--num-uses", str(limit))
        assert made.returncode == 0, made.stderr
        secret = made.stdout.decode().strip()
        proc = subprocess.Popen(  # noqa: S603
            [SEALFLOW, "keystore", "rotate-master", "--batch-size", "1"],
            env={
                **os.environ,
                "SEALFLOW_DATA_DIR": str(data),
                "SEALFLOW_KEYSTORE_URL": url,
                "SEALFLOW_MASTER_KEY": master,
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        spent = 0
        with srv.client(secret) as client:
            while proc.poll() is None or spent < 20:
                reply = client.post("/v1/keys/default/encrypt", content=b"x")
                assert reply.status_code == 200, reply.text
                spent += 1
        assert proc.stderr is not None
        report = proc.stderr.read()
        proc.stderr.close()
        assert proc.returncode == 0, report
        assert "was not following" not in srv.log.read_text()
    finally:
        srv.stop()
    # A new process (the KEK unsealed afresh) reads the row: its MAC verifies, its count is
    # exact, and the token goes on working.
    again = start_server(data, keystore_url=url, master_key=master)
    try:
        with again.client(secret) as client:
            assert client.post("/v1/keys/default/encrypt", content=b"y").status_code == 200
        listed = again.cli("tokens", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        (row,) = [t for t in json.loads(listed.stdout) if t.get("num_uses") == limit]
        assert row["uses_left"] == limit - spent - 1
    finally:
        again.stop()


def test_a_backup_taken_during_a_rotation_restores_with_it_under_way(tmp_path: Path) -> None:
    data, copy, backup = tmp_path / "data", tmp_path / "copy", tmp_path / "keystore.bak"
    srv = start_server(data)
    try:
        with srv.client() as client:
            for i in range(10):
                client.post("/v1/keys", json={"name": f"k{i}"}).raise_for_status()
            sealed = client.post("/v1/keys/k9/encrypt", content=b"k9").content
    finally:
        srv.stop()
    _killed_after(data, 3, size=2)

    key_file = str(data / "master.key")
    saved = sealflow(data, "keystore", "backup", str(backup))
    assert saved.returncode == 0, saved.stderr
    restored = sealflow(copy, "keystore", "restore", str(backup), master_key_file=key_file)
    assert restored.returncode == 0, restored.stderr
    under_way = stored(copy, {})("SELECT key FROM meta WHERE key LIKE 'master_%_next'")
    assert sorted(under_way) == [("master_kek_next",), ("master_seal_next",)]
    # Rows under both KEKs: the restored keystore serves every key, and the rotation finishes.
    assert reopened(srv, copy, sealed, master_key_file=key_file) == b"k9"
    done = sealflow(copy, "keystore", "rotate-master", master_key_file=key_file)
    assert done.returncode == 0, done.stderr
    assert "to generation 1, sealed by the file master-key provider" in done.stderr
    assert reopened(srv, copy, sealed, master_key_file=key_file) == b"k9"


@pytest.mark.parametrize("into", ["sqlite", "postgresql"])
def test_a_rotated_keystore_moves_by_backup_and_by_migrate(
    postgres: Cluster, tmp_path: Path, into: str, make_server: Callable[..., Server]
) -> None:
    """After a rotation every value is under generation 1: a new keystore made from it (a
    restore into either store, a migrate into PostgreSQL) writes its check value under that
    generation too, and opens."""
    backup = tmp_path / "keystore.bak"
    srv = make_server()
    data = srv.data_dir
    sealed = seal(srv, b"kept")
    srv.stop()
    done = sealflow(data, "keystore", "rotate-master")
    assert done.returncode == 0, done.stderr
    key_file = str(data / "master.key")
    target: dict[str, object] = {"master_key_file": key_file}
    if into == "postgresql":
        target["keystore_url"] = postgres.new_database()
    env = {k: str(v) for k, v in target.items()}
    saved = sealflow(data, "keystore", "backup", str(backup))
    assert saved.returncode == 0, saved.stderr
    restored = sealflow(tmp_path / "restored", "keystore", "restore", str(backup), **env)
    assert restored.returncode == 0, restored.stderr
    copies = {"restored": target}
    if into == "postgresql":
        url = postgres.new_database()
        source = f"sqlite:{data / 'keystore.db'}"
        moved = sealflow(data, "keystore", "migrate", "--from", source, "--to", url)
        assert moved.returncode == 0, moved.stderr
        copies["migrated"] = {**target, "keystore_url": url}
    for where, settings in copies.items():
        assert reopened(srv, tmp_path / where, sealed, **settings) == b"kept", where


def test_an_idle_sqlite_server_follows_a_rotation(make_server: Callable[..., Server]) -> None:
    """No request while the rotation runs: the usage meter's once-a-second read of the key list
    has it follow, so what it writes afterwards is under the new KEK."""
    srv = make_server()
    data = srv.data_dir
    sealed = seal(srv, b"before")
    done = sealflow(data, "keystore", "rotate-master")
    assert done.returncode == 0, done.stderr
    with srv.client() as client:
        assert client.post("/v1/decrypt", content=sealed).content == b"before"
        client.post("/v1/keys", json={"name": "after"}).raise_for_status()
        later = client.post("/v1/keys/after/encrypt", content=b"after").content
    assert "was not following" not in srv.log.read_text()
    assert reopened(srv, data, later) == b"after"


def test_a_batch_size_below_one_is_refused_by_name(tmp_path: Path) -> None:
    for size in ("0", "-3", "many"):
        done = sealflow(tmp_path / "none", "keystore", "rotate-master", "--batch-size", size)
        assert done.returncode == 2
        assert done.stderr.splitlines()[-1] == (
            "sealflow keystore rotate-master: error: argument --batch-size: "
            f"{size!r} is not a whole number, 1 or more"
        )
        assert "Traceback" not in done.stderr


def test_no_keystore_is_made_to_be_rotated(tmp_path: Path) -> None:
    done = sealflow(tmp_path / "none", "keystore", "rotate-master")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"sealflow: no keystore at {tmp_path / 'none' / 'keystore.db'} (`sealflow serve` creates"
        " one)"
    ]
    assert not (tmp_path / "none" / "keystore.db").exists()
