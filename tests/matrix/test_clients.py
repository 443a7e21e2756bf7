"""Every client against the server directly: each size, each mode the client can take part in.

Request-then-response (the default) must work with every client, half-duplex or not; full
duplex (``Sealflow-Duplex: 1``) with the clients that read while they send. A cell fails by
the client's own error: a stall ends in its timeout (``clients.STALL``), a cut-off body is an
incomplete reply.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.service.conftest import Server

from .clients import CLIENTS, LIBRARY, Client
from .exchange import DEFAULT, DUPLEX, ENCRYPT, MODES, SIZES, Payload, auth, round_trip

CASES = [
    pytest.param(client, mode, id=f"{client.name}-{mode}")
    for client in CLIENTS.values()
    for mode in MODES
    if mode == DEFAULT or client.duplex
]


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize(("client", "mode"), CASES)
def test_round_trip(
    matrix_server: Server,
    payload: Callable[[int], Payload],
    tmp_path: Path,
    client: Client,
    mode: str,
    size: int,
) -> None:
    headers = auth(matrix_server.token, mode)
    round_trip(client, matrix_server.url, headers, payload(size), tmp_path)


def test_the_default_mode_answers_after_the_body_with_its_length(
    matrix_server: Server, payload: Callable[[int], Payload], tmp_path: Path
) -> None:
    # A chunked request (no length known in advance): the reply is spooled, so it has one.
    src = payload(SIZES["8MiB"]).path
    reply = CLIENTS["httpx-generator"].post(
        matrix_server.url + ENCRYPT, auth(matrix_server.token, DEFAULT), src, tmp_path / "out"
    )
    assert reply.status == 200
    assert int(reply.headers["content-length"]) == (tmp_path / "out").stat().st_size
    assert "sealflow-duplex" not in reply.headers
    assert "transfer-encoding" not in reply.headers


# The raw clients, which show the response's headers (the client library keeps them to itself).
@pytest.mark.parametrize(
    "client",
    [pytest.param(c, id=c.name) for c in CLIENTS.values() if c.duplex and c.name != LIBRARY],
)
def test_full_duplex_is_echoed_when_honoured(
    matrix_server: Server, payload: Callable[[int], Payload], tmp_path: Path, client: Client
) -> None:
    src = payload(SIZES["1KiB"]).path
    reply = client.post(
        matrix_server.url + ENCRYPT, auth(matrix_server.token, DUPLEX), src, tmp_path / "out"
    )
    assert reply.status == 200
    assert reply.headers.get("sealflow-duplex") == "1"
