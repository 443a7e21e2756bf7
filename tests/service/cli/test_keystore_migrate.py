"""``sealflow keystore migrate``: a populated SQLite keystore moved to a real PostgreSQL, and every
envelope sealed before still opens on a server that uses the copy."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

from tests.postgres import Cluster
from tests.service.conftest import SEALFLOW, start_server

ALGORITHMS = ["aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"]


def migrate(*args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(  # noqa: S603
        [SEALFLOW, "keystore", "migrate", *args],
        capture_output=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )


def test_every_envelope_opens_after_migrating_to_postgresql(
    postgres: Cluster, tmp_path: Path
) -> None:
    old = start_server(tmp_path / "sqlite")
    sealed: list[tuple[bytes, str, bytes]] = []  # plaintext, aad header, envelope
    try:
        with old.client() as c:
            for alg in ALGORITHMS:
                name = f"k-{alg}"
                c.post("/v1/keys", json={"name": name, "algorithm": alg}).raise_for_status()
                for version in (1, 2, 3):
                    for mode in ("single", "stream"):
                        text = f"{name} v{version} {mode}".encode() * 1000
                        aad = base64.b64encode(f"aad {version}".encode()).decode()
                        r = c.post(
                            f"/v1/keys/{name}/encrypt?mode={mode}",
                            content=text,
                            headers={"x-aad": aad},
                        )
                        r.raise_for_status()
                        sealed.append((text, aad, r.content))
                    c.post(f"/v1/keys/{name}/rotate").raise_for_status()
            retired = c.post("/v1/keys/default/encrypt?mode=single", content=b"old").content
            c.post("/v1/keys/default/rotate").raise_for_status()
            c.patch("/v1/keys/default", json={"min_decryption_version": 2}).raise_for_status()
        made = old.cli("tokens", "create", "--scope", "decrypt:*")
        gone_secret = made.stdout.decode().strip()
        gone_id = made.stderr.decode().split()[2].rstrip(",")
        assert old.cli("tokens", "revoke", gone_id).returncode == 0
    finally:
        old.stop()

    url = postgres.new_database()
    keystore = tmp_path / "sqlite" / "keystore.db"
    before = keystore.read_bytes()
    done = migrate("--from", f"sqlite:{keystore}", "--to", url)
    assert done.returncode == 0, done.stderr
    assert b"copied 4 keys (14 versions) and 2 tokens" in done.stderr
    assert b"verified" in done.stderr
    assert keystore.read_bytes() == before  # the source is never changed

    # A second run finds the target in use and changes nothing.
    again = migrate("--from", f"sqlite:{keystore}", "--to", url)
    assert again.returncode == 1
    assert b"is not empty (4 keys, 2 tokens)" in again.stderr

    new = start_server(
        tmp_path / "postgres",
        keystore_url=url,
        master_key_file=tmp_path / "sqlite" / "master.key",
    )
    new.token = old.token  # the root token moved with the keystore
    try:
        with new.client() as c:
            for text, aad, envelope in sealed:
                r = c.post("/v1/decrypt", content=envelope, headers={"x-aad": aad})
                assert r.status_code == 200
                assert r.content == text
            # min_decryption_version and the revocation moved too.
            r = c.post("/v1/decrypt", content=retired)
            assert (r.status_code, r.json()["error"]["code"]) == (403, "version_retired")
            assert [k["latest"] for k in c.get("/v1/keys").json()["keys"]] == [2, 4, 4, 4]
        with new.client(gone_secret) as c:
            assert c.post("/v1/decrypt", content=sealed[0][2]).status_code == 401
    finally:
        new.stop()


def test_migrate_refuses_what_it_cannot_copy(postgres: Cluster, tmp_path: Path) -> None:
    url = postgres.new_database()
    missing = migrate("--from", f"sqlite:{tmp_path / 'nope.db'}", "--to", url)
    assert missing.returncode == 1
    assert b"no SQLite keystore at" in missing.stderr
    wrong = migrate("--from", "postgresql://x", "--to", url)
    assert wrong.returncode == 1
    assert b"--from takes sqlite:PATH" in wrong.stderr
