"""Token lifetimes through a real server (issue 26): a token made by the CLI with ``--ttl 2s``
serves until it expires, then is refused from the head on every path, native (401
``token_expired``, on the protocol's fast path and on a streamed encrypt through the ASGI app)
and Transit (Vault's 403), each refusal an ``auth_failure`` audit record; a token's
``--num-uses`` counted exactly by two worker processes; ``lookup-self`` shaped as a real
OpenBao's; and the CLI's flags."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import hvac
import pytest

from tests.service.audit.records import files_of, lines
from tests.service.conftest import Server, start_server
from tests.service.transit.conftest import Bao, bao  # noqa: F401 (the session fixture)


def new_token(srv: Server, *flags: str) -> tuple[str, str]:
    """A token's secret and accessor, made with the CLI (stdout: the secret alone)."""
    done = srv.cli("tokens", "create", *flags)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert out.count("\n") == 1  # the secret, alone on stdout
    accessor = done.stderr.decode().split("token id ", 1)[1].split(",")[0]
    return out.strip(), accessor


def calls(srv: Server, secret: str) -> dict[str, httpx.Response]:
    """One request of each kind with the token: native single-shot (answered by the protocol
    itself), native streamed (chunked: through the ASGI app), Transit encrypt, lookup-self."""
    bearer = {"authorization": f"Bearer {secret}"}
    vault = {"x-vault-token": secret}
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        return {
            "fast": c.post(
                "/v1/keys/default/encrypt?mode=single", content=b"x" * 64, headers=bearer
            ),
            "stream": c.post(
                "/v1/keys/default/encrypt", content=iter([b"a" * 4096, b"b" * 4096]), headers=bearer
            ),
            "transit": c.post(
                "/v1/transit/encrypt/default", json={"plaintext": "aGk="}, headers=vault
            ),
            "lookup": c.get("/v1/auth/token/lookup-self", headers=vault),
        }


@pytest.fixture
def audited(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    audit = tmp_path / "audit.log"
    srv = start_server(tmp_path / "data", audit_file=audit)
    try:
        yield srv, audit
    finally:
        srv.stop()


def test_an_expired_token_is_refused_on_every_path(audited: tuple[Server, Path]) -> None:
    srv, audit = audited
    secret, accessor = new_token(srv, "--scope", "encrypt:default", "--ttl", "2s")
    created = time.time()
    alive = calls(srv, secret)
    assert {name: r.status_code for name, r in alive.items()} == dict.fromkeys(alive, 200)
    data = alive["lookup"].json()["data"]
    assert data["accessor"] == accessor
    assert (data["creation_ttl"], data["renewable"], data["explicit_max_ttl"]) == (2, True, 0)
    assert 0 <= data["ttl"] <= 2
    time.sleep(max(created + 2.3 - time.time(), 0))
    dead = calls(srv, secret)
    for name in ("fast", "stream"):
        assert dead[name].status_code == 401, name
        assert dead[name].json()["error"]["code"] == "token_expired"
        assert dead[name].headers["www-authenticate"] == 'Bearer error="invalid_token"'
    for name in ("transit", "lookup"):
        assert (dead[name].status_code, dead[name].json()) == (
            403,
            {"errors": ["permission denied"]},
        )
    srv.stop()
    records = [line.record for line in lines(files_of(audit))]  # each checked by the schema
    failures = [r for r in records if r["type"] == "auth_failure"]
    assert [r["error"] for r in failures] == ["token_expired"] * 4
    assert [r["status"] for r in failures] == [401, 401, 403, 403]
    assert all(r["token_hmac"].startswith("hmac-sha256:") for r in failures)
    assert secret not in audit.read_text()
    made = next(r for r in records if r.get("operation") == "token_create")
    assert (made["target_accessor"], made["ttl"], made["renewable"]) == (accessor, 2, True)


def test_uses_are_counted_exactly_by_two_workers(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", workers=2)
    try:
        secret, _ = new_token(srv, "--scope", "encrypt:default", "--num-uses", "5")
        statuses = []
        for i in range(12):  # a new connection each: both workers take some
            path = "/v1/keys/default/encrypt" + ("?mode=single" if i % 2 else "")
            with httpx.Client(base_url=srv.url, timeout=30) as c:
                r = c.post(path, content=b"x" * 100, headers={"authorization": f"Bearer {secret}"})
            statuses.append(
                (r.status_code, r.json()["error"]["code"] if r.status_code >= 400 else "")
            )
        assert statuses.count((200, "")) == 5
        assert statuses.count((401, "token_expired")) == 7
        assert statuses[:5] == [(200, "")] * 5
    finally:
        srv.stop()


def shape(data: dict[str, Any]) -> dict[str, str]:
    return {k: type(v).__name__ for k, v in data.items()}


def test_lookup_self_has_openbaos_shape_and_expiry(
    server: Server,
    bao: Bao,  # noqa: F811
) -> None:
    secret, accessor = new_token(
        server, "--scope", "encrypt:*", "--ttl", "2s", "--explicit-max-ttl", "1h"
    )
    ours = hvac.Client(url=server.url, token=secret)
    root = hvac.Client(url=bao.url, token=bao.token)
    made = root.auth.token.create(policies=["default"], ttl="2s", explicit_max_ttl="1h")
    theirs = hvac.Client(url=bao.url, token=made["auth"]["client_token"])
    mine, reference = ours.auth.token.lookup_self()["data"], theirs.auth.token.lookup_self()["data"]
    assert shape(mine) == shape(reference)
    for data in (mine, reference):
        assert (data["creation_ttl"], data["explicit_max_ttl"], data["renewable"]) == (
            2,
            3600,
            True,
        )
        assert 0 <= data["ttl"] <= 2
        assert data["expire_time"].endswith("Z")
        assert data["num_uses"] == 0
        assert data["type"] == "service"
    assert mine["policies"] == ["encrypt:*"]
    assert mine["accessor"] == accessor
    time.sleep(2.3)
    for client in (ours, theirs):
        with pytest.raises(hvac.exceptions.Forbidden, match="permission denied"):
            client.auth.token.lookup_self()
        with pytest.raises(hvac.exceptions.Forbidden):
            client.secrets.transit.encrypt_data("default", base64.b64encode(b"hi").decode())


def test_the_cli_flags(server: Server) -> None:
    done = server.cli(
        "tokens", "create", "--scope", "admin", "--label", "ops", "--ttl", "1h",
        "--explicit-max-ttl", "30m", "--num-uses", "3", "--no-renewable",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    secret = done.stdout.decode().strip()
    err = done.stderr.decode()
    assert 'TTL of "1h" exceeded the effective max_ttl of "30m"' in err
    assert secret not in err
    listed = json.loads(server.cli("tokens", "list", "--json").stdout)
    ops = next(t for t in listed if t["label"] == "ops")
    assert (ops["ttl"], ops["explicit_max_ttl"], ops["renewable"]) == (1800, 1800, False)
    assert (ops["num_uses"], ops["uses_left"], ops["expired"]) == (3, 3, False)
    assert ops["expire_time"].endswith("Z")
    root = next(t for t in listed if t["label"] == "root")
    assert (root["expire_time"], root["renewable"]) == (None, False)
    for bad in (["--ttl", "5x"], ["--num-uses", "-1"], ["--explicit-max-ttl", "1.5h"]):
        refused = server.cli("tokens", "create", "--scope", "admin", *bad)
        assert refused.returncode == 2, bad
        assert refused.stdout == b""
