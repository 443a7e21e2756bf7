"""``sealflow approle``: roles and secret ids made on the keystore from the command line work
for a login over HTTP against the running server, and no command prints a secret id twice."""

from __future__ import annotations

import json

import httpx

from tests.service.conftest import Server
from tests.service.transit.conftest import unique


def test_a_role_and_secret_id_from_the_cli_log_in_over_http(server: Server) -> None:
    role = unique("cli")
    made = server.cli(
        "approle", "role", "create", role, "--scope", "encrypt:default",
        "--token-ttl", "10m", "--secret-id-num-uses", "1", "--secret-id-cidr", "127.0.0.0/8",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    shown = json.loads(made.stdout)
    assert (shown["scopes"], shown["token_ttl"], shown["secret_id_bound_cidrs"]) == (
        ["encrypt:default"],
        600,
        ["127.0.0.0/8"],
    )
    done = server.cli("approle", "secret-id", "create", role, "--metadata", "team=web")
    assert done.returncode == 0, done.stderr
    secret = done.stdout.decode().strip()
    accessor = done.stderr.decode().split()[3]
    assert accessor.startswith("sid_")

    login = {"role_id": shown["role_id"], "secret_id": secret}
    with httpx.Client(base_url=server.url, timeout=30) as c:
        auth = c.post("/v1/auth/approle/login", json=login).json()["auth"]
        assert auth["metadata"] == {"role_name": role, "team": "web"}
        assert auth["lease_duration"] == 600
        again = c.post("/v1/auth/approle/login", json=login)  # its one use is spent
        assert again.json() == {"errors": ["invalid role or secret ID"]}

    listed = server.cli("approle", "role", "list").stdout.decode()
    assert role in listed
    assert secret not in listed
    more = server.cli("approle", "secret-id", "create", role).stdout.decode().strip()
    details = server.cli("approle", "role", "show", role)
    assert more not in details.stdout.decode()
    other = json.loads(details.stdout)["secret_ids"][0]["accessor"]
    assert server.cli("approle", "secret-id", "destroy", role, other).returncode == 0
    assert json.loads(server.cli("approle", "role", "show", role).stdout)["secret_ids"] == []
    assert server.cli("approle", "role", "delete", role).returncode == 0
    gone = server.cli("approle", "role", "show", role)
    assert gone.returncode == 1
    assert b"does not exist" in gone.stderr
    refused = server.cli("approle", "role", "create", role, "--scope", "everything")
    assert refused.returncode == 1
