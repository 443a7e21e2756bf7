"""How the client moves bytes: one connection for many calls, progress, Expect, the full-duplex
header and the fallback when a proxy cannot carry it, TLS, threads, early exits."""

from __future__ import annotations

import asyncio
import errno
import io
import os
import ssl
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from sealflow import AsyncClient, Client
from sealflow.service.client import (
    InputChanged,
    KeyNotFound,
    SealflowError,
    TransportError,
)
from sealflow.service.client import _duplex as client_duplex
from sealflow.service.client._plan import SMALL_MAX
from tests.service.client.proxy import proxy
from tests.service.conftest import Server
from tests.service.server.test_operations import self_signed

MakeServer = Callable[..., Server]


def test_many_small_calls_share_one_connection(server: Server) -> None:
    with proxy(server.port) as p, Client(p.url, server.token) as api:
        for i in range(50):
            data = os.urandom(i * 37)
            assert api.decrypt(api.encrypt("default", data)) == data
        api.list_keys()
        with pytest.raises(KeyNotFound):  # an error answer keeps the connection too
            api.get_key("no-such-key")
        api.get_key("default")
        assert p.accepted == 1
        assert api.connections_opened == 1


def test_calls_from_threads_at_once_each_get_a_connection(server: Server) -> None:
    failures: list[BaseException] = []
    with proxy(server.port) as p, Client(p.url, server.token) as api:

        def work() -> None:
            try:
                for _ in range(10):
                    data = os.urandom(5000)
                    assert api.decrypt(api.encrypt("default", data)) == data
            except BaseException as e:
                failures.append(e)

        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        assert 1 <= p.accepted <= 6  # reused, never more than the calls in flight


def test_progress_counts_body_bytes_both_ways(api: Client, tmp_path: Path) -> None:
    data = os.urandom(5 << 20)
    seen: list[tuple[int, int]] = []
    envelope = api.encrypt("default", data, on_progress=lambda s, r: seen.append((s, r)))
    assert seen[-1] == (len(data), len(envelope))
    assert seen == sorted(seen)  # both counts only grow
    (tmp_path / "sealed").write_bytes(envelope)
    seen.clear()
    with open(tmp_path / "sealed", "rb") as f, open(tmp_path / "plain", "wb") as out:
        api.decrypt(f, out=out, on_progress=lambda s, r: seen.append((s, r)))
    assert seen[-1] == (len(envelope), len(data))


def test_a_refused_large_upload_sends_no_body(api: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # Deterministic: wait for 100 Continue for ever; the refusal comes instead.
    monkeypatch.setattr(client_duplex, "EXPECT_WAIT", 3600.0)
    seen: list[tuple[int, int]] = []
    with pytest.raises(KeyNotFound):
        api.encrypt("no-such-key", bytes(16 << 20), on_progress=lambda s, r: seen.append((s, r)))
    assert seen == []


def test_expect_duplex_and_mode_headers(server: Server) -> None:
    calls: list[tuple[Callable[[Client], object], bool]] = [
        (lambda api: api.encrypt("default", bytes(100)), True),
        (lambda api: api.encrypt("default", bytes(100), mode="stream"), True),
        (lambda api: api.decrypt(api.encrypt("default", bytes(SMALL_MAX))), True),
        (lambda api: api.encrypt("default", iter([bytes(100)])), True),
        (lambda api: api.list_keys(), True),
        (lambda api: api.encrypt("default", bytes(SMALL_MAX + 1)), True),
        (lambda api: api.encrypt("default", bytes(2 << 20)), False),
    ]
    with proxy(server.port) as p:
        for call, duplex in calls:
            with Client(p.url, server.token, duplex=duplex) as api:
                call(api)
    small, small_stream, largest_small, chunked, admin, not_small, large = (
        head.lower() for head in p.heads
    )
    assert small.startswith(b"post /v1/keys/default/encrypt?mode=single http/1.1\r\n")
    assert b"content-length: 100\r\n" in small
    assert b"sealflow-duplex" not in small  # small known-size bodies: no full duplex,
    assert b"expect" not in small  # and no Expect: they go at once, with the head
    assert small_stream.startswith(b"post /v1/keys/default/encrypt?mode=stream ")
    assert b"sealflow-duplex" not in small_stream
    assert largest_small.startswith(b"post /v1/keys/default/encrypt?mode=single ")
    assert b"sealflow-duplex" not in largest_small
    assert chunked.startswith(b"post /v1/keys/default/encrypt?mode=stream ")
    assert b"\r\ntransfer-encoding: chunked\r\n" in chunked
    assert b"\r\nexpect: 100-continue\r\n" in chunked
    assert b"\r\nsealflow-duplex: 1\r\n" in chunked
    assert b"sealflow-duplex" not in admin
    assert b"content-length" not in admin  # a GET without a body
    assert not_small.startswith(b"post /v1/keys/default/encrypt?mode=stream ")
    assert b"\r\nsealflow-duplex: 1\r\n" in not_small
    assert b"expect" not in not_small  # up to 1 MiB
    assert b"sealflow-duplex" not in large  # duplex=False
    assert b"\r\nexpect: 100-continue\r\n" in large


@pytest.mark.parametrize("mode", ["cut", "502"])
def test_a_proxy_that_cannot_carry_full_duplex_gets_a_retry_without_it(
    server: Server, tmp_path: Path, mode: str
) -> None:
    data = os.urandom(8 << 20)
    (tmp_path / "plain").write_bytes(data)
    with proxy(server.port, mode) as p, Client(p.url, server.token) as api:
        envelope = api.encrypt("default", data)  # bytes: replayable
        with open(tmp_path / "plain", "rb") as f:  # a seekable file: replayable
            envelope2 = api.encrypt("default", f)
        assert api.decrypt(envelope) == api.decrypt(envelope2) == data
        duplex = [b"sealflow-duplex: 1" in h.lower() for h in p.heads]
        assert duplex[:2] == [True, False]  # each call: once with the header, once without
    # The proxy reads the first head of a connection only: a new client for a new one.
    with proxy(server.port, mode) as p, Client(p.url, server.token) as api:
        with pytest.raises(SealflowError) as caught:  # an iterator cannot be sent again
            api.encrypt("default", iter([data]))
        assert len(p.heads) == 1
        assert isinstance(caught.value, TransportError) or caught.value.status == 502


def test_the_services_own_error_is_not_retried(server: Server) -> None:
    with proxy(server.port) as p, Client(p.url, server.token) as api:
        with pytest.raises(KeyNotFound):
            api.encrypt("no-such-key", bytes(8 << 20))
        assert len(p.heads) == 1


def test_without_full_duplex_the_answer_still_streams(server: Server) -> None:
    data = os.urandom(16 << 20)
    with Client(server.url, server.token, duplex=False) as api:
        assert api.decrypt(api.encrypt("default", data)) == data


def test_tls(make_server: MakeServer, tmp_path: Path, sendfile_calls: list[int]) -> None:
    cert, key = self_signed(tmp_path)
    srv = make_server(tls_cert=cert, tls_key=key)
    url = f"https://localhost:{srv.port}"
    data = os.urandom(8 << 20)
    (tmp_path / "plain").write_bytes(data)
    with Client(url, srv.token, verify=str(cert)) as api:
        assert api.decrypt(api.encrypt("default", data)) == data
        with open(tmp_path / "plain", "rb") as f:  # read and encrypted, never by sendfile
            assert api.decrypt(api.encrypt("default", f)) == data
        assert sendfile_calls == []
        for _ in range(5):
            api.list_keys()
        # One for the event loop's calls, one for the small calls (on the caller's thread).
        assert api.connections_opened == 2
    context = ssl.create_default_context(cafile=cert)
    with Client(url, srv.token, verify=context) as api:
        assert api.decrypt(api.encrypt("default", b"x", mode="single")) == b"x"
    untrusted = Client(url, srv.token)  # the system's CAs do not know this certificate
    with untrusted, pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
        untrusted.list_keys()
    plain = Client(f"http://localhost:{srv.port}", srv.token)  # plain HTTP on the TLS port
    with plain, pytest.raises(TransportError):
        plain.list_keys()


@pytest.fixture
def sendfile_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The byte counts of this test's os.sendfile calls (asyncio's sock_sendfile makes them)."""
    calls: list[int] = []
    real = os.sendfile

    def counting(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        calls.append(count)
        return real(out_fd, in_fd, offset, count)

    monkeypatch.setattr(os, "sendfile", counting)
    return calls


def test_a_regular_file_goes_by_sendfile(
    api: Client, tmp_path: Path, sendfile_calls: list[int]
) -> None:
    data = os.urandom((5 << 20) + 123)
    (tmp_path / "plain").write_bytes(data)
    seen: list[tuple[int, int]] = []
    with open(tmp_path / "plain", "rb") as f:
        f.read(100)  # the upload starts where the file is
        envelope = api.encrypt("default", f, on_progress=lambda s, r: seen.append((s, r)))
        assert f.tell() == len(data)  # read to the end, as by read()
        assert f.read() == b""
    assert sendfile_calls
    assert api.decrypt(envelope) == data[100:]
    assert seen[-1] == (len(data) - 100, len(envelope))
    assert seen == sorted(seen)


def test_small_files_and_file_like_objects_are_read(
    api: Client, tmp_path: Path, sendfile_calls: list[int]
) -> None:
    (tmp_path / "small").write_bytes(b"small")
    with open(tmp_path / "small", "rb") as f:
        assert api.decrypt(api.encrypt("default", f)) == b"small"

    class Upper(io.FileIO):  # read() is not the descriptor's bytes: must be called
        def read(self, size: int | None = -1, /) -> bytes:
            return (super().read(size) or b"").upper()

    (tmp_path / "big").write_bytes(b"abc" * (1 << 20))
    with Upper(tmp_path / "big") as upper:
        assert api.decrypt(api.encrypt("default", upper)) == b"ABC" * (1 << 20)
    assert sendfile_calls == []


@pytest.mark.parametrize("change", ["shrinks", "grows"])
def test_a_file_that_changes_size_during_sendfile(
    api: Client, tmp_path: Path, sendfile_calls: list[int], change: str
) -> None:
    path = tmp_path / "plain"
    path.write_bytes(os.urandom(8 << 20))

    def meanwhile(sent: int, received: int) -> None:
        if sent == 1 << 20:  # after the first 1 MiB
            if change == "shrinks":
                os.truncate(path, 2 << 20)
            else:
                with open(path, "ab") as more:
                    more.write(b"appended meanwhile")

    with open(path, "rb") as f, pytest.raises(InputChanged):
        api.encrypt("default", f, on_progress=meanwhile)
    assert sendfile_calls
    assert api.decrypt(api.encrypt("default", b"still fine")) == b"still fine"


def test_without_sendfile_the_file_is_read(
    api: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    real = os.sendfile

    def refusing(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        if len(sent) == 2:  # a file system without it would refuse the first call
            raise OSError(errno.EINVAL, "Invalid argument")
        sent.append(real(out_fd, in_fd, offset, count))
        return sent[-1]

    monkeypatch.setattr(os, "sendfile", refusing)
    data = os.urandom(5 << 20)
    (tmp_path / "plain").write_bytes(data)
    with open(tmp_path / "plain", "rb") as f:
        assert api.decrypt(api.encrypt("default", f)) == data
    assert sum(sent) == 2 << 20  # two slices went by sendfile, the rest was read


def test_a_refusal_during_sendfile(
    api: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sendfile_calls: list[int]
) -> None:
    monkeypatch.setattr(client_duplex, "EXPECT_WAIT", 0.0)  # the body goes before the answer
    (tmp_path / "plain").write_bytes(os.urandom(64 << 20))
    # The server refuses from the head, so its 404 can arrive before the upload starts; try
    # until one refusal came while sendfile was sending (every try must end in the refusal).
    # The first try or the second usually does; on a loaded machine the answer beat the
    # upload ten times running once.
    for _ in range(50):
        with open(tmp_path / "plain", "rb") as f, pytest.raises(SealflowError) as caught:
            api.encrypt("no-such-key", f)
        # The 404, or the connection reset by the server that stopped reading (either way the
        # call ends instead of sending the rest).
        assert isinstance(caught.value, (KeyNotFound, TransportError))
        if sendfile_calls:
            break
    assert sendfile_calls
    assert api.decrypt(api.encrypt("default", b"still fine")) == b"still fine"


def test_a_consumer_that_stops_early_leaves_a_working_client(server: Server) -> None:
    data = os.urandom(8 << 20)
    with proxy(server.port) as p, Client(p.url, server.token) as api:
        stream = api.encrypt_stream("default", data)
        next(stream)
        stream.close()  # the rest is never read: that connection is dropped
        assert api.decrypt(api.encrypt("default", b"after")) == b"after"
        assert p.accepted == 2


def test_a_cancelled_async_call_closes_its_connection(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, server.token) as api:
            call = asyncio.create_task(api.encrypt("default", slow_pieces()))
            await asyncio.sleep(0.2)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert await api.decrypt(await api.encrypt("default", b"next")) == b"next"
            assert api.connections_opened == 2

    async def slow_pieces() -> AsyncIterator[bytes]:
        while True:
            yield b"x" * 1000
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert threading.active_count() < 20  # no reader thread per call left behind


def test_a_kept_alive_connection_closed_by_the_server_is_replaced(server: Server) -> None:
    with proxy(server.port) as p, Client(p.url, server.token) as api:
        api.list_keys()
        p.close_connections()
        assert api.decrypt(api.encrypt("default", b"again")) == b"again"
        assert p.accepted == 2


def test_a_closed_client_refuses_calls(server: Server) -> None:
    api = Client(server.url, server.token)
    api.close()
    api.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        api.list_keys()
