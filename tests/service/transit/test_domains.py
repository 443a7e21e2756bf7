"""Native envelopes and Transit ciphertexts never open as each other (issue 24, item 6).

A native single-shot body is ``nonce || ciphertext || tag`` under the key version's material
with AAD = prefix || X-AAD, which is Transit's ciphertext layout under the same material with
AAD = ``associated_data``. Both crossings opened: a native envelope re-encoded as
``vault:v1:`` with its prefix as ``associated_data`` on Transit's decrypt, and a Transit
ciphertext sealed under a native prefix sent to ``/v1/decrypt`` behind that prefix. Every native
AAD begins with ``SFL1`` and a mode byte, so Transit refuses such an ``associated_data`` on every
operation that seals or opens under one: no input of one format equals an input of the other.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sealflow.engine import Algorithm
from sealflow.service.envelope import Mode, Prefix
from tests.service.conftest import Server
from tests.service.oracle import split
from tests.service.transit.conftest import unique

SECRET = b"the plaintext the attacker wants"
REFUSED = (
    "may not begin with the sealflow envelope magic (SFL1 and a mode byte are reserved for"
    " native envelopes)"
)
ALGORITHMS = list(Algorithm)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def transit(server: Server) -> Iterator[httpx.Client]:
    headers = {"X-Vault-Token": server.token}
    with httpx.Client(base_url=server.url + "/v1/transit", headers=headers, timeout=60) as c:
        yield c


def new_key(client: httpx.Client, algorithm: Algorithm) -> str:
    name = unique("domain")
    client.post("/v1/keys", json={"name": name, "algorithm": algorithm.value}).raise_for_status()
    return name


def refused(r: httpx.Response, index: int = 0) -> None:
    assert (r.status_code, r.json()) == (
        400,
        {"errors": [f"'[{index}].associated_data' {REFUSED}"]},
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("user_aad", [b"", b"order-17"])
def test_a_native_envelope_does_not_open_on_transit(
    client: httpx.Client, transit: httpx.Client, algorithm: Algorithm, user_aad: bytes
) -> None:
    """The first crossing: the envelope's body as a Transit ciphertext, its prefix (and X-AAD)
    as associated_data. It opened; now Transit refuses the AAD before opening anything."""
    name = new_key(client, algorithm)
    headers = {"X-AAD": b64(user_aad)} if user_aad else {}
    envelope = client.post(
        f"/v1/keys/{name}/encrypt?mode=single", content=SECRET, headers=headers
    ).content
    prefix, body = split(envelope)
    crossed = {"ciphertext": "vault:v1:" + b64(body), "associated_data": b64(prefix + user_aad)}
    refused(transit.post(f"/decrypt/{name}", json=crossed))
    refused(transit.post(f"/rewrap/{name}", json=crossed))
    # The envelope itself still opens where it belongs.
    assert client.post("/v1/decrypt", content=envelope, headers=headers).content == SECRET


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("user_aad", [b"", b"order-17"])
def test_a_transit_ciphertext_cannot_be_made_to_open_natively(
    client: httpx.Client,
    transit: httpx.Client,
    algorithm: Algorithm,
    mode: Mode,
    user_aad: bytes,
) -> None:
    """The second crossing: seal on Transit under associated_data = a native prefix (and
    X-AAD), then send prefix || payload to /v1/decrypt. Transit no longer seals it."""
    name = new_key(client, algorithm)
    prefix = Prefix(mode, algorithm, 1, name).encode()
    body = {"plaintext": b64(SECRET), "associated_data": b64(prefix + user_aad)}
    r = transit.post(f"/encrypt/{name}", json=body)
    if r.status_code == 200:  # what it did: the forged envelope opened natively
        payload = base64.b64decode(r.json()["data"]["ciphertext"].split(":", 2)[2])
        headers = {"X-AAD": b64(user_aad)} if user_aad else {}
        opened = client.post("/v1/decrypt", content=prefix + payload, headers=headers)
        assert opened.content != SECRET, "a Transit ciphertext opened as a native envelope"
    refused(r)


# Every Transit operation that seals or opens under associated_data, each way a request of it
# comes in: a single request (small: the protocol's fast answer; large: the route), a batch in
# the common shape (the column: one AAD on every item) and a mixed batch (item by item).
def _batch(field: str, value: str, aad: str, good: str | None) -> dict[str, Any]:
    items = [{field: value, "associated_data": aad, "reference": "bad"}]
    if good is not None:
        items.insert(0, {field: value, "associated_data": good, "reference": "good"})
    return {"batch_input": items}


RESERVED = [b"SFL1\x01", b"SFL1\x02", b"SFL1\x02\x02\x00\x00\x00\x01\x07default" + b"tail"]


def _sealed(transit: httpx.Client, name: str, aad: str) -> str:
    r = transit.post(f"/encrypt/{name}", json={"plaintext": b64(SECRET), "associated_data": aad})
    assert r.status_code == 200, r.text
    return str(r.json()["data"]["ciphertext"])


@pytest.mark.parametrize("reserved", RESERVED, ids=["stream", "single", "prefix"])
def test_every_transit_operation_refuses_the_native_aad_space(
    client: httpx.Client, transit: httpx.Client, reserved: bytes
) -> None:
    name = new_key(client, Algorithm.AES_256_GCM)
    aad, good = b64(reserved), b64(b"fine")
    ciphertext = _sealed(transit, name, good)
    plain = b64(b"x" * 16)
    # Single requests: encrypt small (the fast answer) and large (the route), decrypt, rewrap.
    refused(transit.post(f"/encrypt/{name}", json={"plaintext": plain, "associated_data": aad}))
    big = {"plaintext": b64(b"x" * 100_000), "associated_data": aad}
    refused(transit.post(f"/encrypt/{name}", json=big))
    for operation in ("decrypt", "rewrap"):
        body = {"ciphertext": ciphertext, "associated_data": aad}
        refused(transit.post(f"/{operation}/{name}", json=body))

    # Batches: the column (one AAD for all, so every item is refused) and mixed ones (the item
    # with the reserved AAD is refused, the other one is answered).
    column = {"batch_input": [{"plaintext": plain, "associated_data": aad} for _ in range(3)]}
    r = transit.post(f"/encrypt/{name}", json=column)
    assert r.status_code == 400
    assert [x["error"] for x in r.json()["data"]["batch_results"]] == [
        f"'[{i}].associated_data' {REFUSED}" for i in range(3)
    ]
    for operation, field, value, status in (
        ("encrypt", "plaintext", plain, 400),
        ("decrypt", "ciphertext", ciphertext, 400),
        ("rewrap", "ciphertext", ciphertext, 200),  # rewrap answers 200 whatever its items did
    ):
        r = transit.post(f"/{operation}/{name}", json=_batch(field, value, aad, good))
        assert r.status_code == status, r.text
        ok, bad = r.json()["data"]["batch_results"]
        assert bad["error"] == f"'[1].associated_data' {REFUSED}"
        assert bad["reference"] == "bad"
        assert "error" not in ok
        assert ok["reference"] == "good"


@pytest.mark.parametrize(
    "aad", [b"SFL1", b"SFL1\x00", b"SFL1\x03\x02", b"SFL\x02", b"sfl1\x02", b"xSFL1\x02"]
)
def test_aads_outside_the_native_space_work_as_before(
    client: httpx.Client, transit: httpx.Client, aad: bytes
) -> None:
    name = new_key(client, Algorithm.CHACHA20_POLY1305)
    ciphertext = _sealed(transit, name, b64(aad))
    r = transit.post(
        f"/decrypt/{name}", json={"ciphertext": ciphertext, "associated_data": b64(aad)}
    )
    assert base64.b64decode(r.json()["data"]["plaintext"]) == SECRET


def test_datakey_seals_under_no_associated_data(
    client: httpx.Client, transit: httpx.Client
) -> None:
    """datakey takes no associated_data (Vault's neither): its key is sealed under an empty AAD,
    which no native envelope has, whatever the request carries."""
    name = new_key(client, Algorithm.AES_256_GCM)
    prefix = Prefix(Mode.SINGLE, Algorithm.AES_256_GCM, 1, name).encode()
    r = transit.post(f"/datakey/plaintext/{name}", json={"associated_data": b64(prefix)})
    data = r.json()["data"]
    opened = transit.post(f"/decrypt/{name}", json={"ciphertext": data["ciphertext"]})
    assert opened.json()["data"]["plaintext"] == data["plaintext"]
    payload = base64.b64decode(data["ciphertext"].split(":", 2)[2])
    r = client.post("/v1/decrypt", content=prefix + payload)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "decryption_failed")
