"""Limits, timeouts, overload, draining, metrics, logs, several workers, TLS."""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import os
import re
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.service.conftest import Server

MakeServer = Callable[..., Server]


def raw_request(port: int, head: bytes, body: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head + body)
    return sock


def read_reply(sock: socket.socket) -> bytes:
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    sock.close()
    return reply


def post_head(path: str, token: str, extra: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n{extra}\r\n"
    ).encode()


def test_single_shot_over_the_limit_by_content_length_is_413_unread(server: Server) -> None:
    size = 64 * 1024 * 1024 + 1
    head = post_head(
        "/v1/keys/default/encrypt?mode=single", server.token, f"Content-Length: {size}\r\n"
    )
    reply = read_reply(raw_request(server.port, head, b"x" * 100))
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b'"too_large"' in reply


def test_single_shot_over_the_limit_without_length_is_413(make_server: MakeServer) -> None:
    srv = make_server(max_single_bytes=1 << 20)

    def body() -> Iterator[bytes]:
        for _ in range(8):
            yield b"z" * (1 << 18)

    with srv.post("/v1/keys/default/encrypt?mode=single", body()) as r:
        assert r.status == 413
        assert json.loads(r.read())["error"]["code"] == "too_large"
    with srv.client() as c:  # exactly at the limit is fine, in both directions
        env = c.post("/v1/keys/default/encrypt?mode=single", content=b"z" * (1 << 20)).content
        assert c.post("/v1/decrypt", content=env).content == b"z" * (1 << 20)
        big = c.post("/v1/keys/default/encrypt", content=b"z" * (2 << 20)).content
        assert c.post("/v1/decrypt", content=big).status_code == 200  # stream: no limit


def test_a_slow_client_gets_408(make_server: MakeServer) -> None:
    srv = make_server(receive_timeout=0.5)
    head = post_head("/v1/keys/default/encrypt", srv.token, "Content-Length: 100\r\n")
    reply = read_reply(raw_request(srv.port, head, b"only ten b"))
    assert reply.startswith(b"HTTP/1.1 408 ")
    assert b'"request_timeout"' in reply


def test_a_client_that_never_reads_the_reply_is_cut_off(make_server: MakeServer) -> None:
    srv = make_server(receive_timeout=1)
    size = 64 << 20
    head = post_head("/v1/keys/default/encrypt", srv.token, f"Content-Length: {size}\r\n")
    sock = raw_request(srv.port, head)

    def upload() -> None:
        # Send without ever reading: once both socket buffers are full the server's
        # writes stall, and after receive_timeout it gives the request up.
        with contextlib.suppress(OSError):
            for _ in range(size // 65536):
                sock.sendall(b"\0" * 65536)

    sender = threading.Thread(target=upload, daemon=True)
    sender.start()
    deadline = time.monotonic() + 60
    while not any(e.get("error") == "request_timeout" and e.get("aborted") for e in srv.access()):
        assert time.monotonic() < deadline, "the stalled request was never given up"
        time.sleep(0.1)
    # The server dropped the connection (it did not wait for this client to read what was
    # queued): the blocked sender fails on its own, with nobody closing the socket here.
    sender.join(timeout=30)
    assert not sender.is_alive(), "the server kept the stalled connection open"
    try:
        rest = sock.recv(1 << 20)  # whatever was still in flight, then the end
        while rest:
            rest = sock.recv(1 << 20)
    except ConnectionResetError:
        rest = b""
    assert rest == b""
    sock.close()


def test_beyond_max_concurrent_requests_is_503_and_probes_still_answer(
    make_server: MakeServer,
) -> None:
    srv = make_server(max_concurrent_requests=2, max_concurrent_per_token=2)
    slow = srv.stalled_encrypts(2)
    try:
        deadline = time.monotonic() + 10
        with srv.client() as c:
            while (r := c.post("/v1/keys/default/encrypt", content=b"y")).status_code != 503:
                assert time.monotonic() < deadline, "the two slow requests never counted"
                time.sleep(0.05)
            assert r.json()["error"]["code"] == "overloaded"
            assert c.get("/readyz").status_code == 200
            for sock in slow:
                sock.sendall(b"x" * 99)
            replies = [read_reply(sock) for sock in slow]
            assert all(reply.startswith(b"HTTP/1.1 200 ") for reply in replies)
            assert c.post("/v1/keys/default/encrypt", content=b"y").status_code == 200
    finally:
        for sock in slow:
            sock.close()


def test_readiness_goes_503_while_draining_and_in_flight_requests_finish(
    make_server: MakeServer,
) -> None:
    srv = make_server(drain_seconds=2)
    head = post_head("/v1/keys/default/encrypt", srv.token, "Content-Length: 20\r\n")
    in_flight = raw_request(srv.port, head, b"0123456789")
    time.sleep(0.2)
    srv.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    with httpx.Client(base_url=srv.url) as c:
        while (r := c.get("/readyz")).status_code == 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert r.status_code == 503
        assert r.json()["status"] == "draining"
        assert c.get("/healthz").status_code == 200
    # After the drain the listener closes: new connections are refused, ...
    while True:
        try:
            socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
        except ConnectionRefusedError:
            break
        assert time.monotonic() < deadline, "still accepting connections after the drain"
        time.sleep(0.05)
    # ... while the request in flight still gets its answer.
    in_flight.sendall(b"0123456789")
    assert read_reply(in_flight).startswith(b"HTTP/1.1 200 ")
    # uvicorn re-raises the signal once it has shut down, for its supervisor to see.
    assert srv.proc.wait(30) in (0, -signal.SIGTERM)
    # The keystore was closed cleanly: SQLite removes its write-ahead log on the last close.
    assert not (srv.data_dir / "keystore.db-wal").exists()


def metric_lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name)]


def test_metrics_cover_the_spec_list_with_fixed_label_values(
    server: Server, client: httpx.Client
) -> None:
    client.post("/v1/keys/t-chacha/encrypt", content=os.urandom(200_000)).raise_for_status()
    client.post("/v1/decrypt", content=b"SFL1garbage")
    httpx.post(server.url + "/v1/decrypt", content=b"x")  # no token
    text = httpx.get(server.url + "/metrics").text
    for name in (
        "sealflow_requests_total",
        "sealflow_request_duration_seconds_bucket",
        "sealflow_bytes_total",
        "sealflow_decryption_failures_total",
        "sealflow_auth_failures_total",
        "sealflow_cipher_context_events_total",
        "sealflow_buffer_pool_buffers",
        "sealflow_buffer_events_total",
        "sealflow_worker_queue_depth",
        "sealflow_requests_in_flight",
        "sealflow_provider_info",
    ):
        assert metric_lines(text, name), name
    assert any(
        'route="/v1/keys/{name}/encrypt"' in line and 'status="200"' in line
        for line in metric_lines(text, "sealflow_requests_total")
    )
    assert any(
        'algorithm="chacha20-poly1305"' in line and 'direction="in"' in line
        for line in metric_lines(text, "sealflow_bytes_total")
    )
    assert any('reason="malformed_envelope"' in line for line in text.splitlines())
    assert any('reason="missing"' in line for line in text.splitlines())
    events = metric_lines(text, "sealflow_cipher_context_events_total")
    assert any('strategy="lazy"' in line for line in events)
    # Label values come from fixed sets: no key names, tokens or paths with key names.
    labels = " ".join(re.findall(r"\{[^}]*\}", text))
    for secret in ("t-chacha", "default", server.token):
        assert secret not in labels


def test_metrics_export_the_provider_calibration(server: Server) -> None:
    """The choice and the figures it was made from: each provider's MB/s alone and with the
    crypto pool's threads together, per algorithm and size class."""
    text = httpx.get(server.url + "/metrics").text
    (threads,) = metric_lines(text, "sealflow_provider_calibration_threads ")
    assert float(threads.split()[-1]) >= 1
    figures = metric_lines(text, "sealflow_provider_calibration_bytes_per_second{")
    labels = {re.search(r"\{(.*)\}", line).group(1) for line in figures}  # type: ignore[union-attr]
    for alg in ("aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"):
        for provider in ("native", "cryptography"):
            for threads_label in ("one",):  # "pool" is left out where it could not win
                expected = (  # the exposition sorts labels by name
                    f'algorithm="{alg}",provider="{provider}",size_class="chunks",'
                    f'threads="{threads_label}"'
                )
                assert expected in labels
    assert all(float(line.split()[-1]) > 0 for line in figures)
    assert any('threads="pool"' in line for line in figures)


def test_request_logs_are_structured_and_hold_no_secrets(
    server: Server, client: httpx.Client
) -> None:
    marker = b"PLAINTEXT-MARKER-" + os.urandom(8).hex().encode()
    envelope = client.post("/v1/keys/default/encrypt", content=marker).content
    client.post("/v1/decrypt", content=envelope).raise_for_status()
    deadline = time.monotonic() + 10
    access = server.access()
    while not any(e.get("bytes_in") == len(marker) for e in access):
        assert time.monotonic() < deadline, "no access log line"  # lines are written in batches
        time.sleep(0.05)
        access = server.access()
    log = server.log.read_text()
    # This request's line (the server is shared by the session's tests: their lines are there
    # too, and a records encrypt names ``versions`` when it used several, none when it sealed
    # nothing).
    mine = [
        e
        for e in access
        if e.get("route") == "/v1/keys/{name}/encrypt" and e.get("bytes_in") == len(marker)
    ]
    assert mine
    ok = [e for e in mine if e["status"] == 200 and e.get("key") == "default"]
    assert ok, mine
    assert all(e.get("version", 0) >= 1 for e in ok), ok  # a single encrypt: one version
    assert marker.decode() not in log
    assert server.token not in log
    assert (server.data_dir / "master.key").read_text().strip() not in log


def test_two_workers_share_the_keystore_and_sum_metrics(make_server: MakeServer) -> None:
    srv = make_server(workers=2)
    with srv.client() as c:
        c.post("/v1/keys", json={"name": "shared"}).raise_for_status()
        for i in range(40):
            # New connections spread over both workers; each must know the new key.
            with srv.client() as fresh:
                env = fresh.post("/v1/keys/shared/encrypt", content=b"%d" % i)
                assert env.status_code == 200
                assert c.post("/v1/decrypt", content=env.content).content == b"%d" % i
        # Each worker folds its request counts into the shared files every second (the one
        # that serves the scrape at once): the sum reaches 40 within a couple of seconds.
        deadline = time.monotonic() + 10
        while (total := encrypts_counted(c.get("/metrics").text)) < 40:
            assert time.monotonic() < deadline, total
            time.sleep(0.2)
    assert total == 40


@pytest.mark.parametrize("workers", [1, 2])
def test_scraped_latency_histogram_is_whole(make_server: MakeServer, workers: int) -> None:
    """After n requests of a route, /metrics shows its histogram whole: every bound, cumulative
    counts that never go down, +Inf equal to _count and to the requests counted, a sum; under
    two workers too, summed from both (each publishes every second)."""
    srv = make_server(workers=workers)
    n = 24
    for i in range(n):
        with srv.client() as fresh:  # new connections: both workers take some
            fresh.post("/v1/keys/default/encrypt", content=b"%d" % i).raise_for_status()
    route = 'route="/v1/keys/{name}/encrypt"'
    deadline = time.monotonic() + 10
    while True:
        text = httpx.get(srv.url + "/metrics").text
        count = metric_lines(text, "sealflow_request_duration_seconds_count{")
        if any(route in line and float(line.split()[-1]) == n for line in count):
            break
        assert time.monotonic() < deadline, count
        time.sleep(0.2)
    buckets = re.findall(
        r'^sealflow_request_duration_seconds_bucket\{le="([^"]+)",'
        + re.escape(route)
        + r"\} (\S+)$",
        text,
        re.M,
    )
    assert [le for le, _ in buckets] == [
        *("0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5"),
        *("1.0", "2.5", "5.0", "10.0", "30.0", "+Inf"),
    ]
    counts = [float(value) for _, value in buckets]
    assert counts == sorted(counts)  # cumulative
    assert counts[-1] == n == encrypts_counted(text)
    (total,) = [
        line
        for line in metric_lines(text, "sealflow_request_duration_seconds_sum{")
        if route in line
    ]
    assert 0 < float(total.split()[-1]) < n * 30


def encrypts_counted(text: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metric_lines(text, "sealflow_requests_total")
        if 'route="/v1/keys/{name}/encrypt"' in line and 'status="200"' in line
    )


def test_tls(make_server: MakeServer, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    srv = make_server(tls_cert=cert, tls_key=key)
    with httpx.Client(
        base_url=f"https://localhost:{srv.port}", verify=ssl.create_default_context(cafile=cert)
    ) as c:
        headers = {"authorization": f"Bearer {srv.token}"}
        env = c.post("/v1/keys/default/encrypt", content=b"tls", headers=headers)
        assert env.status_code == 200
        assert c.post("/v1/decrypt", content=env.content, headers=headers).content == b"tls"
    plain = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    plain.request("GET", "/readyz")
    with pytest.raises(http.client.RemoteDisconnected):  # plain HTTP on the TLS port
        plain.getresponse()
    plain.close()


def self_signed(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
