"""``sealflow keystore rotate-master`` on an SQLite keystore while its server serves: the server
follows without a restart, the rotation is a change record on the audit trail, audit trails
written before and after verify with the same key, and a run that finds another rotation under
way refuses to start a second one; a backup taken during a rotation restores with it under way,
and it finishes there."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import jsonschema_rs

from sealflow.service.audit import SCHEMA
from tests.service.conftest import SEALFLOW, start_server


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


def test_rotate_master_while_an_sqlite_server_serves(tmp_path: Path) -> None:
    data = tmp_path / "data"
    served, trail = tmp_path / "server-audit.log", tmp_path / "cli-audit.log"
    srv = start_server(data, audit_file=served)
    try:
        with srv.client() as client:
            for i in range(40):
                client.post("/v1/keys", json={"name": f"k{i}"}).raise_for_status()
            envelopes = {
                name: client.post(f"/v1/keys/{name}/encrypt", content=name.encode()).content
                for name in ("default", "k0", "k39")
            }
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
                for name, envelope in envelopes.items():
                    reply = client.post("/v1/decrypt", content=envelope)
                    assert reply.status_code == 200, reply.text
                    assert reply.content == name.encode()
                    served_during += 1
            assert proc.stderr is not None
            report = proc.stderr.read()
            proc.stderr.close()
            assert proc.returncode == 0, report
            assert served_during > 0
            assert "to generation 1, sealed by the file master-key provider" in report
            assert "the file master key seals the new key-encryption key as it sealed" in report
            # The same process: old envelopes open, and what it writes now opens after a restart.
            for name, envelope in envelopes.items():
                assert client.post("/v1/decrypt", content=envelope).content == name.encode()
            client.post("/v1/keys", json={"name": "after"}).raise_for_status()
            sealed = client.post("/v1/keys/after/encrypt", content=b"after").content
        assert "was not following" not in srv.log.read_text()
    finally:
        srv.stop()
    again = start_server(data, audit_file=served)
    try:
        again.token = srv.token
        with again.client() as client:
            assert client.post("/v1/decrypt", content=sealed).content == b"after"
    finally:
        again.stop()

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
    proc = subprocess.Popen(  # noqa: S603
        [SEALFLOW, "keystore", "rotate-master", "--batch-size", "1"],
        env={**os.environ, "SEALFLOW_DATA_DIR": str(data)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("rewrapped 1 rows")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()

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
    proc = subprocess.Popen(  # noqa: S603
        [SEALFLOW, "keystore", "rotate-master", "--batch-size", "2"],
        env={**os.environ, "SEALFLOW_DATA_DIR": str(data)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for _ in range(3):
        assert proc.stderr.readline().startswith("rewrapped 2 rows")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()

    key_file = str(data / "master.key")
    saved = sealflow(data, "keystore", "backup", str(backup))
    assert saved.returncode == 0, saved.stderr
    restored = sealflow(copy, "keystore", "restore", str(backup), master_key_file=key_file)
    assert restored.returncode == 0, restored.stderr
    with closing(sqlite3.connect(copy / "keystore.db")) as db:
        under_way = db.execute("SELECT key FROM meta WHERE key LIKE 'master_%_next'").fetchall()
    assert sorted(under_way) == [("master_kek_next",), ("master_seal_next",)]
    # Rows under both KEKs: the restored keystore serves every key, and the rotation finishes.
    again = start_server(copy, master_key_file=key_file)
    try:
        again.token = srv.token
        with again.client() as client:
            assert client.post("/v1/decrypt", content=sealed).content == b"k9"
    finally:
        again.stop()
    done = sealflow(copy, "keystore", "rotate-master", master_key_file=key_file)
    assert done.returncode == 0, done.stderr
    assert "to generation 1, sealed by the file master-key provider" in done.stderr
    last = start_server(copy, master_key_file=key_file)
    try:
        last.token = srv.token
        with last.client() as client:
            assert client.post("/v1/decrypt", content=sealed).content == b"k9"
    finally:
        last.stop()


def test_an_idle_sqlite_server_follows_a_rotation(tmp_path: Path) -> None:
    """No request while the rotation runs: the usage meter's once-a-second read of the key list
    has it follow, so what it writes afterwards is under the new KEK."""
    data = tmp_path / "data"
    srv = start_server(data)
    try:
        with srv.client() as client:
            sealed = client.post("/v1/keys/default/encrypt", content=b"before").content
        done = sealflow(data, "keystore", "rotate-master")
        assert done.returncode == 0, done.stderr
        with srv.client() as client:
            assert client.post("/v1/decrypt", content=sealed).content == b"before"
            client.post("/v1/keys", json={"name": "after"}).raise_for_status()
            later = client.post("/v1/keys/after/encrypt", content=b"after").content
        assert "was not following" not in srv.log.read_text()
    finally:
        srv.stop()
    again = start_server(data)
    try:
        again.token = srv.token
        with again.client() as client:
            assert client.post("/v1/decrypt", content=later).content == b"after"
    finally:
        again.stop()


def test_no_keystore_is_made_to_be_rotated(tmp_path: Path) -> None:
    done = sealflow(tmp_path / "none", "keystore", "rotate-master")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"sealflow: no keystore at {tmp_path / 'none' / 'keystore.db'} (`sealflow serve` creates"
        " one)"
    ]
    assert not (tmp_path / "none" / "keystore.db").exists()
