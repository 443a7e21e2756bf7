"""``sealflow keystore backup`` / ``restore`` end to end: an SQLite keystore backed up while its
server serves encrypts, restored into a fresh PostgreSQL database; that one backed up while its
own server serves, restored into a fresh SQLite file. Every envelope and Transit ciphertext
made before each backup decrypts on a server opened on the restored keystore; a backup with a
byte changed restores nothing."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema_rs
import psycopg

from sealflow.engine import Algorithm
from sealflow.service.audit import SCHEMA
from sealflow.service.keystore import SQLiteKeyStore, create_master_key_file
from tests.postgres import Cluster
from tests.service.conftest import SEALFLOW, Server, start_server

ALGORITHMS = ["aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"]


def keystore(*args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(  # noqa: S603
        [SEALFLOW, "keystore", *args],
        capture_output=True,
        env={**os.environ, **{f"SEALFLOW_{k.upper()}": v for k, v in env.items()}},
        timeout=120,
        check=False,
    )


@dataclass
class Sealed:
    """What was sealed: native envelopes (plaintext, X-AAD, envelope) and Transit ciphertexts
    (key, plaintext, associated_data or None, ciphertext)."""

    envelopes: list[tuple[bytes, str, bytes]] = field(default_factory=list)
    transit: list[tuple[str, bytes, str | None, str]] = field(default_factory=list)

    def seal(self, srv: Server, name: str, text: bytes, n: int) -> None:
        aad = base64.b64encode(f"aad {n}".encode()).decode()
        with srv.client() as c:
            mode = "single" if n % 2 else "stream"
            r = c.post(f"/v1/keys/{name}/encrypt?mode={mode}", content=text, headers={"x-aad": aad})
            r.raise_for_status()
            self.envelopes.append((text, aad, r.content))
            body = {"plaintext": base64.b64encode(text).decode()}
            if n % 3:
                body["associated_data"] = aad
            r = c.post(f"/v1/transit/encrypt/{name}", json=body)
            r.raise_for_status()
            self.transit.append(
                (name, text, body.get("associated_data"), r.json()["data"]["ciphertext"])
            )

    def extend(self, other: Sealed) -> None:
        self.envelopes += other.envelopes
        self.transit += other.transit


def populate(srv: Server) -> Sealed:
    sealed = Sealed()
    with srv.client() as c:
        for alg in ALGORITHMS:
            name = f"k-{alg}"
            c.post("/v1/keys", json={"name": name, "algorithm": alg}).raise_for_status()
            for version in (1, 2, 3):
                sealed.seal(srv, name, f"{name} v{version}".encode() * 500, version)
                c.post(f"/v1/keys/{name}/rotate").raise_for_status()
    return sealed


@contextmanager
def traffic(srv: Server) -> Iterator[Sealed]:
    """Encrypts on every key, native and Transit, from a thread, until the block ends; yields
    what it sealed so far (complete only after the block)."""
    sealed, stop = Sealed(), threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        n = 0
        try:
            while not stop.is_set():
                alg = ALGORITHMS[n % 3]
                sealed.seal(srv, f"k-{alg}", f"traffic {n}".encode() * 50, n)
                n += 1
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield sealed
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors


def wait_for(sealed: Sealed, count: int) -> None:
    while len(sealed.transit) < count:
        threading.Event().wait(0.01)


def backup_while_serving(srv: Server, file: Path, **env: str) -> Sealed:
    """A backup run while ``traffic`` goes on, which ran before it and runs on after it;
    what was sealed before the backup started."""
    with traffic(srv) as sealed:
        wait_for(sealed, 20)
        before = Sealed(list(sealed.envelopes), list(sealed.transit))
        done = keystore("backup", str(file), **env)
        assert done.returncode == 0, done.stderr
        wait_for(sealed, len(before.transit) + 20)
    assert b"backed up keystore " in done.stderr
    return before


def check_decrypts(srv: Server, sealed: Sealed) -> None:
    with srv.client() as c:
        for text, aad, envelope in sealed.envelopes:
            r = c.post("/v1/decrypt", content=envelope, headers={"x-aad": aad})
            assert (r.status_code, r.content) == (200, text)
        for name, text, transit_aad, ciphertext in sealed.transit:
            body = {"ciphertext": ciphertext}
            if transit_aad is not None:
                body["associated_data"] = transit_aad
            r = c.post(f"/v1/transit/decrypt/{name}", json=body)
            assert r.status_code == 200, r.text
            assert base64.b64decode(r.json()["data"]["plaintext"]) == text


def tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'sealflow%'"
        ).fetchall()
    return [str(r[0]) for r in rows]


def test_backed_up_while_serving_restored_across_stores_everything_decrypts(
    postgres: Cluster, tmp_path: Path
) -> None:
    master = tmp_path / "sqlite" / "master.key"
    old = start_server(tmp_path / "sqlite")
    try:
        sealed = populate(old)
        first = tmp_path / "first.bak"
        sealed.extend(backup_while_serving(old, first, data_dir=str(old.data_dir)))
    finally:
        old.stop()
    assert stat.S_IMODE(first.stat().st_mode) == 0o600

    url = postgres.new_database()
    done = keystore("restore", str(first), keystore_url=url, master_key_file=str(master))
    assert done.returncode == 0, done.stderr
    assert b"restored keystore " in done.stderr
    assert b"4 keys (13 versions)" in done.stderr
    on_pg = start_server(tmp_path / "pg", keystore_url=url, master_key_file=master)
    on_pg.token = old.token  # the root token came with the keystore
    try:
        check_decrypts(on_pg, sealed)
        second = tmp_path / "second.bak"
        sealed.extend(
            backup_while_serving(on_pg, second, keystore_url=url, master_key_file=str(master))
        )
    finally:
        on_pg.stop()
    assert stat.S_IMODE(second.stat().st_mode) == 0o600

    data_dir = tmp_path / "restored"
    done = keystore("restore", str(second), data_dir=str(data_dir), master_key_file=str(master))
    assert done.returncode == 0, done.stderr
    on_sqlite = start_server(data_dir, master_key_file=master)
    on_sqlite.token = old.token
    try:
        check_decrypts(on_sqlite, sealed)
    finally:
        on_sqlite.stop()


def test_a_backup_with_one_byte_changed_restores_nothing(postgres: Cluster, tmp_path: Path) -> None:
    srv = start_server(tmp_path / "sqlite")
    master = srv.data_dir / "master.key"
    try:
        populate(srv)
    finally:
        srv.stop()
    good = tmp_path / "good.bak"
    done = keystore("backup", str(good), data_dir=str(srv.data_dir))
    assert done.returncode == 0, done.stderr
    again = keystore("backup", str(good), data_dir=str(srv.data_dir))
    assert again.returncode == 1
    assert b"exists: give --force to replace it" in again.stderr
    data = good.read_bytes()
    url = postgres.new_database()
    # The header (format, keystore id, salt, nonce), the middle of the rows, the tag.
    for at in (4, 10, 40, 70, len(data) // 2, len(data) - 1):
        changed = tmp_path / f"changed-{at}.bak"
        changed.write_bytes(data[:at] + bytes([data[at] ^ 0x80]) + data[at + 1 :])
        into_sqlite = keystore(
            "restore",
            str(changed),
            data_dir=str(tmp_path / f"new-{at}"),
            master_key_file=str(master),
        )
        into_pg = keystore("restore", str(changed), keystore_url=url, master_key_file=str(master))
        for refused in (into_sqlite, into_pg):
            assert refused.returncode == 1
            assert refused.stderr.startswith(b"sealflow: " + str(changed).encode())
            assert b"nothing was restored" in refused.stderr or b"format" in refused.stderr
        assert not (tmp_path / f"new-{at}").exists()
    assert tables(url) == []  # not even the schema
    # The file unchanged restores, and a second restore into the same database is refused.
    assert (
        keystore("restore", str(good), keystore_url=url, master_key_file=str(master)).returncode
        == 0
    )
    twice = keystore("restore", str(good), keystore_url=url, master_key_file=str(master))
    assert twice.returncode == 1
    assert b"is not empty" in twice.stderr
    assert b"--replace-existing" in twice.stderr
    replaced = keystore(
        "restore", str(good), "--replace-existing", keystore_url=url, master_key_file=str(master)
    )
    assert replaced.returncode == 0, replaced.stderr


def test_backup_and_restore_are_on_the_audit_trail(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    key = create_master_key_file(source / "master.key")
    with closing(SQLiteKeyStore(source / "keystore.db", key)) as store:
        store.create_key("orders", Algorithm.AES_256_GCM)
    audit, backup = tmp_path / "audit.log", tmp_path / "keystore.bak"
    master = str(source / "master.key")
    done = keystore("backup", str(backup), data_dir=str(source), audit_file=str(audit))
    assert done.returncode == 0, done.stderr
    done = keystore(
        "restore", str(backup), data_dir=str(target), master_key_file=master, audit_file=str(audit)
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    for record in records:
        validator.validate(record)
    changes = [(r["operation"], r["origin"]) for r in records if r["type"] == "change"]
    assert changes == [("keystore_backup", "cli"), ("keystore_restore", "cli")]
