"""SEALFLOW_TRANSIT_MOUNT: the API moves with it, and it cannot shadow the native routes."""

from __future__ import annotations

from collections.abc import Callable

import hvac
import pydantic
import pytest

from sealflow.service.config import Settings
from tests.service.conftest import Server
from tests.service.transit.conftest import unique

MakeServer = Callable[..., Server]


@pytest.mark.parametrize(
    "mount", ["/v1/keys", "/v1/keys/transit", "/v1/decrypt", "/v1/sys", "/v1/auth/x", "/transit"]
)
def test_a_mount_cannot_shadow_other_routes(mount: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="transit_mount"):
        Settings(transit_mount=mount)


def test_the_api_moves_with_the_mount(make_server: MakeServer) -> None:
    srv = make_server(transit_mount="/v1/crypto/transit")
    client = hvac.Client(url=srv.url, token=srv.token)
    transit = client.secrets.transit
    name = unique("mounted")
    transit.create_key(name, mount_point="crypto/transit")
    sealed = transit.encrypt_data(name, "aGk=", mount_point="crypto/transit")["data"]
    opened = transit.decrypt_data(name, sealed["ciphertext"], mount_point="crypto/transit")
    assert opened["data"]["plaintext"] == "aGk="
    assert name in transit.list_keys(mount_point="crypto/transit")["data"]["keys"]
    # Nothing is left at the default mount: the native API answers there (Bearer tokens, 404).
    with pytest.raises(hvac.exceptions.Unauthorized):
        transit.read_key(name)
    with srv.client() as c:
        assert c.get(f"/v1/transit/keys/{name}").status_code == 404
        assert c.get(f"/v1/keys/{name}").json()["name"] == name  # the same key, natively
        assert "/v1/crypto/transit/encrypt/{name}" in c.get("/openapi.json").json()["paths"]
