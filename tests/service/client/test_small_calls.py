"""Small calls take the service's fast answer: a body of known length up to 64 KiB goes as
single-shot (an encrypt that names no mode) without ``Sealflow-Duplex``, seen from the server's
access log and its lane counter; anything larger or of unknown length still streams in full
duplex. ``Client`` makes them in the caller's thread; ``AsyncClient`` makes calls at once on
connections of their own."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sealflow import AsyncClient, Client
from sealflow.service.client import TransportError, _blocking
from sealflow.service.client._plan import SMALL_MAX
from tests.service.client.proxy import proxy
from tests.service.conftest import Server, start_server

TASKS = 16


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of this module's own: its access log and counters hold only these calls."""
    server = start_server(tmp_path_factory.mktemp("small") / "data")
    # One sealing first: the first under a key in a process leases from the keystore, which
    # the event loop never waits for, so it goes the ASGI path rather than the fast answer.
    with server.client() as c:
        assert c.post("/v1/keys/default/encrypt?mode=single", content=b"warm").is_success
    while not data_lines(server):  # its log line is out (the log goes out every 0.1 s)
        time.sleep(0.05)
    try:
        yield server
    finally:
        server.stop()


def data_lines(srv: Server) -> list[dict[str, Any]]:
    return [e for e in srv.access() if e["route"].startswith("/v1/") and "crypt" in e["route"]]


def logged(srv: Server, before: int, count: int) -> list[tuple[str, str, bool, int]]:
    """(route, mode, answered in full duplex, bytes in) of the data calls after the first
    ``before``, once ``count`` of them are in the log (it is written every 0.1 s)."""
    deadline = time.monotonic() + 10
    while len(lines := data_lines(srv)) < before + count:
        assert time.monotonic() < deadline, lines[before:]
        time.sleep(0.05)
    return [(e["route"], e["mode"], e.get("duplex", False), e["bytes_in"]) for e in lines[before:]]


def lane_count(srv: Server) -> int:
    """Requests the server answered at once from its parser (its fast answer)."""
    text = httpx.get(srv.url + "/metrics").text
    match = re.search(r"^sealflow_lane_requests_total ([0-9.e+]+)$", text, re.M)
    assert match is not None
    return int(float(match.group(1)))


ENCRYPT, DECRYPT = "/v1/keys/{name}/encrypt", "/v1/decrypt"


def test_small_calls_are_single_shot_without_full_duplex(srv: Server) -> None:
    data = os.urandom(1024)
    before, lane = len(data_lines(srv)), lane_count(srv)
    with Client(srv.url, srv.token) as api:
        envelope = api.encrypt("default", data)
        assert envelope[4] == 2  # the envelope's mode byte: single-shot
        assert api.decrypt(envelope) == data

    async def in_async() -> None:
        async with AsyncClient(srv.url, srv.token) as api:
            sealed = await api.encrypt("default", data)
            assert sealed[4] == 2
            assert await api.decrypt(sealed) == data

    asyncio.run(in_async())
    assert lane_count(srv) - lane == 4  # each answered at once from the server's parser
    with Client(srv.url, srv.token) as api:  # the largest small body, and its envelope
        largest = api.encrypt("default", bytes(SMALL_MAX))
        assert api.decrypt(largest) == bytes(SMALL_MAX)
    assert logged(srv, before, 6) == [
        (ENCRYPT, "single", False, 1024),
        (DECRYPT, "single", False, len(envelope)),
        (ENCRYPT, "single", False, 1024),
        (DECRYPT, "single", False, len(envelope)),
        (ENCRYPT, "single", False, SMALL_MAX),
        (DECRYPT, "single", False, len(largest)),
    ]


def test_large_or_unknown_length_bodies_still_stream_in_full_duplex(srv: Server) -> None:
    large = os.urandom(SMALL_MAX + 1)
    before = len(data_lines(srv))
    with Client(srv.url, srv.token) as api:
        envelope = api.encrypt("default", large)
        assert envelope[4] == 1  # the envelope's mode byte: stream
        assert api.decrypt(envelope) == large
        unknown = api.encrypt("default", iter([b"abc"]))  # no length: chunked
        assert api.decrypt(iter([unknown])) == b"abc"
        # An explicit mode is honoured; the small body still goes without full duplex.
        small = api.encrypt("default", b"abc", mode="stream")
        assert small[4] == 1
        assert api.decrypt(small) == b"abc"
    assert logged(srv, before, 6) == [
        (ENCRYPT, "stream", True, SMALL_MAX + 1),
        (DECRYPT, "stream", True, len(envelope)),
        (ENCRYPT, "stream", True, 3),
        (DECRYPT, "stream", True, len(unknown)),
        (ENCRYPT, "stream", False, 3),
        (DECRYPT, "stream", False, len(small)),
    ]


def established(port: int) -> int:
    """TCP connections the server on ``port`` holds open (its side, from the kernel)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            count += int(local.rsplit(":", 1)[1], 16) == port and state == "01"
    return count


def test_async_calls_at_once_each_take_a_connection(srv: Server) -> None:
    assert established(srv.port) == 0

    async def main() -> None:
        async with AsyncClient(srv.url, srv.token) as api:
            for _ in range(3):
                datas = [os.urandom(n) for n in range(TASKS)]
                sealed = await asyncio.gather(*(api.encrypt("default", d) for d in datas))
                assert await asyncio.gather(*(api.decrypt(e) for e in sealed)) == datas
            # TASKS calls were in flight at once, each on its own connection, all kept.
            assert api.connections_opened == TASKS
            assert established(srv.port) == TASKS

    asyncio.run(main())


def test_small_calls_run_in_the_callers_thread(srv: Server, tmp_path: Path) -> None:
    threads = set(threading.enumerate())
    seen: list[tuple[threading.Thread, int, int]] = []

    def progress(sent: int, received: int) -> None:
        seen.append((threading.current_thread(), sent, received))

    with Client(srv.url, srv.token) as api:
        envelope = api.encrypt("default", b"x" * 1000, on_progress=progress)
        with open(tmp_path / "plain", "wb") as out:
            assert api.decrypt(envelope, out=out, on_progress=progress) == 1000
        assert (tmp_path / "plain").read_bytes() == b"x" * 1000
        api.list_keys()
        assert set(threading.enumerate()) == threads  # no event loop thread was started
        assert {thread for thread, _, _ in seen} == {threading.current_thread()}
        assert [(s, r) for _, s, r in seen] == [
            (1000, 0), (1000, len(envelope)), (len(envelope), 0), (len(envelope), 1000)
        ]  # fmt: skip
        assert api.decrypt(api.encrypt("default", iter([b"y"]))) == b"y"  # not small
        assert len(set(threading.enumerate()) - threads) == 1  # now it runs
    assert set(threading.enumerate()) == threads


def test_a_small_call_on_a_connection_closed_meanwhile_goes_again(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    with proxy(server.port) as p, Client(p.url, server.token) as api:
        api.list_keys()
        p.close_connections()
        api.list_keys()  # the close was seen before the call: a new connection
        assert p.accepted == 2
        # A close that comes after that look (the server's keep-alive timeout racing the
        # call): the call fails on the old connection, and goes once more on a new one.
        monkeypatch.setattr(_blocking.Connection, "usable", property(lambda self: True))
        p.close_connections()
        assert api.decrypt(api.encrypt("default", b"again")) == b"again"
        assert p.accepted == 3
        p.close_connections()
        with pytest.raises(TransportError):  # not an idempotent call: never sent twice
            api.rotate_key("default")
        assert p.accepted == 3
