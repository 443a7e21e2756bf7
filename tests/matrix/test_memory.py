"""256 MiB through half-duplex clients: the default mode spools, and memory stays bounded.

Request-then-response holds a whole reply back until the request has ended; the server keeps
it in a spool that moves to a temporary file as it grows, so its resident memory must not
follow the body's size. Each test has a server of its own, so nothing else moves its memory,
and measures the kernel's high-water mark (VmHWM, reset after a warm-up), which catches a
peak however short.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.conftest import Server, start_server

from .clients import CLIENTS, Client
from .exchange import DEFAULT, MiB, Payload, auth, make_payload, round_trip


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Payload:
    return make_payload(tmp_path_factory.mktemp("big"), 256 * MiB)


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "data")
    try:
        yield srv
    finally:
        srv.stop()


def reset_peak(server: Server) -> None:
    """Start VmHWM afresh at the current resident size (proc(5): clear_refs, value 5)."""
    Path(f"/proc/{server.proc.pid}/clear_refs").write_text("5")


@pytest.mark.slow
@pytest.mark.parametrize(
    "client", [CLIENTS["httpx-generator"], CLIENTS["requests-file"]], ids=lambda c: c.name
)
def test_256_mib_round_trip_keeps_server_memory_bounded(
    own_server: Server, big: Payload, tmp_path: Path, client: Client
) -> None:
    headers = auth(own_server.token, DEFAULT)
    # Warm up: the first requests load code and fill pools; growth is measured after them.
    warm = make_payload(tmp_path, 8 * MiB)
    for _ in range(2):
        round_trip(client, own_server.url, headers, warm, tmp_path)
    baseline = own_server.status("VmRSS")
    reset_peak(own_server)
    round_trip(client, own_server.url, headers, big, tmp_path)
    growth = own_server.status("VmHWM") - baseline
    assert growth < 64 * MiB, f"peak resident memory grew by {growth / MiB:.1f} MiB"
