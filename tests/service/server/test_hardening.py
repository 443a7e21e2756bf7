"""Hostile and broken clients, crashes and bad keystores, against real servers."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import httpx

from tests.service.conftest import SEALFLOW, Server, start_server

MakeServer = Callable[..., Server]


def raw(port: int, data: bytes) -> bytes:
    """Send bytes, return everything the server answers until it closes (or 10 s pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        reply = b""
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except TimeoutError:
            pass
        return reply


def open_fds(srv: Server) -> int:
    return len(os.listdir(f"/proc/{srv.proc.pid}/fd"))


def test_a_trickling_body_is_cut_off_while_others_are_served(make_server: MakeServer) -> None:
    srv = make_server(receive_timeout=1)
    head = (
        f"POST /v1/keys/default/encrypt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        f"{srv.token}\r\nContent-Length: 1000\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sock.sendall(head)
    reply = b""
    with srv.client() as other:
        for _ in range(40):  # a byte every 0.1 s: never a 1 s gap, but 10 bytes/s
            try:
                sock.sendall(b"x")
            except OSError:
                break
            assert other.post("/v1/keys/default/encrypt", content=b"y").status_code == 200
            time.sleep(0.1)
    sock.settimeout(5)
    try:
        while chunk := sock.recv(65536):
            reply += chunk
    except (TimeoutError, OSError):
        pass
    sock.close()
    assert reply.startswith(b"HTTP/1.1 408 ")


def test_oversized_headers_are_refused(server: Server) -> None:
    big = b"X-Filler: " + b"a" * (200 * 1024) + b"\r\n"
    reply = raw(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
    assert reply.split(b" ", 2)[1] in (b"400", b"431")


def test_malformed_framing_is_rejected_without_a_500(server: Server) -> None:
    auth = f"Authorization: Bearer {server.token}\r\n".encode()
    cases = {
        "content-length and chunked": b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n",
        "bad chunk size": b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        "negative length": b"Content-Length: -1\r\n\r\n",
        "two lengths": b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    }
    for name, tail in cases.items():
        request = b"POST /v1/keys/default/encrypt HTTP/1.1\r\nHost: x\r\n" + auth + tail
        status = raw(server.port, request).split(b" ", 2)[1]
        assert status == b"400", name
    # A body longer than its Content-Length: the extra bytes are a second request, which
    # must be parsed as one (and refused), never appended to the first body.
    smuggled = b"GET /v1/keys HTTP/1.1\r\nHost: x\r\n\r\n"
    request = (
        b"POST /v1/keys/default/encrypt HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 3\r\n"
        b"\r\nabc" + smuggled
    )
    reply = raw(server.port, request)
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert b"HTTP/1.1 401 " in reply  # the second request, unauthenticated
    assert_no_500(server)


def test_disconnects_mid_upload_and_mid_download_leak_nothing(make_server: MakeServer) -> None:
    # A small spool memory part: the uploads cut off mid-way have spool files open by then.
    srv = make_server(spool_memory_bytes=65536)
    with srv.client() as c:
        envelope = c.post("/v1/keys/default/encrypt", content=os.urandom(4 << 20)).content
        c.get("/metrics")
    time.sleep(0.5)
    fds_before = open_fds(srv)
    auth = f"Host: x\r\nAuthorization: Bearer {srv.token}\r\n"
    head = f"POST /v1/keys/default/encrypt HTTP/1.1\r\n{auth}"
    for i in range(200):
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        if i % 2:  # mid-upload
            sock.sendall(f"{head}Content-Length: {8 << 20}\r\n\r\n".encode() + b"\0" * 300_000)
        else:  # mid-download: in full duplex the reply streams while we are still sending
            dec = (
                f"POST /v1/decrypt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.token}"
                "\r\nSealflow-Duplex: 1\r\n"
            )
            sock.sendall(
                f"{dec}Content-Length: {len(envelope)}\r\n\r\n".encode() + envelope[: 1 << 20]
            )
            sock.recv(1000)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")  # reset
        sock.close()
    deadline = time.monotonic() + 20
    while True:
        text = httpx.get(srv.url + "/metrics").text
        in_flight = next(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("sealflow_requests_in_flight ")
        )
        if in_flight == 0 and open_fds(srv) <= fds_before + 2:
            break
        assert time.monotonic() < deadline, (in_flight, open_fds(srv), fds_before)
        time.sleep(0.2)
    spooled = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("sealflow_spool_bytes_in_use ")
    )
    assert spooled == 0  # every spool file of the cut-off uploads is gone (fds counted above)
    pooled = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("sealflow_buffer_pool_bytes ")
    )
    assert pooled <= 256 << 20
    # Native cipher contexts belong to threads (LAZY keeps one per thread and algorithm),
    # so 200 broken requests must not have created more than a handful.
    created = sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("sealflow_cipher_context_events_total")
        and 'event="created"' in line
        and 'provider="native"' in line
    )
    assert created <= 3 * 8
    with srv.client() as c:  # and it still works
        assert c.post("/v1/decrypt", content=envelope).status_code == 200


def test_sigkill_during_rotations_loses_no_version(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data")
    srv.stop()
    env = {**os.environ, "SEALFLOW_DATA_DIR": str(tmp_path / "data")}
    create = subprocess.run(  # noqa: S603
        [SEALFLOW, "keys", "create", "crash"], env=env, capture_output=True, check=False
    )
    assert create.returncode == 0, create.stderr
    rng = random.Random(7)
    completed = 1
    for _ in range(25):
        proc = subprocess.Popen(  # noqa: S603
            [SEALFLOW, "keys", "rotate", "crash"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(rng.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        if proc.returncode == 0:
            completed = json.loads(out)["latest"]
    shown = subprocess.run(  # noqa: S603
        [SEALFLOW, "keys", "show", "crash", "--json"], env=env, capture_output=True, check=True
    )
    versions = [v["version"] for v in json.loads(shown.stdout)["versions"]]
    assert versions == list(range(1, len(versions) + 1))  # no gap, nothing half-written
    assert len(versions) >= completed
    with closing(sqlite3.connect(tmp_path / "data" / "keystore.db")) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    srv = start_server(tmp_path / "data")  # and the keystore still opens
    try:
        assert httpx.get(srv.url + "/readyz").status_code == 200
    finally:
        srv.stop()


def test_a_keystore_without_its_master_key_is_refused_and_left_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = start_server(data)
    srv.stop()
    (data / "master.key").unlink()
    before = (data / "keystore.db").read_bytes()
    env = {**os.environ, "SEALFLOW_DATA_DIR": str(data)}
    done = subprocess.run(  # noqa: S603
        [SEALFLOW, "serve", "--port", "0"], env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert b"master key" in done.stderr
    assert not (data / "master.key").exists()  # no new dev key made up for an old keystore
    assert (data / "keystore.db").read_bytes() == before


def test_an_unreadable_keystore_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "keystore.db").mkdir()  # a directory where the file should be
    env = {**os.environ, "SEALFLOW_DATA_DIR": str(data)}
    done = subprocess.run(  # noqa: S603
        [SEALFLOW, "serve", "--port", "0"], env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert b"keystore" in done.stderr
    assert b"Traceback" not in done.stderr


def test_a_burst_of_large_single_shot_requests_stays_within_the_memory_budget(
    make_server: MakeServer,
) -> None:
    budget = 64 << 20
    srv = make_server(max_buffered_bytes=budget)  # the concurrency limit stays at 256
    baseline = srv.status("VmRSS")
    body = os.urandom(4 << 20)
    statuses: list[int] = []

    def one() -> None:
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            r = c.post(
                "/v1/keys/default/encrypt?mode=single",
                content=body,
                headers={"authorization": f"Bearer {srv.token}"},
            )
            statuses.append(r.status_code)
            if r.status_code == 503:
                assert r.json()["error"]["code"] == "overloaded"

    threads = [threading.Thread(target=one) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(statuses) <= {200, 503}
    assert statuses.count(200) >= 7  # 8 MiB each (body and result) fit 64 MiB
    assert 503 in statuses
    assert srv.proc.poll() is None
    # 100 x 8 MiB held at once would be 800 MiB; the budget keeps the peak far below.
    assert srv.status("VmHWM") - baseline < 4 * budget
    with srv.client() as c:  # and the budget is whole again afterwards
        assert c.post("/v1/keys/default/encrypt?mode=single", content=body).status_code == 200


def test_schemathesis_finds_no_server_error(make_server: MakeServer) -> None:
    """Property-based requests from the OpenAPI document: admin, data and Transit routes (with
    both kinds of token header), no 5xx."""
    srv = make_server()  # its own server: the run creates, rotates and retires keys
    schemathesis = str(Path(SEALFLOW).with_name("schemathesis"))
    done = subprocess.run(  # noqa: S603
        [
            schemathesis, "run", f"{srv.url}/openapi.json", "--checks", "not_a_server_error",
            "--header", f"Authorization: Bearer {srv.token}", "--max-examples", "30",
            "--header", f"X-Vault-Token: {srv.token}",
            "--request-timeout", "10", "--generation-deterministic",
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    tested = re.search(r"Tested: (\d+)", done.stdout)
    assert tested is not None
    # Every operation, the data and Transit routes (served outside FastAPI) included.
    with srv.client() as c:
        paths = c.get("/openapi.json").json()["paths"]
    assert any(path.startswith("/v1/transit/") for path in paths)
    assert int(tested.group(1)) == sum(len(operations) for operations in paths.values())
    assert_no_500(srv)


def test_schemathesis_sends_mode_records_to_every_data_route(
    make_server: MakeServer, tmp_path: Path
) -> None:
    """The data routes alone (in the whole run above a token route may revoke the token
    first): mode=records is in the document for encrypt, both decrypts and hmac, and the
    property-based requests use it on each, answered past authentication, with no 5xx."""
    srv = make_server()
    schemathesis = str(Path(SEALFLOW).with_name("schemathesis"))
    har = tmp_path / "requests.har"
    done = subprocess.run(  # noqa: S603
        [
            schemathesis, "run", f"{srv.url}/openapi.json", "--checks", "not_a_server_error",
            "--header", f"Authorization: Bearer {srv.token}", "--max-examples", "30",
            "--request-timeout", "10", "--generation-deterministic",
            "--include-path-regex", r"^/v1/(keys/\{name\}/(encrypt|decrypt|hmac)|decrypt)$",
            "--report", "har", "--report-har-path", str(har),
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert_no_500(srv)
    with_records = set()
    for entry in json.loads(har.read_text())["log"]["entries"]:
        url = urllib.parse.urlsplit(entry["request"]["url"])
        query = urllib.parse.parse_qs(url.query)
        if query.get("mode") == ["records"] and entry["response"]["status"] not in (401, 403):
            with_records.add(re.sub(r"^/v1/keys/[^/]+/", "/v1/keys/{name}/", url.path))
    assert with_records == {
        "/v1/keys/{name}/encrypt",
        "/v1/keys/{name}/decrypt",
        "/v1/decrypt",
        "/v1/keys/{name}/hmac",
    }


def assert_no_500(srv: Server) -> None:
    time.sleep(0.3)  # the access log goes out every 0.1 s: this test's lines too
    deadline = time.monotonic() + 10
    while not (access := srv.access()):  # lines go out in batches
        assert time.monotonic() < deadline, "no access log line"
        time.sleep(0.05)
    assert all(e["status"] != 500 for e in access)
