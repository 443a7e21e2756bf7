"""Key material leaves only with ``export:<glob>``, a scope ``admin`` does not imply.

The attack of issue 24 (item 5): a token with ``admin`` only made a key exportable
(``PATCH {"exportable": true}``), exported its material and opened an envelope offline. Making a
key exportable (native create and PATCH, Transit create and ``keys/:name/config``) and exporting
(native ``/export``, Transit ``export/``) now need ``export`` on the key as well; a refusal
changes nothing.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from sealflow.engine import Algorithm
from sealflow.service.keystore import SQLiteKeyStore, create_master_key_file
from sealflow.service.keystore._root_scopes import GRANTS, ROOT_SCOPES
from tests.service.conftest import Server, start_server
from tests.service.oracle import split
from tests.service.server.test_auth import new_token
from tests.service.transit.conftest import unique

SECRET = b"card 4111 1111 1111 1111"


def _refused(r: httpx.Response, scope: str) -> None:
    assert r.status_code == 403, r.text
    assert r.json()["error"] == {
        "code": "forbidden",
        "message": f"the token lacks the scope {scope}",
    }


def _vault_refused(r: httpx.Response) -> None:
    assert (r.status_code, r.json()) == (403, {"errors": ["permission denied"]}), r.text


def test_an_admin_token_cannot_get_key_material(server: Server) -> None:
    """The report's sequence, and every other way to material, with ``admin`` alone."""
    name = unique("victim")
    admin = new_token(server, "admin")
    with server.client() as root, server.client(admin) as c:
        root.post("/v1/keys", json={"name": name}).raise_for_status()
        envelope = root.post(f"/v1/keys/{name}/encrypt?mode=single", content=SECRET).content
        # The report: PATCH exportable, then export, then open the envelope offline.
        _refused(c.patch(f"/v1/keys/{name}", json={"exportable": True}), f"export:{name}")
        assert c.get(f"/v1/keys/{name}").json()["exportable"] is False  # nothing changed
        root.patch(f"/v1/keys/{name}", json={"exportable": True}).raise_for_status()
        _refused(c.get(f"/v1/keys/{name}/export"), f"export:{name}")
        # A key created exportable is material too: refused, and not created.
        other = unique("victim")
        _refused(c.post("/v1/keys", json={"name": other, "exportable": True}), f"export:{other}")
        assert c.get(f"/v1/keys/{other}").status_code == 404
        # admin keeps what it had: creating a key that is not exportable, managing keys.
        c.post("/v1/keys", json={"name": other}).raise_for_status()
        c.patch(f"/v1/keys/{other}", json={"deletion_allowed": True}).raise_for_status()
        c.post(f"/v1/keys/{other}/rotate").raise_for_status()

    vault = {"X-Vault-Token": admin}
    with httpx.Client(base_url=server.url + "/v1/transit", headers=vault) as t:
        transit = unique("victim")
        t.post(f"/keys/{transit}", json={}).raise_for_status()
        _vault_refused(t.post(f"/keys/{transit}/config", json={"exportable": True}))
        _vault_refused(t.post(f"/keys/{transit}/config", json={"exportable": "true"}))
        assert t.get(f"/keys/{transit}").json()["data"]["exportable"] is False
        created = unique("victim")
        _vault_refused(t.post(f"/keys/{created}", json={"exportable": True}))
        assert t.get(f"/keys/{created}").status_code == 404
        for path in (f"/export/encryption-key/{name}", f"/export/encryption-key/{name}/1"):
            _vault_refused(t.get(path))
        # The same admin changes the rest of a key's config as before.
        r = t.post(f"/keys/{transit}/config", json={"deletion_allowed": True, "exportable": False})
        assert r.status_code == 200
        assert r.json()["data"]["deletion_allowed"] is True

    # Nothing the admin could reach opens the envelope: only the holder of export gets the key.
    with server.client() as root:
        material = base64.b64decode(root.get(f"/v1/keys/{name}/export").json()["key"])
    prefix, body = split(envelope)
    assert AESGCM(material).decrypt(body[:12], body[12:], prefix) == SECRET


def test_export_scope_is_a_glob_and_adds_to_admin(server: Server) -> None:
    """``admin`` + ``export:exp-*`` makes and exports keys named ``exp-*`` only, on both APIs;
    ``export`` without ``admin`` reaches no admin route."""
    both = new_token(server, "admin", "export:exp-*")
    alone = new_token(server, "export:*")
    mine, theirs = unique("exp"), unique("other")
    with server.client(both) as c:
        r = c.post("/v1/keys", json={"name": mine, "exportable": True})
        assert r.status_code == 201
        assert r.json()["exportable"] is True
        assert len(base64.b64decode(c.get(f"/v1/keys/{mine}/export").json()["key"])) == 32
        c.post("/v1/keys", json={"name": theirs}).raise_for_status()
        _refused(c.patch(f"/v1/keys/{theirs}", json={"exportable": True}), f"export:{theirs}")
        made = unique("exp")
        c.post("/v1/keys", json={"name": made}).raise_for_status()
        assert c.patch(f"/v1/keys/{made}", json={"exportable": True}).json()["exportable"] is True
    with server.client(alone) as c:
        r = c.get(f"/v1/keys/{mine}/export")
        assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")

    vault = {"X-Vault-Token": both}
    with httpx.Client(base_url=server.url + "/v1/transit", headers=vault) as t:
        transit = unique("exp")
        r = t.post(f"/keys/{transit}", json={"exportable": True})
        assert r.status_code == 200
        assert r.json()["data"]["exportable"] is True
        keys = t.get(f"/export/encryption-key/{transit}").json()["data"]["keys"]
        assert list(keys) == ["1"]
        config = unique("exp")
        t.post(f"/keys/{config}", json={}).raise_for_status()
        r = t.post(f"/keys/{config}/config", json={"exportable": True})
        assert r.json()["data"]["exportable"] is True
        _vault_refused(t.post(f"/keys/{theirs}/config", json={"exportable": True}))
        _vault_refused(t.get(f"/export/encryption-key/{theirs}"))
    with httpx.Client(base_url=server.url + "/v1/transit", headers={"X-Vault-Token": alone}) as t:
        _vault_refused(t.get(f"/export/encryption-key/{mine}"))


def test_the_root_token_and_the_cli_keep_export(server: Server) -> None:
    """The first start's root token has every scope, ``export:*`` included; ``tokens create``
    grants ``export:<glob>``; the CLI, which holds the master key, needs no token."""
    tokens = json.loads(server.cli("tokens", "list", "--json").stdout)
    (root,) = [t for t in tokens if t["label"] == "root"]
    assert root["scopes"] == ROOT_SCOPES
    with server.client() as c:
        lookup = c.get("/v1/auth/token/lookup-self").json()["data"]
        assert "export:*" in lookup["policies"]
    name = unique("cli")
    assert server.cli("keys", "create", name).returncode == 0
    done = server.cli("keys", "policy", name, "--make-exportable")
    assert done.returncode == 0, done.stderr
    done = server.cli("keys", "export", name)
    assert done.returncode == 0, done.stderr
    assert len(base64.b64decode(json.loads(done.stdout)["key"])) == 32
    label = unique("exporter")
    new_token(server, "admin", "export:orders*", label=label)
    listed = {
        t["label"]: t["scopes"] for t in json.loads(server.cli("tokens", "list", "--json").stdout)
    }
    assert listed[label] == ["admin", "export:orders*"]
    bad = server.cli("tokens", "create", "--scope", "export:")
    assert bad.returncode != 0


def test_the_root_token_of_an_existing_data_dir_keeps_export(tmp_path: Path) -> None:
    """A data dir from a release before ``export:``: its root token (``admin encrypt:*
    decrypt:*``, when admin implied export) still exports, as documented, after the upgrade."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    master = create_master_key_file(data / "master.key")
    with closing(SQLiteKeyStore(data / "keystore.db", master)) as store:
        store.create_key("default", Algorithm.AES_256_GCM)
        store.create_key("kept", Algorithm.AES_256_GCM, exportable=True)
        _, root = store.create_token(list(GRANTS[0][1]), label="root")
        _, admin = store.create_token(["admin"], label="ops")
    with closing(sqlite3.connect(data / "keystore.db")) as db, db:
        for note, _, _ in GRANTS:  # as the old release left it
            db.execute("DELETE FROM meta WHERE key = ?", (note,))

    server = start_server(data)
    try:
        server.token = root
        with server.client() as c:
            r = c.get("/v1/keys/kept/export")
            assert r.status_code == 200
            assert len(base64.b64decode(r.json()["key"])) == 32
            assert c.post("/v1/keys/default/encrypt", content=b"x").status_code == 200
        with server.client(admin) as c:  # an admin token of that release: no export now
            _refused(c.get("/v1/keys/kept/export"), "export:kept")
        listed = {
            t["label"]: t["scopes"]
            for t in json.loads(server.cli("tokens", "list", "--json").stdout)
        }
        assert listed == {"root": ROOT_SCOPES, "ops": ["admin"]}
        assert "given export:*" in server.log.read_text()
    finally:
        server.stop()


def labels_and_scopes(server: Server) -> dict[str, list[str]]:
    return {
        t["label"]: t["scopes"] for t in json.loads(server.cli("tokens", "list", "--json").stdout)
    }
