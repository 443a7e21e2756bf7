"""The audit trail against a real server (issue 25): who did what, with which key, and nothing
secret on record; the chain verifies; in mode required no success leaves without its record.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs

from sealflow.service.audit import SCHEMA
from tests import tmpfs
from tests.service.conftest import SEALFLOW, Server, start_server

KiB = 1024


def records(path: Path) -> list[dict[str, Any]]:
    lines = []
    for file in sorted(path.parent.glob(path.name + "*")):
        lines += [json.loads(line) for line in file.read_text().splitlines()]
    return lines


def verify(audit: Path, srv: Server, *args: str) -> subprocess.CompletedProcess[str]:
    files = sorted(str(f) for f in audit.parent.glob(audit.name + "*"))
    env = {**os.environ, **srv.env}
    return subprocess.run(  # noqa: S603
        [SEALFLOW, "audit", "verify", *args, *files],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def new_token(srv: Server, label: str, *scopes: str) -> tuple[str, str]:
    """A token's secret and accessor, made with the CLI."""
    flags = [f for scope in scopes for f in ("--scope", scope)]
    done = srv.cli("tokens", "create", *flags, "--label", label)
    assert done.returncode == 0, done.stderr
    accessor = done.stderr.decode().split("token id ", 1)[1].split(",")[0]
    return done.stdout.decode().strip(), accessor


def test_two_callers_are_on_record_with_nothing_secret(tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    srv = start_server(tmp_path / "data", audit_file=audit)
    secrets: list[bytes] = [srv.token.encode()]
    try:
        alice, alice_id = new_token(srv, "alice", "encrypt:default", "decrypt:default")
        bob, bob_id = new_token(srv, "bob", "encrypt:default")
        secrets += [alice.encode(), bob.encode()]
        plain = [os.urandom(8).hex().encode() for _ in range(6)]
        aad = os.urandom(8).hex()
        secrets += [*plain, aad.encode()]
        base = srv.url
        with httpx.Client(base_url=base, headers={"authorization": f"Bearer {alice}"}) as a:
            single = a.post("/v1/keys/default/encrypt?mode=single", content=plain[0])
            assert single.status_code == 200
            headers = {"X-AAD": aad}
            stream = a.post("/v1/keys/default/encrypt", content=plain[1], headers=headers)
            assert stream.status_code == 200
            framed = b"".join(struct.pack(">I", len(p)) + p for p in plain[2:4])
            assert a.post("/v1/keys/default/encrypt?mode=records", content=framed).is_success
            opened = a.post("/v1/decrypt", content=single.content)
            assert opened.content == plain[0]
        with httpx.Client(base_url=base, headers={"x-vault-token": bob}) as b:
            body = {"plaintext": base64.b64encode(plain[4]).decode()}
            assert b.post("/v1/transit/encrypt/default", json=body).status_code == 200
            refused = b.post("/v1/keys/default/decrypt", content=single.content,
                             headers={"authorization": f"Bearer {bob}"})  # fmt: skip
            assert refused.status_code == 403
        wrong = "x" * 43
        secrets.append(wrong.encode())
        failed = httpx.post(base + "/v1/keys/default/encrypt", content=plain[5],
                            headers={"authorization": f"Bearer {wrong}"})  # fmt: skip
        assert failed.status_code == 401
        with srv.client() as root:
            made = root.post("/v1/keys", json={"name": "ex", "exportable": True})
            assert made.status_code == 201
            assert root.post("/v1/keys/ex/encrypt?mode=single", content=plain[5]).is_success
        exported = srv.cli("keys", "export", "ex")
        assert exported.returncode == 0, exported.stderr
        material = base64.b64decode(json.loads(exported.stdout)["key"])
        secrets += [material, material.hex().encode()]
        assert srv.cli("keys", "rotate", "default").returncode == 0
        assert srv.cli("tokens", "revoke", bob_id).returncode == 0
    finally:
        srv.stop()  # SIGTERM: a clean shutdown (uvicorn exits by the signal it caught)
    lines = records(audit)
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    for line in lines:
        validator.validate(line)
    requests = [r for r in lines if r["type"] == "request"]
    by_caller = {(r["label"], r["operation"], r.get("mode"), r["status"]) for r in requests}
    assert {
        ("alice", "encrypt", "single", 200),
        ("alice", "encrypt", "stream", 200),
        ("alice", "encrypt", "records", 200),
        ("alice", "decrypt", "single", 200),  # the envelope's mode
        ("bob", "encrypt", None, 200),
        ("bob", "decrypt", None, 403),
    } <= by_caller
    for r in requests:
        assert r["remote_addr"] == "127.0.0.1"
        assert len(r["request_id"]) >= 8
        if r["label"] in ("alice", "bob"):
            assert r["accessor"] == {"alice": alice_id, "bob": bob_id}[r["label"]]
            assert r["key"] == "default"
    assert len({r["request_id"] for r in requests}) == len(requests)
    sealed = [r for r in requests if r["operation"] == "encrypt" and r["status"] == 200]
    assert all(r["version"] == 1 for r in sealed if "version" in r)
    streamed = next(r for r in requests if r.get("mode") == "stream")
    assert streamed["aad_hmac"].startswith("hmac-sha256:")
    failures = [r for r in lines if r["type"] == "auth_failure"]
    assert [f["status"] for f in failures] == [401]
    cli = [r for r in lines if r.get("origin") == "cli"]
    assert {(r["operation"], r["os_user"]) for r in cli} >= {
        ("token_create", cli[0]["os_user"]),
        ("key_rotate", cli[0]["os_user"]),
        ("token_revoke", cli[0]["os_user"]),
    }
    revoked = next(r for r in cli if r["operation"] == "token_revoke")
    assert revoked["target_accessor"] == bob_id
    assert revoked["target_label"] == "bob"
    # An operator finds a value by its HMAC, which the CLI makes the same way.
    found = srv.cli("audit", "hmac", aad)
    assert found.stdout.decode().strip() == streamed["aad_hmac"]
    wrong_hmac = srv.cli("audit", "hmac", wrong).stdout.decode().strip()
    assert failures[0]["token_hmac"] == wrong_hmac
    # Nothing secret anywhere in the files: plaintexts, AAD, tokens, key material.
    text = b"".join(f.read_bytes() for f in tmp_path.glob("audit.log*"))
    for secret in secrets:
        assert secret not in text
        assert base64.b64encode(secret) not in text
    # Verified whole after a clean shutdown: no unsealed tail, even with --strict.
    done = verify(audit, srv, "--strict")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"ok: {len(lines)} records")


def test_token_routes_over_http_are_on_record(tmp_path: Path) -> None:
    """Issue 25, item 1: a lookup by accessor is a ``request`` record naming its target; a
    revocation by accessor is, besides its request record, the keystore's ``token_revoke``
    change with ``origin: http`` and who asked, as the CLI's is with ``origin: cli``; a refused
    or repeated revocation changes nothing, and no change is recorded for it."""
    audit = tmp_path / "audit.log"
    srv = start_server(tmp_path / "data", audit_file=audit)
    try:
        alice, alice_id = new_token(srv, "alice", "encrypt:default")
        ops, ops_id = new_token(srv, "ops", "admin")
        as_ops, as_alice = {"x-vault-token": ops}, {"x-vault-token": alice}
        lookup, revoke = "/v1/auth/token/lookup-accessor", "/v1/auth/token/revoke-accessor"
        with httpx.Client(base_url=srv.url) as c:
            looked = c.post(lookup, json={"accessor": alice_id}, headers=as_ops)
            assert looked.status_code == 200
            refused = c.post(revoke, json={"accessor": ops_id}, headers=as_alice)
            assert refused.status_code == 403
            revoked = c.post(revoke, json={"accessor": alice_id}, headers=as_ops)
            assert revoked.status_code == 204
            again = c.post(revoke, json={"accessor": alice_id}, headers=as_ops)
            assert again.status_code == 200
            after = c.post("/v1/transit/encrypt/default", json={"plaintext": "aGk="},
                           headers=as_alice)  # fmt: skip
            assert after.status_code == 403
    finally:
        srv.stop()
    lines = records(audit)
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    for line in lines:
        validator.validate(line)
    http = [r for r in lines if r.get("origin") == "http" and r["type"] != "auth_failure"]
    seen = [
        (r["type"], r["operation"], r["accessor"], r.get("status"), r.get("target_accessor"))
        for r in http
        if r["operation"].startswith("token_")
    ]
    assert seen == [
        ("request", "token_lookup", ops_id, 200, alice_id),
        ("request", "token_revoke", alice_id, 403, None),  # refused before its body is read
        ("change", "token_revoke", ops_id, None, alice_id),
        ("request", "token_revoke", ops_id, 204, alice_id),
        ("request", "token_revoke", ops_id, 200, alice_id),  # nothing left to revoke
    ]
    first, denied, change, done, _ = (r for r in http if r["operation"].startswith("token_"))
    assert (first["route"], first["label"], first["request_id"]) == (
        lookup, "ops", looked.headers["x-request-id"],
    )  # fmt: skip
    assert (denied["error"], denied["label"]) == ("forbidden", "alice")
    assert change["target_label"] == "alice"
    assert change["label"] == "ops"
    assert change["request_id"] == done["request_id"] == revoked.headers["x-request-id"]
    assert (change["remote_addr"], change["method"]) == ("127.0.0.1", "POST")
    failure = next(r for r in lines if r["type"] == "auth_failure")
    assert failure["request_id"] == after.headers["x-request-id"]
    assert failure["token_hmac"] == srv.cli("audit", "hmac", alice).stdout.decode().strip()
    text = audit.read_bytes()
    assert alice.encode() not in text
    assert ops.encode() not in text
    done_verify = verify(audit, srv, "--strict")
    assert done_verify.returncode == 0, done_verify.stdout + done_verify.stderr


def test_required_mode_on_a_full_disk(tmp_path: Path) -> None:
    with tmpfs.mounted(tmp_path / "disk", 256 * KiB) as disk:
        audit = disk / "audit.log"
        srv = start_server(tmp_path / "data", audit_file=audit)
        try:
            with srv.client() as c:
                body = {"name": "counted", "max_encryptions": 1000}  # every sealing reserves
                assert c.post("/v1/keys", json=body).status_code == 201
                path = "/v1/keys/counted/encrypt?mode=single"
                assert c.post(path, content=b"before").status_code == 200
                # The disk fills up (what is left of the audit file's last page aside).
                filler = disk / "filler"
                assert fill(filler) == errno.ENOSPC
                written = len(records(audit))
                # A warm key's sealings are fast answers, whose records are written together
                # at the end of the event loop's turn: one that cannot be is never sent (its
                # connection is dropped); the others answer 200 only once theirs is written.
                answers: list[int] = []
                while answers.count(200) == len(answers):
                    answers.append(status_of(srv, "/v1/keys/default/encrypt?mode=single"))
                    assert len(answers) < 1000, "the audit file never filled up"
                assert answers[-1] in (0, 503)  # dropped, or refused once the trail failed
                since = [r for r in records(audit)[written:] if r["type"] == "request"]
                assert [r["status"] for r in since] == [200] * answers.count(200)
                # From then on, refused before any key is used: the count does not move.
                before = counted(srv)
                for _ in range(10):
                    refused = c.post(path, content=b"during")
                    assert refused.status_code == 503
                    assert refused.json()["error"]["code"] == "audit_unavailable"
                transit = c.post("/v1/transit/encrypt/counted", json={"plaintext": "aGk="},
                                 headers={"x-vault-token": srv.token})  # fmt: skip
                assert transit.status_code == 503
                assert transit.json()["errors"]
                assert counted(srv) == before
                assert c.get("/readyz").json()["status"] == "audit_unavailable"
                assert c.get("/healthz").status_code == 200
                filler.unlink()  # space comes back: requests succeed again
                while c.get("/readyz").status_code != 200:
                    time.sleep(0.05)
                assert c.post(path, content=b"after").status_code == 200
                assert counted(srv) == before + 1
        finally:
            srv.stop()
        done = verify(audit, srv)
        assert done.returncode == 0, done.stdout + done.stderr


def counted(srv: Server) -> int:
    """Sealings counted under version 1 of key ``counted``, read by the CLI from the keystore
    (the API refuses every token while the trail fails)."""
    shown = srv.cli("keys", "show", "counted", "--json")
    assert shown.returncode == 0, shown.stderr
    encryptions: int = json.loads(shown.stdout)["versions"][0]["encryptions"]
    return encryptions


def fill(path: Path) -> int:
    """Zeros written to ``path`` until its filesystem is full: the errno that ended it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 4096)
            except OSError as exc:
                return exc.errno or 0
    finally:
        os.close(fd)


def status_of(srv: Server, path: str) -> int:
    """A single-shot encrypt's status on a new connection; 0 if it was dropped unanswered."""
    try:
        with srv.client() as c:
            return c.post(path, content=b"during").status_code
    except httpx.RemoteProtocolError:
        return 0
