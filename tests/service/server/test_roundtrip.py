"""Round trips through the real server, checked by an independent oracle."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator

import httpx
import pytest

from sealflow import engine
from sealflow.engine import Algorithm
from tests.service.conftest import KEYS, Server, exported_key
from tests.service.oracle import open_envelope, split

SIZES = [0, 1, 16383, 16384, 16385, 1 << 20]
MODE_BYTE = {"stream": 1, "single": 2}
ALG_BYTE = {Algorithm.AES_128_GCM: 1, Algorithm.AES_256_GCM: 2, Algorithm.CHACHA20_POLY1305: 3}


def pieces(data: bytes, size: int = 10_000) -> Iterator[bytes]:
    """A body sent without Content-Length (chunked transfer encoding)."""
    for i in range(0, len(data), size):
        yield data[i : i + size]


def body(data: bytes, chunked: bool) -> bytes | Iterator[bytes]:
    return pieces(data) if chunked else data


def aad_headers(aad: bytes | None) -> dict[str, str]:
    return {} if aad is None else {"x-aad": base64.b64encode(aad).decode().rstrip("=")}


@pytest.mark.parametrize("alg", list(KEYS))
@pytest.mark.parametrize("mode", ["stream", "single"])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
@pytest.mark.parametrize("aad", [None, b"order 17"], ids=["no-aad", "aad"])
def test_round_trip(
    client: httpx.Client, alg: Algorithm, mode: str, size: int, chunked: bool, aad: bytes | None
) -> None:
    name, data = KEYS[alg], os.urandom(size)
    r = client.post(
        f"/v1/keys/{name}/encrypt",
        params={"mode": mode},
        content=body(data, chunked),
        headers=aad_headers(aad),
    )
    assert r.status_code == 200, r.text
    envelope = r.content
    # Request-then-response (the default): the answer starts once it is whole, so it always
    # carries a length, and it is not marked as full duplex.
    assert int(r.headers["content-length"]) == len(r.content)
    assert "sealflow-duplex" not in r.headers
    prefix, sealed = split(envelope)
    assert prefix[:4] == b"SFL1"
    assert prefix[4] == MODE_BYTE[mode]
    assert prefix[5] == ALG_BYTE[alg]
    assert prefix[11:] == name.encode()
    overhead = engine.sealed_size(size) - size if mode == "stream" else 28
    assert len(sealed) == size + overhead

    key = exported_key(client, name, int.from_bytes(prefix[6:10], "big"))
    assert open_envelope(key, envelope, aad or b"") == data

    # Back through the service, on the key's route and on /v1/decrypt.
    for path in (f"/v1/keys/{name}/decrypt", "/v1/decrypt"):
        r = client.post(path, content=body(envelope, chunked), headers=aad_headers(aad))
        assert r.status_code == 200, r.text
        assert r.content == data
        assert int(r.headers["content-length"]) == len(r.content)


@pytest.mark.parametrize("alg", list(KEYS))
@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
@pytest.mark.parametrize("duplex", [False, True], ids=["request-then-response", "duplex"])
def test_64_mib_stream_round_trip(
    server: Server, client: httpx.Client, alg: Algorithm, chunked: bool, duplex: bool
) -> None:
    data = os.urandom(64 << 20)
    name = KEYS[alg]
    headers = {**aad_headers(b"big"), **({"Sealflow-Duplex": "1"} if duplex else {})}
    length = None if chunked else len(data)
    # Full duplex: the reply streams while the body is still being sent; otherwise it starts
    # once the body has ended, spooled (encrypted) beyond the spool's memory part.
    with server.post(f"/v1/keys/{name}/encrypt", pieces(data, 1 << 18), length, headers) as r:
        assert r.status == 200
        assert r.header("sealflow-duplex") == ("1" if duplex else None)
        envelope = r.read()
    assert len(split(envelope)[1]) == engine.sealed_size(len(data))
    opened = open_envelope(exported_key(client, name), envelope, b"big")
    assert hashlib.sha256(opened).digest() == hashlib.sha256(data).digest()
    length = None if chunked else len(envelope)
    with server.post("/v1/decrypt", pieces(envelope, 1 << 18), length, headers) as r:
        assert r.status == 200
        assert r.header("sealflow-duplex") == ("1" if duplex else None)
        if not duplex:
            assert r.header("content-length") == str(len(data))
        assert r.read() == data


def test_envelopes_of_the_same_plaintext_differ(client: httpx.Client) -> None:
    for mode in ("stream", "single"):
        a, b = (
            client.post("/v1/keys/default/encrypt", params={"mode": mode}, content=b"x").content
            for _ in range(2)
        )
        assert a != b
        assert split(a)[0] == split(b)[0]


def test_stream_envelope_is_what_cobblestone_produces_for_the_same_salt(
    client: httpx.Client,
) -> None:
    # Our envelope opens with Cobblestone (above); here Cobblestone's output opens with us.
    from cryptography.cobblestone import Cobblestone256Encryptor

    name = KEYS[Algorithm.AES_256_GCM]
    key = exported_key(client, name)
    latest = client.get(f"/v1/keys/{name}").json()["latest"]
    prefix = b"SFL1\x01\x02" + latest.to_bytes(4, "big") + bytes([len(name)]) + name.encode()
    data = os.urandom(50_000)
    enc = Cobblestone256Encryptor(key, prefix + b"ctx")
    envelope = prefix + enc.update(data) + enc.finalize()
    r = client.post(f"/v1/keys/{name}/decrypt", content=envelope, headers=aad_headers(b"ctx"))
    assert r.status_code == 200
    assert r.content == data
