"""The ``sealflow`` command: first start, later starts, bad keystores, keys, tokens, the client."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import stat
import subprocess
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from sealflow.service.keystore import create_master_key_file
from tests.service.conftest import SEALFLOW, Server, start_server
from tests.service.keystore.files import build_v1, corrupt_free_space
from tests.service.oracle import open_envelope


def run(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(  # noqa: S603
        [SEALFLOW, *args],
        cwd=cwd,
        capture_output=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )


def test_first_start_creates_a_dev_setup_and_later_starts_reuse_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_server(data)
    try:
        assert len(first.token) >= 43
        out = data.with_name("data.stdout").read_text().splitlines()
        assert out.count(f"Root token: {first.token}") == 1
        assert "dev mode" in first.log.read_text()
        assert stat.S_IMODE((data / "master.key").stat().st_mode) == 0o600
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert stat.S_IMODE((data / "keystore.db").stat().st_mode) == 0o600
        with first.client() as c:
            assert c.get("/v1/keys/default").json()["algorithm"] == "aes-256-gcm"
            envelope = c.post("/v1/keys/default/encrypt", content=b"kept").content
    finally:
        first.stop()
    second = start_server(data)
    try:
        assert second.token == ""  # no new token printed
        with second.client(first.token) as c:  # the old one still works, and the key too
            assert c.post("/v1/decrypt", content=envelope).content == b"kept"
    finally:
        second.stop()


def test_a_corrupt_keystore_stops_start_up_with_a_clear_message(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "keystore.db").write_bytes(os.urandom(8192))
    done = run("serve", "--port", "0", SEALFLOW_DATA_DIR=str(data))
    assert done.returncode == 1
    assert b"keystore" in done.stderr
    assert b"Traceback" not in done.stderr


@pytest.mark.parametrize("damage", ["emptied", "not a keystore", "fails quick_check"])
def test_a_keystore_file_that_is_not_a_whole_keystore_stops_start_up_and_is_kept(
    tmp_path: Path, damage: str
) -> None:
    data = tmp_path / "data"
    start_server(data).stop()
    keystore = data / "keystore.db"
    if damage == "emptied":
        keystore.write_bytes(b"")  # `: > keystore.db`, the master key still there
        expected = "is an empty file"
    elif damage == "not a keystore":
        keystore.unlink()
        with closing(sqlite3.connect(keystore)) as db, db:
            db.execute("CREATE TABLE notes (body TEXT)")
        expected = "is not a sealflow keystore"
    else:
        corrupt_free_space(keystore, "key_versions")
        expected = "is damaged (SQLite quick_check:"
    before = keystore.read_bytes()
    done = run("serve", "--port", "0", SEALFLOW_DATA_DIR=str(data))
    assert done.returncode == 1
    (line,) = done.stderr.decode().splitlines()  # one line, no traceback
    assert line.startswith("sealflow: ")
    assert str(keystore) in line
    assert expected in line
    assert b"Root token" not in done.stdout
    assert keystore.read_bytes() == before  # not replaced, not repaired
    assert sorted(p.name for p in data.iterdir()) == ["keystore.db", "master.key"]


def test_a_data_dir_of_schema_1_is_upgraded_at_start_and_keeps_its_keys_and_tokens(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    master = create_master_key_file(data / "master.key")
    made = build_v1(data / "keystore.db", master)
    srv = start_server(data)
    try:
        assert srv.token == ""  # an existing keystore: no new root token
        with srv.client(made.secrets["root"]) as c:
            for (name, version), material in made.materials.items():
                r = c.get(f"/v1/keys/{name}/export", params={"version": version})
                if name in ("export.me", "small"):
                    assert base64.b64decode(r.json()["key"]) == material
                else:
                    assert r.json()["error"]["code"] == "not_exportable"
            # The material of a key that cannot be exported is unchanged too.
            envelope = c.post("/v1/keys/orders/encrypt", content=b"after the upgrade").content
            assert open_envelope(made.materials["orders", 3], envelope) == b"after the upgrade"
        with srv.client(made.secrets["gone"]) as c:
            assert c.get("/v1/keys").status_code == 401  # still revoked
    finally:
        srv.stop()
    (upgraded,) = [line for line in srv.log.read_text().splitlines() if "upgraded" in line]
    assert "from schema 1 to 2: 7 key versions rewrapped" in upgraded


def test_secrets_open_to_group_or_others_are_warned_about_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    start_server(data).stop()
    data.chmod(0o750)
    (data / "master.key").chmod(0o644)
    srv = start_server(data)
    srv.stop()
    warned = [
        json.loads(line)
        for line in srv.log.read_text().splitlines()
        if "is open to group or others" in line
    ]
    assert [(w["level"], w["path"], w["mode"]) for w in warned] == [
        ("warning", str(data), "0750"),
        ("warning", str(data / "master.key"), "0644"),
    ]


def test_keys_export_refuses_a_retired_version(server: Server) -> None:
    name = "cli-" + os.urandom(3).hex()
    assert server.cli("keys", "create", name, "--exportable").returncode == 0
    assert server.cli("keys", "rotate", name).returncode == 0
    with server.client() as c:
        c.patch(f"/v1/keys/{name}", json={"min_decryption_version": 2}).raise_for_status()
    done = server.cli("keys", "export", name, "--version", "1")
    assert done.returncode == 1
    assert b"below min_decryption_version 2" in done.stderr
    assert done.stdout == b""
    assert json.loads(server.cli("keys", "export", name).stdout)["version"] == 2


def test_a_wrong_master_key_stops_start_up(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = start_server(data)
    srv.stop()
    (data / "master.key").write_text("A" * 43 + "=\n")
    done = run("serve", "--port", "0", SEALFLOW_DATA_DIR=str(data))
    assert done.returncode == 1
    assert b"master key" in done.stderr
    assert b"Traceback" not in done.stderr


def test_invalid_settings_are_refused(tmp_path: Path) -> None:
    done = run("serve", "--context-strategy", "sometimes", SEALFLOW_DATA_DIR=str(tmp_path))
    assert done.returncode == 2
    assert b"--context-strategy" in done.stderr  # named as the user wrote it


def test_keys_commands(server: Server) -> None:
    name = "cli-" + os.urandom(3).hex()
    created = json.loads(server.cli("keys", "create", name, "--exportable").stdout)
    assert (created["name"], created["latest"], created["exportable"]) == (name, 1, True)
    assert name in [k["name"] for k in json.loads(server.cli("keys", "list", "--json").stdout)]
    assert json.loads(server.cli("keys", "rotate", name).stdout)["latest"] == 2
    exported = json.loads(server.cli("keys", "export", name, "--version", "1").stdout)
    with server.client() as c:
        via_api = c.get(f"/v1/keys/{name}/export", params={"version": 1}).json()
    assert exported["key"] == via_api["key"]
    done = server.cli("keys", "export", "default")
    assert done.returncode != 0
    assert b"exportable" in done.stderr
    assert server.cli("keys", "create", name).returncode == 1  # exists
    # A key made exportable later: `keys show` says so, and its first version exports.
    later = "cli-" + os.urandom(3).hex()
    server.cli("keys", "create", later)
    assert json.loads(server.cli("keys", "show", later, "--json").stdout)["exportable"] is False
    made = json.loads(server.cli("keys", "policy", later, "--make-exportable").stdout)
    assert made["exportable"] is True
    assert json.loads(server.cli("keys", "show", later, "--json").stdout)["exportable"] is True
    assert json.loads(server.cli("keys", "export", later).stdout)["version"] == 1


def test_tokens_commands_never_print_secrets_after_creation(server: Server) -> None:
    done = server.cli("tokens", "create", "--scope", "encrypt:x*", "--label", "cli")
    secret = done.stdout.decode().strip()
    assert len(secret) >= 43
    listed = server.cli("tokens", "list").stdout.decode()
    assert secret not in listed
    assert server.token not in listed
    assert "encrypt:x*" in listed
    bad = server.cli("tokens", "create", "--scope", "everything")
    assert bad.returncode == 1


@pytest.mark.parametrize("mode", ["stream", "single"])
def test_encrypt_and_decrypt_commands_round_trip_a_file(
    server: Server, tmp_path: Path, mode: str
) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(os.urandom(20 << 20 if mode == "stream" else 3 << 20))
    sealed, back = tmp_path / "sealed", tmp_path / "back"
    done = server.cli(
        "encrypt", "--key", "default", "--mode", mode, "--aad", "ctx", "-i", str(plain),
        "-o", str(sealed),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sealed.read_bytes()[:4] == b"SFL1"
    done = server.cli("decrypt", "--aad", "ctx", "-i", str(sealed), "-o", str(back))
    assert done.returncode == 0, done.stderr
    assert hashlib.sha256(back.read_bytes()).digest() == hashlib.sha256(plain.read_bytes()).digest()
    # Through stdin and stdout (a pipe: chunked upload).
    done = server.cli("decrypt", "--aad", "ctx", stdin=sealed.read_bytes())
    assert done.returncode == 0
    assert done.stdout == plain.read_bytes()


def test_a_failed_decrypt_exits_non_zero_and_leaves_no_output(
    server: Server, tmp_path: Path
) -> None:
    data = os.urandom(3 << 20)
    with server.client() as c:
        envelope = bytearray(c.post("/v1/keys/default/encrypt", content=data).content)
    envelope[-20_000] ^= 1  # a late chunk: the stream is cut off after output started
    bad, out = tmp_path / "bad", tmp_path / "out"
    bad.write_bytes(envelope)
    done = server.cli("decrypt", "-i", str(bad), "-o", str(out))
    assert done.returncode == 1
    assert b"decrypt failed" in done.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [bad]  # no temporary file left behind either
    wrong = server.cli("decrypt", "--key", "t-aes256", stdin=bytes(envelope))
    assert wrong.returncode == 1
    assert wrong.stderr.startswith(b"sealflow: decrypt failed: decryption failed")


def test_client_reports_missing_token_and_server_errors(
    server: Server, make_server: Callable[..., Server]
) -> None:
    env = {**os.environ, "SEALFLOW_URL": server.url}
    env.pop("SEALFLOW_TOKEN", None)
    done = subprocess.run(  # noqa: S603
        [SEALFLOW, "encrypt", "--key", "default"], input=b"x", capture_output=True, env=env,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert b"SEALFLOW_TOKEN" in done.stderr
    done = server.cli("encrypt", "--key", "no-such-key", stdin=b"x")
    assert done.returncode == 1
    assert b"key_not_found" in done.stderr
    assert server.token.encode() not in done.stderr


def test_openapi_documents_the_data_routes(server: Server) -> None:
    spec = httpx.get(server.url + "/openapi.json").json()
    for path in ("/v1/keys/{name}/encrypt", "/v1/keys/{name}/decrypt", "/v1/decrypt"):
        post = spec["paths"][path]["post"]
        assert "application/octet-stream" in post["requestBody"]["content"]
        assert {"200", "400", "401", "403", "413"} <= set(post["responses"])
    assert "/v1/keys/{name}/rotate" in spec["paths"]
    assert "/readyz" in spec["paths"]


def test_a_root_token_from_a_secret_is_installed_and_not_printed(tmp_path: Path) -> None:
    secret = tmp_path / "root-token"
    token = "r" * 20 + os.urandom(24).hex()  # 68 URL-safe characters
    secret.write_text(token + "\n")
    srv = start_server(tmp_path / "data", root_token_file=secret)
    try:
        assert srv.token == ""  # nothing printed
        with srv.client(token) as c:
            assert c.get("/v1/keys").status_code == 200
    finally:
        srv.stop()
    done = run(
        "serve", "--port", "0", SEALFLOW_DATA_DIR=str(tmp_path / "other"),
        SEALFLOW_ROOT_TOKEN="too-short",  # noqa: S106 (a deliberately invalid token)
    )  # fmt: skip
    assert done.returncode == 1
    assert b"43 or more" in done.stderr
    assert b"too-short" not in done.stderr


def test_uvicorns_flag_name_sets_the_concurrency_limit(tmp_path: Path) -> None:
    done = run("serve", "--limit-concurrency", "lots", SEALFLOW_DATA_DIR=str(tmp_path))
    assert done.returncode == 2
    assert b"--max-concurrent-requests" in done.stderr
