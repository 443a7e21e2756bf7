"""The admin calls against a real server: create, list, show, rotate, policy (versions,
limits, exportable, deletion), delete, export; results typed, material out of reprs."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC

import pytest

from sealflow import AsyncClient, Client
from sealflow.service.client import Forbidden, Key, KeyNotFound, SealflowError, VersionRetired
from tests.service.conftest import Server
from tests.service.oracle import open_envelope


def test_key_lifecycle(api: Client) -> None:
    name = "admin-" + os.urandom(3).hex()
    created = api.create_key(name, "chacha20-poly1305", exportable=True)
    assert isinstance(created, Key)
    assert (created.name, created.algorithm, created.exportable) == (
        name, "chacha20-poly1305", True)  # fmt: skip
    assert (created.latest, created.min_decryption_version) == (1, 1)
    assert created.versions[0].version == 1
    assert created.versions[0].created_at.tzinfo == UTC
    assert name in [k.name for k in api.list_keys()]
    assert api.get_key(name) == created

    v1 = api.encrypt(name, b"one")
    rotated = api.rotate_key(name)
    assert rotated.latest == 2
    assert [v.version for v in rotated.versions] == [1, 2]
    v2 = api.encrypt(name, b"two")
    assert int.from_bytes(v2[6:10], "big") == 2

    exported = api.export_key(name, version=1)
    assert (exported.name, exported.version, exported.algorithm) == (name, 1, "chacha20-poly1305")
    assert open_envelope(exported.material, v1) == b"one"
    assert api.export_key(name).version == 2  # the latest by default
    assert exported.material.hex() not in repr(exported)

    assert api.update_key(name, min_decryption_version=2).min_decryption_version == 2
    with pytest.raises(VersionRetired):
        api.decrypt(v1)
    with pytest.raises(VersionRetired):
        api.export_key(name, version=1)
    with pytest.raises(SealflowError) as caught:  # lowering needs allow_lowering
        api.update_key(name, min_decryption_version=1)
    assert (caught.value.status, caught.value.code) == (400, "bad_request")
    lowered = api.update_key(name, min_decryption_version=1, allow_lowering=True)
    assert lowered.min_decryption_version == 1
    assert api.decrypt(v1) == b"one"


def test_creating_a_taken_name_is_a_conflict(api: Client) -> None:
    with pytest.raises(SealflowError) as caught:
        api.create_key("default")
    assert (caught.value.status, caught.value.code) == (409, "key_exists")


def test_admin_calls_need_the_admin_scope(server: Server) -> None:
    token = server.cli("tokens", "create", "--scope", "decrypt:*").stdout.decode().strip()
    with Client(server.url, token) as api, pytest.raises(Forbidden):
        api.rotate_key("default")


def test_async_admin_calls(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, server.token) as api:
            name = "async-" + os.urandom(3).hex()
            keys = await asyncio.gather(api.create_key(name), api.get_key("default"))
            assert [k.name for k in keys] == [name, "default"]
            assert (await api.rotate_key(name)).latest == 2

    asyncio.run(main())


def test_key_policy_and_deletion(api: Client) -> None:
    name = "policy-" + os.urandom(3).hex()
    api.create_key(name)
    sealed = api.encrypt(name, b"kept until deleted")
    assert api.rotate_key(name).latest == 2

    changed = api.update_key(
        name, min_encryption_version=2, max_encryptions=1000, auto_rotate_period=3600
    )
    assert (changed.min_encryption_version, changed.max_encryptions) == (2, 1000)
    assert (changed.auto_rotate_period, changed.deletion_allowed) == (3600, False)
    assert changed.min_decryption_version == 1  # only what was given changed
    assert api.get_key(name) == changed

    with pytest.raises(SealflowError) as nothing:
        api.update_key(name)
    assert (nothing.value.status, nothing.value.code) == (400, "bad_request")

    with pytest.raises(SealflowError) as refused:  # deletion_allowed is false
        api.delete_key(name)
    assert (refused.value.status, refused.value.code) == (409, "deletion_not_allowed")
    assert api.decrypt(sealed) == b"kept until deleted"

    assert api.update_key(name, deletion_allowed=True).deletion_allowed is True
    api.delete_key(name)
    with pytest.raises(KeyNotFound):
        api.get_key(name)
    with pytest.raises(KeyNotFound):
        api.decrypt(sealed)
    assert name not in [k.name for k in api.list_keys()]


def test_a_key_made_exportable_exports(api: Client) -> None:
    name = "late-export-" + os.urandom(3).hex()
    assert api.create_key(name, "aes-128-gcm").exportable is False
    sealed = api.encrypt(name, b"x")
    with pytest.raises(SealflowError) as refused:
        api.export_key(name)
    assert (refused.value.status, refused.value.code) == (403, "not_exportable")
    assert api.update_key(name, exportable=True).exportable is True
    assert open_envelope(api.export_key(name).material, sealed) == b"x"


def test_async_policy_and_delete(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, server.token) as api:
            name = "async-del-" + os.urandom(3).hex()
            await api.create_key(name)
            key = await api.update_key(name, deletion_allowed=True)
            assert key.deletion_allowed is True
            await api.delete_key(name)
            with pytest.raises(KeyNotFound):
                await api.get_key(name)

    asyncio.run(main())
