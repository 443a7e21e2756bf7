"""The two transports of the stream routes: request-then-response (the default, spooled) and
full duplex (on request, with ``Sealflow-Duplex: 1``)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

import httpx

from tests.service.conftest import Server

MakeServer = Callable[..., Server]
MiB = 1 << 20


def metric(srv: Server, name: str) -> float:
    text = httpx.get(srv.url + "/metrics").text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def test_a_half_duplex_client_moves_32_mib_both_ways(make_server: MakeServer) -> None:
    # httpx sends the whole body before it reads: with an answer that started early, this
    # stalled past a few MiB. By default the answer waits for the body, spooled.
    srv = make_server(spool_memory_bytes=MiB)
    data = os.urandom(32 * MiB)
    with srv.client() as c:
        sealed = c.post("/v1/keys/default/encrypt", content=data)
        assert sealed.status_code == 200
        assert int(sealed.headers["content-length"]) == len(sealed.content)
        assert "sealflow-duplex" not in sealed.headers
        opened = c.post("/v1/decrypt", content=sealed.content)
        assert opened.status_code == 200
        assert hashlib.sha256(opened.content).digest() == hashlib.sha256(data).digest()
    assert metric(srv, "sealflow_spooled_requests_total") == 2
    assert metric(srv, "sealflow_spool_bytes_written_total") > 2 * 31 * MiB
    assert metric(srv, "sealflow_spool_bytes_in_use") == 0


def test_the_spool_budget_is_a_clean_507_and_duplex_needs_none(make_server: MakeServer) -> None:
    srv = make_server(
        spool_memory_bytes=64 * 1024, max_spool_bytes=MiB, max_spool_request_bytes=8 * MiB
    )
    data = os.urandom(4 * MiB)
    with srv.client() as c:
        r = c.post("/v1/keys/default/encrypt", content=data)
        assert r.status_code == 507
        assert r.json()["error"]["code"] == "spool_full"
        assert "Sealflow-Duplex" in r.json()["error"]["message"]
    # Full duplex spools nothing: the same body goes through.
    headers = {"Sealflow-Duplex": "1"}
    with srv.post("/v1/keys/default/encrypt", [data], len(data), headers) as reply:
        assert reply.status == 200
        assert reply.header("sealflow-duplex") == "1"
        assert len(reply.read()) > len(data)
    assert metric(srv, "sealflow_spool_bytes_in_use") == 0


def test_one_request_over_its_spool_limit_is_413(make_server: MakeServer) -> None:
    srv = make_server(spool_memory_bytes=64 * 1024, max_spool_request_bytes=MiB)
    with srv.client() as c:
        r = c.post("/v1/keys/default/encrypt", content=os.urandom(4 * MiB))
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "too_large"


def test_the_access_log_says_which_transport(make_server: MakeServer) -> None:
    srv = make_server()
    with srv.client() as c:
        c.post("/v1/keys/default/encrypt", content=b"x").raise_for_status()
    with srv.post("/v1/keys/default/encrypt", [b"y"], 1, {"Sealflow-Duplex": "1"}) as r:
        assert r.status == 200
        r.read()
    srv.stop()
    encrypts = [e for e in srv.access() if e["route"].endswith("/encrypt")]
    assert [e.get("duplex") is True for e in encrypts] == [False, True]
