"""The connection cap in-process (``http.Gate``): which connection makes room for a new one.
tests/service/server/test_connections.py runs it against a real server short of descriptors."""

from __future__ import annotations

from prometheus_client import REGISTRY

from sealflow.service.config import Settings
from sealflow.service.server import http
from tests.service.server.http.conftest import Conn, Run, Service
from tests.service.server.http.test_protocol import ENCRYPT, get, post

HEAD_BEGUN = b"POST /v1/keys/default/encrypt HTTP/1.1\r\nHost: x\r\n"


def refused(reason: str) -> float:
    labels = {"reason": reason}
    return REGISTRY.get_sample_value("sealflow_connections_refused_total", labels) or 0.0


async def authenticated(svc: Service, gate: http.Gate) -> Conn:
    """A connection whose one request carried a valid token, answered: idle again."""
    conn = svc.connect(gate=gate)
    conn.send(post(ENCRYPT, svc.token, b"x"))
    assert await conn.answers(1) == [200]
    return conn


def busy(svc: Service, gate: http.Gate) -> Conn:
    """A connection with a request under way: a body of 100 bytes, 1 sent."""
    conn = svc.connect(gate=gate)
    conn.send(post(ENCRYPT, svc.token, b"x" * 100)[:-99])
    return conn


def test_the_oldest_connection_that_never_authenticated_makes_room_first(run: Run) -> None:
    async def test(svc: Service) -> None:
        before = refused("shed_unauthenticated")
        gate = http.Gate(3)
        kept = await authenticated(svc, gate)
        silent = svc.connect(gate=gate)  # sent nothing
        slow = svc.connect(gate=gate)
        slow.send(HEAD_BEGUN)  # a head begun, never finished
        refused_once = svc.connect(gate=gate)  # the 4th: the silent one goes
        assert (silent.wire.aborted, slow.wire.closed, kept.wire.closed) == (True, False, False)
        refused_once.send(get("/v1/keys"))  # no token: 401, and still never authenticated
        assert await refused_once.answers(1) == [401]
        svc.connect(gate=gate)  # the slow head goes
        assert slow.wire.aborted
        svc.connect(gate=gate)  # then the one refused for want of a token
        assert refused_once.wire.aborted
        assert not kept.wire.closed
        kept.send(post(ENCRYPT, svc.token, b"y"))
        assert await kept.answers(2) == [200, 200]
        assert refused("shed_unauthenticated") - before == 3
        assert len(gate) == 3

    run(test)


def test_an_idle_keep_alive_connection_makes_room_when_no_other_can(run: Run) -> None:
    async def test(svc: Service) -> None:
        before = refused("shed_idle")
        gate = http.Gate(2)
        idle = await authenticated(svc, gate)
        working = busy(svc, gate)
        new = svc.connect(gate=gate)
        assert (idle.wire.aborted, working.wire.closed, new.wire.closed) == (True, False, False)
        assert refused("shed_idle") - before == 1
        working.send(b"x" * 99)  # a request under way was never cut off
        assert await working.answers(1) == [200]

    run(test)


def test_a_new_connection_is_refused_when_every_other_is_busy(run: Run) -> None:
    async def test(svc: Service) -> None:
        before = refused("connection_limit")
        gate = http.Gate(2)
        first, second = busy(svc, gate), busy(svc, gate)
        new = svc.connect(gate=gate)
        assert (new.wire.aborted, first.wire.closed, second.wire.closed) == (True, False, False)
        assert refused("connection_limit") - before == 1
        assert len(gate) == 2
        # A connection that ends leaves room.
        first.protocol.connection_lost(None)
        assert not svc.connect(gate=gate).wire.closed
        assert len(gate) == 2

    run(test)


def test_the_cap_leaves_descriptors_for_files_the_keystore_and_spools() -> None:
    settings = Settings(max_concurrent_requests=256)
    derived = http.capacity(settings, descriptors=1024)
    # 64 for the process's own files and the keystore, one spool file per request in flight.
    assert (derived.connections, derived.unsafe) == (1024 - 64 - 256, False)
    chosen = http.capacity(Settings(max_connections=500), descriptors=1024)
    assert (chosen.connections, chosen.unsafe) == (500, False)
    too_many = http.capacity(Settings(max_connections=1000), descriptors=1024)
    assert (too_many.connections, too_many.unsafe) == (1000, True)
    # Too few descriptors for any: a floor, and the start-up log says so.
    starved = http.capacity(settings, descriptors=256)
    assert (starved.connections, starved.unsafe) == (16, True)
