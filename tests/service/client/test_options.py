"""The client's options beyond the calls: ``verify`` with a directory of CA certificates,
``max_connections``, and the token calls."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sealflow import AsyncClient, Client
from sealflow.service.client import SealflowError, TransportError, Unauthorized
from tests.service import pki
from tests.service.conftest import Server

BIG = 200_000  # over 64 KiB: a call on the event loop


def rehashed(directory: Path, *certs: Path) -> Path:
    directory.mkdir()
    for cert in certs:
        shutil.copy(cert, directory)
    subprocess.run(["openssl", "rehash", str(directory)], check=True)  # noqa: S603, S607
    return directory


def test_verify_takes_a_directory_of_ca_certificates(tmp_path: Path, make_server: Any) -> None:
    authority = pki.ca(tmp_path / "pki", "sealflow-test-ca")
    issued = pki.server_cert(authority, tmp_path / "pki", "server")
    srv = make_server(tls_cert=issued.cert_path, tls_key=issued.key_path)
    trusted = rehashed(tmp_path / "trusted", authority.cert_path)
    assert any(name.endswith(".0") for name in os.listdir(trusted))  # the hashed link
    stranger = pki.ca(tmp_path / "other", "another-ca")
    untrusted = rehashed(tmp_path / "untrusted", stranger.cert_path)
    data = os.urandom(BIG)
    with Client(srv.https_url, srv.token, verify=trusted) as client:
        assert client.decrypt(client.encrypt("default", b"x")) == b"x"
        assert client.decrypt(client.encrypt("default", data)) == data
        assert list(client.encrypt_many("default", [b"a"])) != []

    async def main() -> bytes:
        async with AsyncClient(srv.https_url, srv.token, verify=str(trusted)) as client:
            return await client.decrypt(await client.encrypt("default", data))

    assert asyncio.run(main()) == data
    with (
        Client(srv.https_url, srv.token, verify=untrusted) as client,
        pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.encrypt("default", b"x")


def test_max_connections_bounds_the_connections_in_use(server: Server) -> None:
    data = os.urandom(BIG)

    async def main(limit: int | None) -> int:
        async with AsyncClient(server.url, server.token, max_connections=limit) as client:
            sealed = await asyncio.gather(*(client.encrypt("default", data) for _ in range(12)))
            opened = await asyncio.gather(*(client.decrypt(s) for s in sealed))
            assert opened == [data] * 12
            return client.connections_opened

    assert asyncio.run(main(2)) <= 2
    assert asyncio.run(main(1)) == 1
    with pytest.raises(ValueError, match="max_connections"):
        AsyncClient(server.url, server.token, max_connections=0)


def test_token_calls(server: Server, api: Client) -> None:
    made = api.create_token(["encrypt:default", "decrypt:default"], label="many", ttl="1h")
    assert made.secret is not None
    assert made.secret not in repr(made)
    assert made.scopes == ("encrypt:default", "decrypt:default")
    assert made.parent is not None
    assert made.expire_time is not None
    assert made.accessor in {t.accessor for t in api.list_tokens()}
    with Client(server.url, made.secret) as app:
        assert app.decrypt(app.encrypt("default", b"x")) == b"x"
        me = app.lookup_token()
        assert (me.accessor, me.label, me.secret) == (made.accessor, "many", None)
        renewed = app.renew_token(60)
        assert renewed.ttl <= 60
        assert renewed.accessor == made.accessor
        api.revoke_token(made.accessor)
        with pytest.raises(Unauthorized):
            app.encrypt("default", b"x")
    with pytest.raises(SealflowError) as missing:
        api.revoke_token("tok_nosuchaccessor")
    assert (missing.value.status, missing.value.code) == (404, "token_not_found")

    async def own() -> None:
        other = api.create_token(["encrypt:default"])
        assert other.secret is not None
        async with AsyncClient(server.url, other.secret) as client:
            assert (await client.lookup_token()).accessor == other.accessor
            await client.revoke_token()  # its own
            with pytest.raises(Unauthorized):
                await client.lookup_token()

    asyncio.run(own())
