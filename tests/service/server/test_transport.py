"""The two transports of the stream routes: request-then-response (the default, spooled) and
full duplex (on request, with ``Sealflow-Duplex: 1``)."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.service.conftest import Server
from tests.service.duplex import Reply
from tests.service.oracle import split

MakeServer = Callable[..., Server]
MiB = 1 << 20
HEADER = 56  # C2SP's salt and commitment


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


def spool_file(srv: Server, directory: Path) -> Path:
    """The server's open spool file, as /proc/<pid>/fd/<n>: a file in ``directory`` with no
    name there (O_TMPFILE shows as ``#<inode> (deleted)``)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for fd in Path(f"/proc/{srv.proc.pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:  # closed meanwhile
                continue
            if target.startswith(f"{directory}/") and target.endswith(" (deleted)"):
                return fd
        time.sleep(0.01)
    raise AssertionError("the server has no spool file open")


def stalled(fd: Path) -> int:
    """How far the server has read its spool file back, once that stopped moving (the
    reply waits for the client to read)."""
    info = Path(str(fd).replace("/fd/", "/fdinfo/"))
    last, since = -1, time.monotonic()
    while time.monotonic() - since < 0.3:
        pos = int(info.read_text().split()[1])  # "pos:\t<offset>" comes first
        if pos != last:
            last, since = pos, time.monotonic()
        time.sleep(0.02)
    return last


def read_into(reply: Reply, into: bytearray) -> None:
    for piece in reply.pieces():
        into += piece


@pytest.fixture
def spooling(make_server: MakeServer, tmp_path: Path) -> tuple[Server, Path]:
    """A server whose stream outputs go to a spool file from the first batch on, in a
    directory of its own."""
    directory = tmp_path / "spool"
    directory.mkdir()
    return make_server(spool_memory_bytes=64 * 1024, spool_dir=directory), directory


def test_large_bodies_spool_their_envelope_as_it_is_in_a_file_with_no_name(
    spooling: tuple[Server, Path],
) -> None:
    # 32 MiB: more than the loopback socket buffers hold, so the server is still reading
    # its spool back while the reply waits to be read here.
    srv, directory = spooling
    data = os.urandom(32 * MiB)
    with srv.post("/v1/keys/default/encrypt", [data], len(data)) as r:
        assert r.status == 200  # the answer has begun: the whole output is spooled
        spooled = spool_file(srv, directory).read_bytes()
        assert os.listdir(directory) == []
        envelope = r.read()
    # The encrypt's spool is its answer, byte for byte: one AEAD pass, none over the spool.
    assert spooled == envelope
    with srv.post("/v1/decrypt", [envelope], len(envelope)) as r:
        assert r.status == 200
        assert int(r.header("content-length") or 0) == len(data)
        spooled = spool_file(srv, directory).read_bytes()
        assert os.listdir(directory) == []
        opened = r.read()
    assert opened == data
    # The decrypt's spool is the envelope as it came, less its prefix and the C2SP header
    # (kept in memory for the second open): ciphertext only.
    assert spooled == envelope[len(split(envelope)[0]) + HEADER :]
    assert metric(srv, "sealflow_spool_bytes_in_use") == 0


def test_a_tampered_large_envelope_is_a_clean_400_with_no_plaintext(
    spooling: tuple[Server, Path],
) -> None:
    srv, directory = spooling
    data = os.urandom(16 * MiB)
    with srv.client() as c:
        envelope = c.post("/v1/keys/default/encrypt", content=data).content
    flipped = [len(envelope) // 2, len(envelope) - 1]  # a middle chunk, the final tag
    for bad in [*(envelope[:i] + bytes([envelope[i] ^ 1]) + envelope[i + 1 :] for i in flipped),
                envelope[:-100]]:  # fmt: skip
        with srv.post("/v1/decrypt", [bad], len(bad)) as r:
            status, body = r.status, r.read()
        assert status == 400
        assert json.loads(body)["error"]["code"] == "decryption_failed"  # and nothing else
    assert os.listdir(directory) == []
    assert metric(srv, "sealflow_spool_bytes_in_use") == 0
    with srv.client() as c:
        assert c.post("/v1/decrypt", content=envelope).content == data


def test_a_spooled_envelope_that_fails_its_second_open_is_cut_off(
    spooling: tuple[Server, Path],
) -> None:
    # The first pass authenticated every chunk as it arrived, so the answer began (200 and
    # its Content-Length); then the spool file is changed where the server has not read it
    # yet. The second open fails there: the reply stops short of its Content-Length and the
    # connection closes. Nothing that failed is sent, and the client sees no clean end.
    srv, directory = spooling
    data = os.urandom(32 * MiB)
    with srv.client() as c:
        envelope = c.post("/v1/keys/default/encrypt", content=data).content
    got = bytearray()
    with srv.post("/v1/decrypt", [envelope], len(envelope)) as r:
        assert r.status == 200
        assert int(r.header("content-length") or 0) == len(data)
        fd = spool_file(srv, directory)
        read_back = stalled(fd)  # waiting for this client to read: it reads no further
        with fd.open("r+b") as spool:
            at = os.fstat(spool.fileno()).st_size - 1000
            assert read_back < at
            os.pwrite(spool.fileno(), bytes([os.pread(spool.fileno(), 1, at)[0] ^ 1]), at)
        with pytest.raises((http.client.HTTPException, OSError)):
            read_into(r, got)
    assert 0 < len(got) < len(data)
    assert data.startswith(got)  # authenticated plaintext only
    assert metric(srv, "sealflow_spool_damaged_total") == 1
    assert metric(srv, "sealflow_spool_bytes_in_use") == 0
    with srv.client() as c:  # the service goes on
        assert c.post("/v1/decrypt", content=envelope).content == data
    srv.stop()
    cut = next(e for e in srv.access() if e["route"] == "/v1/decrypt")
    assert (cut["status"], cut.get("aborted"), cut["error"]) == (200, True, "spool_damaged")
    assert "a spooled envelope failed its second open" in srv.log.read_text()


def test_a_records_decrypt_seals_what_it_spools(spooling: tuple[Server, Path]) -> None:
    # mode=records decrypt answers plaintexts: what of them reaches the spool file is sealed
    # under the request's own key, the one spool that is not kept as it is.
    srv, directory = spooling
    record = b"attack at dawn, " * 64  # 1 KiB of a recognisable plaintext
    framed = (len(record).to_bytes(4, "big") + record) * (32 << 10)  # 32 MiB
    with srv.client() as c:
        envelopes = c.post("/v1/keys/default/encrypt?mode=records", content=framed).content
    with srv.post("/v1/decrypt?mode=records", [envelopes], len(envelopes)) as r:
        assert r.status == 200
        spooled = spool_file(srv, directory).read_bytes()
        assert os.listdir(directory) == []
        opened = r.read()
    assert len(spooled) > 16 * MiB
    assert b"attack at dawn" not in spooled
    assert opened.count(record) == 32 << 10
    assert metric(srv, "sealflow_spool_bytes_in_use") == 0
