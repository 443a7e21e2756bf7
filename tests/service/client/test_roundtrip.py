"""Round trips through a real server: every kind of input and output, both modes, AAD, sizes
from empty to 64 MiB, the sync and the async client; envelopes checked with the oracle."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from sealflow import AsyncClient, Client
from sealflow.service.client import DecryptionFailed, SealflowError
from tests.service.conftest import Server, exported_key
from tests.service.oracle import open_envelope

SIZES = [0, 1024, 8 << 20, 64 << 20]
IDS = ["empty", "1KiB", "8MiB", "64MiB"]
KEY = "t-aes256"  # exportable (tests/service/conftest.py), so the oracle can check envelopes
_DATA: dict[int, bytes] = {}


def data_of(size: int) -> bytes:
    if size not in _DATA:
        _DATA[size] = os.urandom(size)
    return _DATA[size]


@pytest.fixture(scope="module")
def material(server: Server) -> bytes:
    with server.client() as c:
        return exported_key(c, KEY)


def pieces(data: bytes, size: int = 100_000) -> Iterator[bytes]:
    """Uneven pieces, an empty one among them (which must not end the body)."""
    yield b""
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def async_pieces(data: bytes) -> AsyncIterator[bytes]:
    for piece in pieces(data):
        await asyncio.sleep(0)
        yield piece


def as_input(kind: str, data: bytes, tmp_path: Path) -> Any:
    if kind == "bytes":
        return data
    if kind == "bytearray":
        return bytearray(data)
    if kind == "file":
        (tmp_path / "input").write_bytes(data)
        return open(tmp_path / "input", "rb")  # the test closes it
    if kind == "iterator":
        return pieces(data)
    assert kind == "async-iterator"
    return async_pieces(data)


def decrypt_to(api: Client, kind: str, envelope: bytes, tmp_path: Path, aad: bytes) -> bytes:
    if kind == "bytes":
        return api.decrypt(envelope, aad=aad)
    if kind == "file":
        with open(tmp_path / "output", "wb") as out:
            written = api.decrypt(envelope, out=out, aad=aad)
        back = (tmp_path / "output").read_bytes()
        assert written == len(back)
        return back
    assert kind == "iterator"
    chunks = list(api.decrypt_stream(envelope, aad=aad))
    assert all(isinstance(c, bytes) and c for c in chunks)
    return b"".join(chunks)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "file", "iterator", "async-iterator"])
def test_every_input_kind_encrypts_and_every_output_kind_decrypts(
    api: Client, material: bytes, tmp_path: Path, size: int, kind: str
) -> None:
    data = data_of(size)
    source = as_input(kind, data, tmp_path)
    try:
        envelope = api.encrypt(KEY, source, aad=b"order-17")
    finally:
        if isinstance(source, io.IOBase):
            source.close()
    assert open_envelope(material, envelope, b"order-17") == data
    for out in ("bytes", "file", "iterator"):
        assert decrypt_to(api, out, envelope, tmp_path, aad=b"order-17") == data, out


def test_encrypt_stream_gives_the_envelope_in_chunks(api: Client, material: bytes) -> None:
    data = data_of(8 << 20)
    chunks = list(api.encrypt_stream(KEY, pieces(data)))
    assert len(chunks) > 1
    assert open_envelope(material, b"".join(chunks)) == data


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pytest.mark.parametrize("mode", ["stream", "single"])
@pytest.mark.parametrize("aad", [None, b"\x00binary\xff", "naïve ☃ text"], ids=["none", "b", "s"])
def test_both_modes_with_and_without_aad(
    api: Client,
    material: bytes,
    size: int,
    mode: Literal["stream", "single"],
    aad: bytes | str | None,
) -> None:
    data = data_of(size)
    envelope = api.encrypt(KEY, data, mode=mode, aad=aad)
    assert envelope[4] == (1 if mode == "stream" else 2)
    raw = aad.encode() if isinstance(aad, str) else aad or b""
    assert open_envelope(material, envelope, raw) == data
    assert api.decrypt(envelope, aad=aad) == data  # the key named by the envelope
    assert api.decrypt(envelope, key=KEY, aad=aad) == data  # the envelope must name KEY
    if aad is not None:
        with pytest.raises(DecryptionFailed):
            api.decrypt(envelope)


def test_decrypt_with_another_key_name_fails(api: Client) -> None:
    envelope = api.encrypt(KEY, b"for t-aes256 only")
    with pytest.raises(DecryptionFailed) as caught:
        api.decrypt(envelope, key="t-aes128")
    assert (caught.value.status, caught.value.code) == (400, "decryption_failed")


def test_a_key_name_is_quoted_into_the_path(server: Server) -> None:
    with server.client() as c:
        c.post("/v1/keys", json={"name": "dotted.name-1"}).raise_for_status()
    with Client(server.url, server.token) as api:
        assert api.decrypt(api.encrypt("dotted.name-1", b"x"), key="dotted.name-1") == b"x"


def test_async_client_inputs_outputs_and_concurrent_calls(
    server: Server, material: bytes, tmp_path: Path
) -> None:
    data = data_of(8 << 20)

    async def main() -> None:
        async with AsyncClient(server.url, server.token) as api:
            envelope = await api.encrypt(KEY, async_pieces(data), aad="ctx")
            assert open_envelope(material, envelope, b"ctx") == data
            chunks = [c async for c in api.decrypt_stream(envelope, aad="ctx")]
            assert b"".join(chunks) == data
            with open(tmp_path / "out", "wb") as out:
                assert await api.encrypt(KEY, data, out=out) > len(data)
            assert await api.decrypt((tmp_path / "out").read_bytes()) == data
            small = [os.urandom(n) for n in range(0, 4000, 250)]
            sealed = await asyncio.gather(*(api.encrypt(KEY, s, mode="single") for s in small))
            opened = await asyncio.gather(*(api.decrypt(e) for e in sealed))
            assert opened == small

    asyncio.run(main())


def test_url_prefix_and_environment_defaults(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEALFLOW_URL", server.url + "/")
    monkeypatch.setenv("SEALFLOW_TOKEN", server.token)
    with Client() as api:
        assert api.url == server.url
        assert api.decrypt(api.encrypt(KEY, b"from the environment")) == b"from the environment"
    # A path prefix is kept in front of every route (here it leads nowhere: 404 not_found).
    with Client(server.url + "/behind/a/prefix") as api, pytest.raises(SealflowError) as caught:
        api.list_keys()
    assert caught.value.code == "not_found"
    with httpx.Client(base_url=server.url) as c:
        assert c.get("/behind/a/prefix/v1/keys").status_code == 404
