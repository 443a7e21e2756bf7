"""Serve, restart, decrypt: a keystore's first server seals an envelope, and a later server on
the same keystore (a restart, a replica, a restored copy) opens it; and envelopes, one per key,
that a server must go on opening (while a rotation runs, after it)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.service.conftest import Server, start_server


def seal(srv: Server, secret: bytes) -> bytes:
    """An envelope of ``secret`` under key default."""
    with srv.client() as client:
        reply = client.post("/v1/keys/default/encrypt", content=secret)
        assert reply.status_code == 200, reply.text
        return reply.content


def unseal(srv: Server, envelope: bytes) -> bytes:
    with srv.client() as client:
        reply = client.post("/v1/decrypt", content=envelope)
        assert reply.status_code == 200, reply.text
        return reply.content


@contextmanager
def restarted(first: Server, data_dir: Path, **settings: object) -> Iterator[Server]:
    """``first`` stopped, a server on ``data_dir`` with ``settings``, stopped after; it takes
    ``first``'s root token (a keystore prints one on its first start only)."""
    first.stop()
    again = start_server(data_dir, **settings)
    try:
        again.token = first.token
        yield again
    finally:
        again.stop()


def reopened(first: Server, data_dir: Path, envelope: bytes, **settings: object) -> bytes:
    """What a server ``restarted`` after ``first`` decrypts ``envelope`` to."""
    with restarted(first, data_dir, **settings) as again:
        return unseal(again, envelope)


def seal_names(client: httpx.Client, *names: str) -> dict[str, bytes]:
    """Each key's name, sealed under that key."""
    return {
        name: client.post(f"/v1/keys/{name}/encrypt", content=name.encode()).content
        for name in names
    }


def open_each(client: httpx.Client, envelopes: Mapping[str, bytes]) -> int:
    """Every envelope of ``seal_names`` opens to its key's name; how many were opened."""
    for name, envelope in envelopes.items():
        reply = client.post("/v1/decrypt", content=envelope)
        assert reply.status_code == 200, reply.text
        assert reply.content == name.encode()
    return len(envelopes)
