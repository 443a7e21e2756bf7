"""Inputs of the matrix and the round trip every cell runs: encrypt, decrypt, compare.

Inputs are files of seeded pseudo-random bytes, made once per session and streamed by the
clients; replies go to files too and are compared by SHA-256, so a 64 MiB cell holds no
large body in the test process beyond what the client itself holds (a bytes body).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .clients import PIECE, Client, Reply

KiB, MiB = 1 << 10, 1 << 20
SIZES = {"0B": 0, "1KiB": KiB, "8MiB": 8 * MiB, "64MiB": 64 * MiB}
# What a client sends to choose the transport (docs/API.md); the default needs no header.
DEFAULT, DUPLEX = "request-then-response", "full-duplex"
MODES: dict[str, dict[str, str]] = {DEFAULT: {}, DUPLEX: {"Sealflow-Duplex": "1"}}
ENCRYPT, DECRYPT = "/v1/keys/default/encrypt", "/v1/decrypt"
PREFIX = len(b"SFL1") + 1 + 1 + 4 + 1 + len(b"default")  # the prefix of key "default"


@dataclass(frozen=True)
class Payload:
    path: Path
    size: int
    digest: bytes  # SHA-256


def make_payload(folder: Path, size: int) -> Payload:
    """``size`` pseudo-random bytes, the same in every run (seeded by the size)."""
    path = folder / f"plain-{size}"
    rng, digest, left = random.Random(size), hashlib.sha256(), size
    with path.open("wb") as out:
        while left:
            piece = rng.randbytes(min(left, 8 * MiB))
            digest.update(piece)
            out.write(piece)
            left -= len(piece)
    return Payload(path, size, digest.digest())


def sha256(path: Path) -> bytes:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while piece := f.read(PIECE):
            digest.update(piece)
    return digest.digest()


def stream_envelope_size(n: int) -> int:
    """The size of a stream envelope of n plaintext bytes under key "default" (docs/API.md)."""
    return PREFIX + 56 + n + 16 * (n // 16384 + 1)


def error_code(reply: Reply, body: Path) -> str | None:
    """The error code of a JSON error reply, None for a 200."""
    if reply.status == 200:
        return None
    code: str = json.loads(body.read_bytes())["error"]["code"]
    return code


def explain(reply: Reply, body: Path) -> str:
    """The reply, and the body of an error reply (JSON), for an assertion message."""
    return f"{reply}: {body.read_bytes()[:300]!r}" if reply.status != 200 else str(reply)


def auth(token: str, mode: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **MODES[mode]}


def round_trip(
    client: Client, base: str, headers: Mapping[str, str], payload: Payload, folder: Path
) -> None:
    """Encrypt the payload and decrypt the envelope with one client; every byte must match."""
    sealed, opened = folder / "sealed", folder / "opened"
    try:
        reply = client.post(base + ENCRYPT, headers, payload.path, sealed)
        assert (reply.status, reply.complete) == (200, True), explain(reply, sealed)
        assert sealed.stat().st_size == stream_envelope_size(payload.size)
        with sealed.open("rb") as f:
            assert f.read(4) == b"SFL1"
        reply = client.post(base + DECRYPT, headers, sealed, opened)
        assert (reply.status, reply.complete) == (200, True), explain(reply, opened)
        assert opened.stat().st_size == payload.size
        assert sha256(opened) == payload.digest
    finally:
        sealed.unlink(missing_ok=True)
        opened.unlink(missing_ok=True)
