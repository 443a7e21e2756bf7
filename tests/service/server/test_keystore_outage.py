"""A PostgreSQL keystore that is slow or gone never stalls the event loop (issue 24, item 1).

Against a real ``sealflow serve`` on a real PostgreSQL: a sealing whose lease needs the database
(the first under a key in the process, every one near a key's limit) is leased in a thread, so
while the database makes it wait (a table lock another session holds) or is down, probes and
sealings under warm keys are answered; while it is down, such a sealing is refused with 503
``keystore_unavailable`` (it fails at once rather than waiting for a connection), and once it is
back, the first write after the server says it is ready succeeds.

Ordering, not timing: a request that waits on a lock the test holds cannot finish before the
test lets go, so whatever is answered meanwhile was answered while it waited.
"""

from __future__ import annotations

import base64
import os
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.postgres import Cluster, start_cluster
from tests.service.conftest import Server, start_server

ROOT_TOKEN = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
PLAIN = b"attack at dawn" * 10


def serve(folder: Path, url: str) -> Server:
    srv = start_server(
        folder / "srv",
        keystore_url=url,
        master_key=base64.b64encode(os.urandom(32)).decode(),
        root_token=ROOT_TOKEN,
    )
    srv.token = ROOT_TOKEN
    return srv


def new_key(srv: Server, **limits: int) -> str:
    name = f"k-{uuid.uuid4().hex[:8]}"
    with srv.client() as c:
        body = {"name": name, "algorithm": "aes-256-gcm", **limits}
        assert c.post("/v1/keys", json=body).status_code == 201
    return name


def framed(records: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(r)) + r for r in records)


# Each way a sealing comes in: (what is sent, how its answer reads back to the plaintext).
def native_single(c: httpx.Client, key: str) -> httpx.Response:
    return c.post(f"/v1/keys/{key}/encrypt?mode=single", content=PLAIN)


def native_stream(c: httpx.Client, key: str) -> httpx.Response:
    return c.post(f"/v1/keys/{key}/encrypt", content=PLAIN)


def native_records(c: httpx.Client, key: str) -> httpx.Response:
    return c.post(f"/v1/keys/{key}/encrypt?mode=records", content=framed([PLAIN] * 3))


def transit_single(c: httpx.Client, key: str) -> httpx.Response:
    body = {"plaintext": base64.b64encode(PLAIN).decode()}
    return c.post(f"/v1/transit/encrypt/{key}", json=body)


def transit_batch(c: httpx.Client, key: str) -> httpx.Response:
    item = {"plaintext": base64.b64encode(PLAIN).decode()}
    return c.post(f"/v1/transit/encrypt/{key}", json={"batch_input": [item] * 5})


def transit_datakey(c: httpx.Client, key: str) -> httpx.Response:
    return c.post(f"/v1/transit/datakey/wrapped/{key}", json={})


SEALINGS: dict[str, Callable[[httpx.Client, str], httpx.Response]] = {
    f.__name__: f
    for f in (
        native_single,
        native_stream,
        native_records,
        transit_single,
        transit_batch,
        transit_datakey,
    )
}


def client(srv: Server) -> httpx.Client:
    headers = {"authorization": f"Bearer {srv.token}", "x-vault-token": srv.token}
    return httpx.Client(base_url=srv.url, headers=headers, timeout=60)


def waiting_on_a_lock(url: str) -> int:
    """Sessions of the server waiting for a lock in PostgreSQL."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND application_name LIKE 'sealflow%'"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture(scope="module")
def locked_server(
    postgres: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, str]]:
    url = postgres.new_database()
    srv = serve(tmp_path_factory.mktemp("outage"), url)
    try:
        yield srv, url
    finally:
        srv.stop()


@pytest.mark.parametrize("sealing", sorted(SEALINGS))
def test_a_sealing_waiting_on_the_database_holds_up_nothing_else(
    locked_server: tuple[Server, str], sealing: str
) -> None:
    srv, url = locked_server
    cold = new_key(srv)  # never sealed under in this process: its lease must reserve
    with client(srv) as c:
        assert native_single(c, "default").status_code == 200  # warm: a block is held
        with ThreadPoolExecutor(1) as pool, psycopg.connect(url) as holder:
            # Reservations write sealflow_usage: another session's lock makes them wait.
            holder.execute("LOCK TABLE sealflow_usage IN EXCLUSIVE MODE")
            waiting: Future[httpx.Response] = pool.submit(SEALINGS[sealing], c, cold)
            while not waiting_on_a_lock(url):
                assert not waiting.done(), waiting.result().text
                time.sleep(0.02)
            # The sealing waits in PostgreSQL; meanwhile everything else is answered.
            assert c.get("/healthz").status_code == 200
            assert c.get("/v1/sys/health").status_code == 200
            for other in ("native_single", "native_stream", "native_records", "transit_single"):
                assert SEALINGS[other](c, "default").status_code == 200, other
            assert c.get("/metrics").status_code == 200
            assert not waiting.done()  # it was waiting all along
            holder.rollback()  # the lock goes: the reservation is made
            answer = waiting.result(timeout=60)
        assert answer.status_code == 200, answer.text


def test_a_database_down_refuses_cold_sealings_at_once_and_serves_warm_ones(
    tmp_path: Path,
) -> None:
    cluster = start_cluster()
    srv = serve(tmp_path, cluster.new_database())
    try:
        cold = {name: new_key(srv) for name in SEALINGS}
        scarce = new_key(srv, max_encryptions=100)  # near its limit: every sealing reserves
        with client(srv) as c:
            assert native_single(c, scarce).status_code == 200
            for name, seal in SEALINGS.items():
                assert seal(c, "default").status_code == 200, name
            cluster.stop()
            while "keystore unreachable" not in srv.log.read_text():
                time.sleep(0.05)  # the server noticed (its watcher hears the database each second)
            for name, seal in SEALINGS.items():
                refused = seal(c, cold[name])
                assert refused.status_code == 503, (name, refused.text)
                errors = refused.json()
                shape = errors["errors"] if name.startswith("transit") else errors["error"]
                assert "keystore" in str(shape), (name, refused.text)
                assert seal(c, "default").status_code == 200, name  # warm: served from cache
            assert native_single(c, scarce).status_code == 503
            assert c.get("/healthz").status_code == 200
            cluster.start()
            # Once the server heard from the database again, writes work at once: no
            # connection kept from before the outage is used, none waits on a backoff.
            while "keystore reachable again" not in srv.log.read_text():
                time.sleep(0.05)
            rotated = c.post(f"/v1/keys/{cold['native_single']}/rotate")
            assert rotated.status_code == 200, rotated.text
            for name, seal in SEALINGS.items():
                assert seal(c, cold[name]).status_code == 200, name
            assert native_single(c, scarce).status_code == 200
    finally:
        srv.stop()
        cluster.remove()
