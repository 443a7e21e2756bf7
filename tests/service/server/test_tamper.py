"""Modified, truncated, extended and misdirected envelopes: refused, never half-trusted."""

from __future__ import annotations

import base64
import http.client
import json
import os
from collections.abc import Iterator

import httpx
import pytest

from tests.service.conftest import Server
from tests.service.oracle import split

DATA = os.urandom(40_000)  # three chunks in stream mode: 16384 + 16384 + 7232
CHUNK, SEALED, HEADER = 16384, 16400, 56
MODES = ["stream", "single"]
ERROR = b'{"error": {"code": "decryption_failed", "message": "decryption failed"}}'


@pytest.fixture(scope="module")
def envelopes(server: Server) -> dict[str, bytes]:
    with server.client() as c:
        return {
            mode: c.post("/v1/keys/default/encrypt", params={"mode": mode}, content=DATA)
            .raise_for_status()
            .content
            for mode in MODES
        }


def pieces(data: bytes) -> Iterator[bytes]:
    for i in range(0, len(data), 7000):
        yield data[i : i + 7000]


def decrypt(
    server: Server,
    envelope: bytes,
    chunked: bool = False,
    path: str = "/v1/decrypt",
    headers: dict[str, str] | None = None,
) -> tuple[int | None, bytes, str | None]:
    """(status, bytes received, error code); status None if the reply was cut off."""
    length = None if chunked else len(envelope)
    with server.post(path, pieces(envelope), length, headers) as r:
        got = bytearray()
        try:
            for piece in r.pieces():
                got += piece
        except (http.client.HTTPException, OSError):
            return None, bytes(got), None
        code = json.loads(got)["error"]["code"] if r.status != 200 else None
        return r.status, bytes(got), code


def regions(mode: str, envelope: bytes) -> dict[str, int]:
    """An offset inside each region of the envelope."""
    plen = len(split(envelope)[0])
    if mode == "single":
        return {"nonce": plen + 3, "ciphertext": plen + 12 + 500, "tag": len(envelope) - 5}
    body = plen + HEADER
    return {
        "salt": plen + 5,
        "commitment": plen + 24 + 7,
        "chunk 0": body + 100,
        "chunk 1": body + SEALED + 16000,
        "last chunk": body + 2 * SEALED + 10,
        "last tag": len(envelope) - 1,
    }


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
def test_a_flipped_bit_anywhere_in_the_body_fails_with_one_code(
    server: Server, envelopes: dict[str, bytes], mode: str, chunked: bool
) -> None:
    envelope = envelopes[mode]
    for region, offset in regions(mode, envelope).items():
        bad = bytearray(envelope)
        bad[offset] ^= 0x10
        status, got, code = decrypt(server, bytes(bad), chunked)
        # The body is one batch: verified whole before the first byte is sent.
        assert (status, code) == (400, "decryption_failed"), region
        assert DATA[:20] not in got, region


# What a flipped bit in each prefix field can turn into: never a success.
PREFIX_FIELDS = ["magic"] * 4 + ["mode", "alg"] + ["version"] * 4 + ["length"]
PREFIX_OUTCOMES = {
    "magic": {"malformed_envelope"},
    "mode": {"malformed_envelope", "decryption_failed"},
    "alg": {"malformed_envelope", "decryption_failed"},  # another valid one: not this key's
    "version": {"malformed_envelope", "key_not_found"},
    "length": {"malformed_envelope", "key_not_found"},  # shorter: a name like "defaul"
    "name": {"malformed_envelope", "key_not_found"},
}


def test_every_bit_of_the_prefix_is_checked(server: Server, envelopes: dict[str, bytes]) -> None:
    for mode in MODES:
        envelope = envelopes[mode]
        plen = len(split(envelope)[0])
        for bit in range(plen * 8):
            bad = bytearray(envelope)
            bad[bit // 8] ^= 1 << (bit % 8)
            status, got, code = decrypt(server, bytes(bad))
            field = PREFIX_FIELDS[bit // 8] if bit // 8 < len(PREFIX_FIELDS) else "name"
            assert status in (400, 404), (mode, bit)
            assert code in PREFIX_OUTCOMES[field], (mode, bit, code)
            assert DATA[:20] not in got


@pytest.mark.parametrize("mode", MODES)
def test_truncation_at_every_region_fails(
    server: Server, envelopes: dict[str, bytes], mode: str
) -> None:
    envelope = envelopes[mode]
    plen = len(split(envelope)[0])
    cuts = {"inside the prefix": 7, "after the prefix": plen, "last byte": len(envelope) - 1}
    cuts.update(regions(mode, envelope))
    if mode == "stream":
        cuts["after a whole chunk"] = plen + HEADER + SEALED
        cuts["after two whole chunks"] = plen + HEADER + 2 * SEALED
    for where, cut in cuts.items():
        for chunked in (False, True):
            status, got, code = decrypt(server, envelope[:cut], chunked)
            expected = "malformed_envelope" if cut < plen else "decryption_failed"
            assert (status, code) == (400, expected), (where, chunked)
            assert got == b"" or DATA[:20] not in got


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("extra", [1, 16, SEALED], ids=["1", "16", "chunk"])
def test_trailing_bytes_fail(
    server: Server, envelopes: dict[str, bytes], mode: str, extra: int
) -> None:
    for chunked in (False, True):
        status, _, code = decrypt(server, envelopes[mode] + os.urandom(extra), chunked)
        assert (status, code) == (400, "decryption_failed")


@pytest.mark.parametrize("mode", MODES)
def test_wrong_or_missing_aad_fails(server: Server, client: httpx.Client, mode: str) -> None:
    aad = {"x-aad": base64.b64encode(b"tenant 1").decode()}
    env = client.post(
        "/v1/keys/default/encrypt", params={"mode": mode}, content=DATA, headers=aad
    ).content
    assert decrypt(server, env, headers=aad)[:2] == (200, DATA)
    assert decrypt(server, env)[2] == "decryption_failed"
    other = {"x-aad": base64.b64encode(b"tenant 2").decode()}
    assert decrypt(server, env, headers=other)[2] == "decryption_failed"


def test_envelope_sent_to_another_keys_route_fails(
    server: Server, envelopes: dict[str, bytes]
) -> None:
    for envelope in envelopes.values():
        status, _, code = decrypt(server, envelope, path="/v1/keys/t-aes256/decrypt")
        assert (status, code) == (400, "decryption_failed")


@pytest.mark.parametrize("duplex", [False, True], ids=["request-then-response", "duplex"])
def test_a_later_chunk_failing_is_a_clean_400_or_in_duplex_a_cut_stream(
    server: Server, client: httpx.Client, duplex: bool
) -> None:
    data = os.urandom(3 << 20)  # many batches: in duplex the response starts before the last
    envelope = client.post("/v1/keys/default/encrypt", content=data).content
    plen = len(split(envelope)[0])
    headers = {"sealflow-duplex": "1"} if duplex else None
    for chunk in (100, 150, len(data) // CHUNK):  # a middle chunk, a late one, the final one
        bad = bytearray(envelope)
        bad[plen + HEADER + chunk * SEALED + 9] ^= 1
        for chunked in (False, True):
            status, got, code = decrypt(server, bytes(bad), chunked, headers=headers)
            if not duplex:
                # All or nothing: verified to the last chunk before the first byte goes out.
                assert (status, code) == (400, "decryption_failed")
                continue
            assert status is None, "a failed stream must never end cleanly"
            # Only bytes of chunks before the bad one, and only true plaintext. (Fewer
            # may arrive: closing with the upload unread resets the connection.)
            assert len(got) <= chunk * CHUNK
            assert got == data[: len(got)]
    # A bad first chunk fails before any byte went out: a clean 400, even for a long body.
    bad = bytearray(envelope)
    bad[plen + HEADER + 9] ^= 1
    for chunked in (False, True):
        assert decrypt(server, bytes(bad), chunked) == (400, ERROR, "decryption_failed")
    # And the service still works afterwards.
    assert decrypt(server, envelope)[:2] == (200, data)


def test_retired_version_is_refused(server: Server, client: httpx.Client) -> None:
    name = "t-retire-" + os.urandom(4).hex()
    client.post("/v1/keys", json={"name": name}).raise_for_status()
    old = client.post(f"/v1/keys/{name}/encrypt", content=DATA).content
    client.post(f"/v1/keys/{name}/rotate").raise_for_status()
    new = client.post(f"/v1/keys/{name}/encrypt", content=DATA).content
    r = client.patch(f"/v1/keys/{name}", json={"min_decryption_version": 2})
    assert r.status_code == 200
    assert r.json()["min_decryption_version"] == 2
    status, _, code = decrypt(server, old)
    assert (status, code) == (403, "version_retired")
    assert decrypt(server, new)[:2] == (200, DATA)
    r = client.patch(f"/v1/keys/{name}", json={"min_decryption_version": 3})
    assert r.status_code == 400


def test_garbage_is_a_malformed_envelope(server: Server) -> None:
    for garbage in (b"", b"hello world, not an envelope", os.urandom(1000)):
        status, _, code = decrypt(server, garbage)
        assert (status, code) == (400, "malformed_envelope")
