"""The keystore attacks of the hardening report, against a running server and after a restart.

The attacker can write keystore.db (sqlite3 on the real file) but holds neither the master key
nor a token. Every change below used to be obeyed; now the row fails its MAC: a key is
refused (503 keystore_unavailable, logged once) while other keys keep working, a token is no
token (401).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing

import httpx
import pytest

from tests.service.conftest import Server, start_server
from tests.service.server.test_auth import new_token

MakeServer = Callable[..., Server]
DATA = b"kept under the sealed key"


def attacker(srv: Server, sql: str, *args: object) -> None:
    with closing(sqlite3.connect(srv.data_dir / "keystore.db")) as db, db:
        db.execute(sql, args)


Restart = Callable[[Server], Server]


@pytest.fixture
def restart() -> Iterator[Restart]:
    """Serve a server's data dir from a new process (the old root token works there too)."""
    started: list[Server] = []

    def again(srv: Server) -> Server:
        srv.stop()
        started.append(start_server(srv.data_dir))
        started[-1].token = srv.token
        return started[-1]

    yield again
    for srv in started:
        srv.stop()


def refusals(srv: Server, what: str) -> int:
    lines = srv.log.read_text().splitlines()
    return sum(1 for line in lines if "fails its integrity check" in line and what in line)


@pytest.fixture
def srv(make_server: MakeServer) -> Server:
    server = make_server()
    with server.client() as c:
        c.post("/v1/keys", json={"name": "sealed"}).raise_for_status()  # not exportable
    return server


def code(r: httpx.Response) -> str:
    return str(r.json()["error"]["code"])


KEY_ATTACKS = {
    "made exportable": "UPDATE keys SET exportable = 1 WHERE name = 'sealed'",
    "relabelled as chacha20": "UPDATE keys SET algorithm = 'chacha20-poly1305'"
    " WHERE name = 'sealed'",
    "min_decryption_version lowered": "UPDATE keys SET min_decryption_version = 1"
    " WHERE name = 'sealed'",
}


@pytest.mark.parametrize("attack", KEY_ATTACKS)
def test_a_key_row_changed_in_the_file_makes_the_key_unusable(
    srv: Server, restart: Restart, attack: str
) -> None:
    with srv.client() as c:
        old = c.post("/v1/keys/sealed/encrypt", content=DATA, params={"mode": "single"}).content
        c.post("/v1/keys/sealed/rotate").raise_for_status()
        c.patch("/v1/keys/sealed", json={"min_decryption_version": 2}).raise_for_status()
        assert code(c.post("/v1/decrypt", content=old)) == "version_retired"
        new = c.post("/v1/keys/sealed/encrypt", content=DATA).content
    attacker(srv, KEY_ATTACKS[attack])

    def refused(s: Server) -> None:
        with s.client() as c:
            for _ in range(3):
                for r in (
                    c.get("/v1/keys/sealed/export"),
                    c.get("/v1/keys/sealed/export", params={"version": 1}),
                    c.get("/v1/keys/sealed"),
                    c.post("/v1/keys/sealed/encrypt", content=DATA),
                    c.post("/v1/decrypt", content=old),
                    c.post("/v1/decrypt", content=new),
                    c.post("/v1/keys/sealed/rotate"),
                ):
                    assert (r.status_code, code(r)) == (503, "keystore_unavailable"), r.text
                    assert "key" not in r.json()
                assert "sealed" not in [k["name"] for k in c.get("/v1/keys").json()["keys"]]
                # Other keys keep working.
                sealed = c.post("/v1/keys/default/encrypt", content=DATA).content
                assert c.post("/v1/decrypt", content=sealed).content == DATA

    refused(srv)
    assert refusals(srv, "'sealed'") == 1  # once, however many requests name the key
    refused(restart(srv))
    assert refusals(srv, "'sealed'") == 2  # once by each process


def chosen_secret_row(srv: Server, mac: str) -> str:
    """Insert a token row: SHA-256 of a secret of the attacker's choosing, every scope."""
    secret = secrets.token_urlsafe(32)
    with closing(sqlite3.connect(srv.data_dir / "keystore.db")) as db, db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(tokens)")]
        names = ["id", "digest", "scopes", "label", "created_at", "revoked_at"]
        values = ["'tok_00000000000000aa'", "?", "'admin encrypt:* decrypt:*'", "'x'", "0", "NULL"]
        if "mac" in columns:  # the attacker's best try: they cannot compute one
            names.append("mac")
            values.append(mac)
        db.execute(
            f"INSERT INTO tokens ({', '.join(names)}) VALUES ({', '.join(values)})",  # noqa: S608
            (hashlib.sha256(secret.encode()).digest(),),
        )
    return secret


@pytest.mark.parametrize("mac", ["randomblob(32)", "(SELECT mac FROM tokens LIMIT 1)"])
def test_an_inserted_token_row_is_401(srv: Server, restart: Restart, mac: str) -> None:
    secret = chosen_secret_row(srv, mac)

    def refused(s: Server) -> None:
        with s.client(secret) as c:
            for path in ("/v1/keys", "/v1/keys/default"):
                assert c.get(path).status_code == 401
            r = c.post("/v1/keys/default/encrypt", content=DATA)
            assert (r.status_code, code(r)) == (401, "unauthorized")
        with s.client() as c:  # the real root token still works
            assert c.get("/v1/keys").status_code == 200

    refused(srv)
    assert refusals(srv, "tok_00000000000000aa") == 1
    refused(restart(srv))
    assert refusals(srv, "tok_00000000000000aa") == 2
    assert secret not in srv.log.read_text()


TOKEN_ATTACKS = {
    "scopes widened": "UPDATE tokens SET scopes = 'admin encrypt:* decrypt:*' WHERE label = 'app'",
    "revocation undone": "UPDATE tokens SET revoked_at = NULL WHERE label = 'app'",
}


@pytest.mark.parametrize("attack", TOKEN_ATTACKS)
def test_a_token_row_changed_in_the_file_is_401(srv: Server, restart: Restart, attack: str) -> None:
    token = new_token(srv, "encrypt:default", label="app")
    with srv.client(token) as c:
        assert c.post("/v1/keys/default/encrypt", content=DATA).status_code == 200
        assert c.get("/v1/keys").status_code == 403
    if attack == "revocation undone":
        listed = json.loads(srv.cli("tokens", "list", "--json").stdout)
        (token_id,) = [t["id"] for t in listed if t["label"] == "app"]
        assert srv.cli("tokens", "revoke", token_id).returncode == 0
    attacker(srv, TOKEN_ATTACKS[attack])

    def refused(s: Server) -> None:
        with s.client(token) as c:
            assert c.get("/v1/keys").status_code == 401
            assert c.post("/v1/keys/default/encrypt", content=DATA).status_code == 401

    refused(srv)
    refused(restart(srv))
