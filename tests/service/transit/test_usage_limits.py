"""``max_encryptions`` through Transit, with hvac against a real server: encrypt (single and
batch), rewrap and datakey lease their sealings by the same rule as the native routes, so a
version seals exactly its limit and the key then rotates once, and a ``key_version`` that is
used up is refused (400 in Vault's error shape), never sealed (docs/TRANSIT.md)."""

from __future__ import annotations

import base64

import httpx
import hvac
import pytest

from tests.service.conftest import Server
from tests.service.transit.conftest import unique


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def used_up(limit: int) -> str:
    return (
        f"requested version for encryption has reached its max_encryptions ({limit}) and"
        " seals nothing more: use a later key version"
    )


def limited(server: Server, vault: hvac.Client, limit: int) -> str:
    """A Transit key with sealflow's max_encryptions (set through the native API)."""
    name = unique("lim")
    vault.secrets.transit.create_key(name)
    with server.client() as c:
        c.patch(f"/v1/keys/{name}", json={"max_encryptions": limit}).raise_for_status()
    return name


def counted(vault: hvac.Client, name: str) -> dict[int, int]:
    usage = vault.secrets.transit.read_key(name)["data"]["sealflow_usage"]["versions"]
    return {int(v): u["encryptions"] for v, u in usage.items()}


def encrypt(vault: hvac.Client, name: str, **kw: object) -> int:
    answer = vault.secrets.transit.encrypt_data(name, b64(b"x"), **kw)
    version: int = answer["data"]["key_version"]
    return version


def test_single_encrypts_seal_exactly_max_encryptions_then_rotate(
    server: Server, vault: hvac.Client
) -> None:
    """Reproduced before: with max_encryptions=100, 2,000 single-item encrypts sealed 941 under
    version 1 (Transit counted its sealings without the limit)."""
    name = limited(server, vault, 100)
    versions = [encrypt(vault, name) for _ in range(250)]
    assert versions == [1] * 100 + [2] * 100 + [3] * 50
    assert counted(vault, name) == {1: 100, 2: 100, 3: 50}


def test_a_used_up_key_version_is_refused_never_sealed(server: Server, vault: hvac.Client) -> None:
    """Reproduced before: with version 1 used up and rotated, 100 encrypts with
    ``"key_version": 1`` all sealed under it (its count 120 of 20)."""
    transit = vault.secrets.transit
    name = limited(server, vault, 20)
    transit.rotate_key(name)
    assert [encrypt(vault, name, key_version=1) for _ in range(20)] == [1] * 20
    for _ in range(100):
        with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
            encrypt(vault, name, key_version=1)
        assert refused.value.errors == [used_up(20)]
    raw = httpx.post(
        f"{server.url}/v1/transit/encrypt/{name}",
        json={"plaintext": b64(b"x"), "key_version": 1},
        headers={"X-Vault-Token": server.token},
    )
    assert (raw.status_code, raw.json()) == (400, {"errors": [used_up(20)]})
    batch = [{"plaintext": b64(b"a"), "key_version": 1}, {"plaintext": b64(b"b")}]
    with pytest.raises(hvac.exceptions.InvalidRequest) as partly:
        transit.encrypt_data(name, batch_input=batch)
    results = partly.value.json["data"]["batch_results"]
    assert results[0] == {"error": used_up(20), "reference": ""}
    assert results[1]["key_version"] == 2
    old = transit.encrypt_data(name, b64(b"x"))["data"]["ciphertext"]
    with pytest.raises(hvac.exceptions.InvalidRequest, match="reached its max_encryptions"):
        transit.rewrap_data(name, old, key_version=1)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="reached its max_encryptions"):
        vault.write_data(f"transit/datakey/wrapped/{name}", data={"key_version": 1})
    assert counted(vault, name) == {1: 20, 2: 2}
    assert transit.decrypt_data(name, old)["data"]["plaintext"] == b64(b"x")


def test_a_version_asked_for_seals_up_to_its_limit_within_a_batch(
    server: Server, vault: hvac.Client
) -> None:
    """A batch that asks for version 1 by number when it has 3 sealings left: three items are
    sealed under it, the others refused one by one, nothing past the limit."""
    transit = vault.secrets.transit
    name = limited(server, vault, 10)
    assert [encrypt(vault, name) for _ in range(7)] == [1] * 7
    transit.rotate_key(name)
    batch = [{"plaintext": b64(b"%d" % i), "key_version": 1} for i in range(5)]
    with pytest.raises(hvac.exceptions.InvalidRequest) as partly:
        transit.encrypt_data(name, batch_input=batch)
    results = partly.value.json["data"]["batch_results"]
    assert [r.get("key_version") for r in results] == [1, 1, 1, None, None]
    assert [r.get("error") for r in results[3:]] == [used_up(10)] * 2
    assert counted(vault, name) == {1: 10}
    opened = transit.decrypt_data(name, batch_input=results[:3])["data"]["batch_results"]
    assert [r["plaintext"] for r in opened] == [b64(b"%d" % i) for i in range(3)]


def test_batches_seal_exactly_max_encryptions_per_version(
    server: Server, vault: hvac.Client
) -> None:
    """Batches of 4 under a limit of 10: the third is split across the rotation, each item's
    answer naming its version."""
    transit = vault.secrets.transit
    name = limited(server, vault, 10)
    batches = [[{"plaintext": b64(b"%d-%d" % (j, i))} for i in range(4)] for j in range(5)]
    results = []
    for batch in batches:
        results += transit.encrypt_data(name, batch_input=batch)["data"]["batch_results"]
    assert [r["key_version"] for r in results] == [1] * 10 + [2] * 10
    assert counted(vault, name) == {1: 10, 2: 10}
    opened = transit.decrypt_data(name, batch_input=results)["data"]["batch_results"]
    assert [r["plaintext"] for r in opened] == [item["plaintext"] for b in batches for item in b]
    more = transit.encrypt_data(name, batch_input=batches[0])["data"]["batch_results"]
    assert [r["key_version"] for r in more] == [3] * 4


def test_rewrap_seals_exactly_max_encryptions_per_version(
    server: Server, vault: hvac.Client
) -> None:
    transit = vault.secrets.transit
    name = limited(server, vault, 10)
    sealed = [transit.encrypt_data(name, b64(b"%d" % i))["data"] for i in range(4)]
    assert {s["key_version"] for s in sealed} == {1}
    # Rewrapped to the latest: 6 under version 1 (its limit), then version 2.
    batch = [{"ciphertext": s["ciphertext"]} for s in sealed * 2]
    results = transit.rewrap_data(name, "", batch_input=batch)["data"]["batch_results"]
    assert [r["key_version"] for r in results] == [1] * 6 + [2] * 2
    singles = [transit.rewrap_data(name, s["ciphertext"])["data"] for s in sealed]
    assert [s["key_version"] for s in singles] == [2] * 4
    assert counted(vault, name) == {1: 10, 2: 6}
    opened = transit.decrypt_data(name, batch_input=results)["data"]["batch_results"]
    assert [r["plaintext"] for r in opened] == [b64(b"%d" % (i % 4)) for i in range(8)]


def test_datakeys_seal_exactly_max_encryptions_per_version(
    server: Server, vault: hvac.Client
) -> None:
    transit = vault.secrets.transit
    name = limited(server, vault, 10)
    keys = [transit.generate_data_key(name, "plaintext")["data"] for _ in range(12)]
    assert [k["key_version"] for k in keys] == [1] * 10 + [2] * 2
    assert counted(vault, name) == {1: 10, 2: 2}
    for k in (keys[0], keys[-1]):
        assert transit.decrypt_data(name, k["ciphertext"])["data"]["plaintext"] == k["plaintext"]
