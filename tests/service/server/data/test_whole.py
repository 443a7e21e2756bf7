"""Small single-shot bodies are sealed or opened straight from the piece they arrived in
(``Transfer._whole_max``); a body that arrives in several pieces takes the buffered path.
Both must give the same envelopes and plaintexts, and the same limits."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import pytest

from sealflow import engine
from sealflow.service.envelope import Mode, Prefix
from tests.service.conftest import Server, exported_key

MakeServer = Callable[..., Server]


def post_in_pieces(srv: Server, path: str, body: bytes, pieces: int) -> tuple[int, bytes]:
    """POST with Content-Length, the body written in `pieces` parts 50 ms apart (so the
    server receives it in several pieces); the status and the response body."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.token}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
        sock.sendall(head)
        step = max(1, -(-len(body) // pieces))
        for i in range(0, len(body), step):
            time.sleep(0.05)
            sock.sendall(body[i : i + step])
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head_bytes, _, content = reply.partition(b"\r\n\r\n")
    return int(head_bytes.split()[1]), content


@pytest.mark.parametrize("size", [0, 1, 1024, 60_000])
@pytest.mark.parametrize("pieces", [1, 3])
def test_whole_and_pieced_bodies_round_trip(server: Server, size: int, pieces: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    status, envelope = post_in_pieces(server, "/v1/keys/default/encrypt?mode=single", data, pieces)
    assert status == 200
    assert len(envelope) == len(data) + engine.NONCE_LEN + engine.TAG_LEN + 11 + len("default")
    status, opened = post_in_pieces(server, "/v1/decrypt", envelope, pieces)
    assert (status, opened) == (200, data)
    tampered = bytearray(envelope)
    tampered[-1] ^= 1
    status, answer = post_in_pieces(server, "/v1/decrypt", bytes(tampered), pieces)
    assert status == 400
    assert b'"decryption_failed"' in answer
    assert len(data) < 8 or data[:8] not in answer


def test_a_whole_envelope_over_the_single_shot_limit_is_413(make_server: MakeServer) -> None:
    srv = make_server(max_single_bytes=4096)
    with srv.client() as c:
        c.post("/v1/keys", json={"name": "exp", "exportable": True}).raise_for_status()
        key = exported_key(c, "exp")
        at_limit = c.post("/v1/keys/exp/encrypt?mode=single", content=bytes(4096))
        assert c.post("/v1/decrypt", content=at_limit.content).content == bytes(4096)
        # One byte over: sealed here with the exported key, as the service would have.
        prefix = Prefix(Mode.SINGLE, engine.Algorithm.AES_256_GCM, 1, "exp").encode()
        nonce = os.urandom(engine.NONCE_LEN)
        sealed = engine.seal("aes-256-gcm", key, nonce, prefix, bytes(4097))
        r = c.post("/v1/decrypt", content=prefix + nonce + sealed)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "too_large"
