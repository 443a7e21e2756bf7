"""The ``sealflow encrypt`` / ``decrypt`` client against a fake service on loopback.

The fake is a raw ASGI app under a real uvicorn, so the client meets real HTTP/1.1 framing,
100 Continue, a streamed response and a connection that dies mid-body. Its "encryption" is
a byte-wise XOR (its own inverse), streamed back while the request body is still arriving,
as the real service does.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import socket
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import uvicorn

from sealflow.service.cli import _transfer
from sealflow.service.client import _duplex as client_duplex
from sealflow.service.client._source import CHUNK

TOKEN = "tok-3f1c9a-not-a-real-token"  # noqa: S105 (a test token)
XOR = bytes(b ^ 0x5A for b in range(256))


def _header(scope: dict[str, Any], name: bytes) -> bytes | None:
    return dict(scope["headers"]).get(name)


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Key ``denied`` answers 403 before reading the body, ``broken`` answers 500 in plain
    text, ``abort`` dies after half its output; any other key XORs the body through."""
    assert scope["type"] == "http"
    FakeService.requests.append(scope)
    path: str = scope["raw_path"].decode()
    if "/denied/" in path:
        error = {"error": {"code": "forbidden", "message": "token lacks encrypt:denied"}}
        body = json.dumps(error).encode()
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"application/json")]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})
        return
    if "/stalled/" in path:
        await receive()  # the first piece; then fail while the client waits on its input
        assert FakeService.stalled is not None
        await asyncio.to_thread(FakeService.stalled.blocked.wait)
        error = {"error": {"code": "key_not_found", "message": "no key named 'stalled'"}}
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(error).encode()})
        return
    if "/broken/" in path:
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"Internal Server Error\n\x1b[2J"})
        return
    # The real service sends Content-Length whenever the request had one (SPEC 4).
    length = _header(scope, b"content-length")
    headers = [(b"content-length", length)] if length is not None else []
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    sent, more = 0, True
    while more:
        message = await receive()
        more = message.get("more_body", False)
        data = message.get("body", b"").translate(XOR)
        if "/abort/" in path and sent + len(data) >= int(length or 1 << 20) // 2:
            data = data[: int(length or 1 << 20) // 2 - sent]
            more = False  # return with the response incomplete: uvicorn drops the connection
        sent += len(data)
        await send({"type": "http.response.body", "body": data, "more_body": True})
    if "/abort/" not in path:
        await send({"type": "http.response.body", "body": b""})


class StalledPipe:
    """A producer that wrote a little and then stalls: the second read blocks until release."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.write(self.w, b"first piece")
        self.blocked, self.returned, self.reads = threading.Event(), threading.Event(), 0

    def fileno(self) -> int:
        return self.r

    def read1(self, size: int) -> bytes:
        self.reads += 1
        if self.reads > 1:
            self.blocked.set()
        try:
            return os.read(self.r, size)
        finally:
            if self.reads > 1:
                self.returned.set()

    read = read1  # a file object has both (the command passes stdin to the client as it is)

    def release(self) -> None:
        os.close(self.w)
        self.returned.wait()  # the client's reader thread is off the descriptor
        os.close(self.r)


class FakeService:
    requests: ClassVar[list[dict[str, Any]]] = []  # ASGI scopes seen, newest last
    stalled: ClassVar[StalledPipe | None] = None

    def __init__(self) -> None:
        # log_config=None: uvicorn's "returned without completing" error goes to pytest's
        # log capture, not to the stderr the tests inspect.
        config = uvicorn.Config(_app, host="127.0.0.1", port=0, lifespan="off", log_config=None)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="fake-sealflow")
        self.thread.start()
        while not self.server.started:
            assert self.thread.is_alive(), "the fake service failed to start"
            self.thread.join(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join()


@pytest.fixture(scope="module")
def fake_module() -> Iterator[FakeService]:
    fake = FakeService()
    yield fake
    fake.stop()


@pytest.fixture
def fake(fake_module: FakeService, monkeypatch: pytest.MonkeyPatch) -> FakeService:
    FakeService.requests.clear()
    monkeypatch.setenv("SEALFLOW_TOKEN", TOKEN)
    monkeypatch.setenv("SEALFLOW_URL", fake_module.url)
    return fake_module


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="sealflow")
    _transfer.add_client_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def stdin_from(monkeypatch: pytest.MonkeyPatch, stream: Any) -> None:
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=stream))


def stdout_to(monkeypatch: pytest.MonkeyPatch, stream: Any) -> None:
    monkeypatch.setattr(sys, "stdout", types.SimpleNamespace(buffer=stream))


def header(name: bytes, index: int = -1) -> bytes | None:
    return _header(FakeService.requests[index], name)


def test_encrypt_file_to_output(
    fake: FakeService, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = os.urandom(3 * CHUNK + 17)
    (tmp_path / "in").write_bytes(data)
    aad = "naïve ☃ context"
    code = run("encrypt", "--key", "orders", "--aad", aad, "-i", str(tmp_path / "in"),
               "-o", str(tmp_path / "out"))  # fmt: skip
    assert code == 0
    assert (tmp_path / "out").read_bytes() == data.translate(XOR)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]  # no temp file left
    scope = FakeService.requests[-1]
    assert scope["raw_path"] == b"/v1/keys/orders/encrypt"
    assert scope["query_string"] == b"mode=stream"
    assert header(b"authorization") == f"Bearer {TOKEN}".encode()
    assert header(b"x-aad") == base64.b64encode(aad.encode())
    assert header(b"content-length") == str(len(data)).encode()
    assert header(b"transfer-encoding") is None
    assert capsys.readouterr() == ("", "")  # no progress bar: stderr is not a terminal


def test_decrypt_round_trip_through_pipes(
    fake: FakeService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = os.urandom(40_000)  # below a pipe's capacity, so no writer thread is needed
    read_end, write_end = os.pipe()
    os.write(write_end, data.translate(XOR))
    os.close(write_end)
    with open(read_end, "rb") as pipe, open(tmp_path / "plain", "wb") as out:
        stdin_from(monkeypatch, pipe)
        stdout_to(monkeypatch, out)
        assert run("decrypt") == 0
    assert (tmp_path / "plain").read_bytes() == data
    assert FakeService.requests[-1]["raw_path"] == b"/v1/decrypt"
    assert header(b"transfer-encoding") == b"chunked"  # a pipe's size is unknown
    assert header(b"content-length") is None
    assert header(b"x-aad") is None


def test_decrypt_with_key_and_url_flag(
    fake: FakeService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SEALFLOW_URL", "http://127.0.0.1:1")  # --url wins over it
    stdin_from(monkeypatch, io.BytesIO(b"\x00\x01secret"))  # no file descriptor at all
    out = tmp_path / "plain"
    assert run("decrypt", "--key", "a/b", "--url", fake.url + "/", "-o", str(out)) == 0
    assert out.read_bytes() == b"\x00\x01secret".translate(XOR)
    assert FakeService.requests[-1]["raw_path"] == b"/v1/keys/a%2Fb/decrypt"
    assert header(b"transfer-encoding") == b"chunked"


def test_single_mode_and_empty_input(fake: FakeService, tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    out = tmp_path / "out"
    assert run("encrypt", "--key", "k", "--mode", "single", "-i", str(tmp_path / "empty"),
               "-o", str(out)) == 0  # fmt: skip
    assert out.read_bytes() == b""
    assert FakeService.requests[-1]["query_string"] == b"mode=single"


def test_large_body_streams_both_ways_at_once(fake: FakeService, tmp_path: Path) -> None:
    # The fake answers while it reads, as the service does: a client that sent the whole
    # body before reading (httpx) would deadlock here once the socket buffers fill.
    data = os.urandom(1 << 20) * 48
    (tmp_path / "in").write_bytes(data)
    out = tmp_path / "out"
    assert run("encrypt", "--key", "k", "-i", str(tmp_path / "in"), "-o", str(out)) == 0
    assert out.read_bytes() == data.translate(XOR)


@pytest.mark.parametrize("existing", [None, b"previous content"])
def test_server_error_leaves_output_alone(
    fake: FakeService,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    existing: bytes | None,
) -> None:
    # Deterministic: the client waits for 100 Continue, which never comes, so it never
    # sends the 16 MiB the server would not read (and whose RST could beat the 403).
    monkeypatch.setattr(client_duplex, "EXPECT_WAIT", 3600.0)
    (tmp_path / "in").write_bytes(os.urandom(16 << 20))
    out = tmp_path / "out"
    if existing is not None:
        out.write_bytes(existing)
    assert run("encrypt", "--key", "denied", "-i", str(tmp_path / "in"), "-o", str(out)) == 1
    err = capsys.readouterr().err
    assert err == "sealflow: encrypt failed: 403 forbidden: token lacks encrypt:denied\n"
    assert TOKEN not in err
    if existing is None:
        assert not out.exists()
    else:
        assert out.read_bytes() == existing
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in"] + ["out"] * bool(existing))


def test_failure_while_the_input_stalls(
    fake: FakeService, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The service fails the request while the client waits on a pipe whose producer has
    # stalled (`tail -f log | sealflow encrypt`): the client must report and exit now, not
    # when the producer next writes (asyncio's executor would join the blocked reader).
    FakeService.stalled = pipe = StalledPipe()
    stdin_from(monkeypatch, pipe)
    stdout_to(monkeypatch, io.BytesIO())
    try:
        assert run("encrypt", "--key", "stalled") == 1
    finally:
        pipe.release()
        FakeService.stalled = None
    err = capsys.readouterr().err
    assert err == "sealflow: encrypt failed: 404 key_not_found: no key named 'stalled'\n"
    assert header(b"transfer-encoding") == b"chunked"


class FailingInput(io.BytesIO):
    def read1(self, size: int | None = -1, /) -> bytes:
        raise OSError(5, "Input/output error")


class GrowingFile(io.FileIO):
    """A regular file that grows once its size has been taken (a log being written)."""

    def read(self, size: int | None = -1, /) -> bytes:
        with open(self.name, "ab") as more:
            more.write(b"appended meanwhile")
        return super().read(size) or b""


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (lambda path: FailingInput(b""), "cannot read the input: [Errno 5] Input/output error"),
        (GrowingFile, "the input changed size while it was being sent"),
    ],
    ids=["read-error", "grew"],
)
def test_input_failure_is_reported(
    fake: FakeService,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    source: Any,
    message: str,
) -> None:
    (tmp_path / "in").write_bytes(os.urandom(1000))
    with source(str(tmp_path / "in")) as stream:
        stdin_from(monkeypatch, stream)
        assert run("encrypt", "--key", "k", "-o", str(tmp_path / "out")) == 1
    assert capsys.readouterr().err == f"sealflow: encrypt failed: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_non_json_error_is_reported_by_status(
    fake: FakeService, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin_from(monkeypatch, io.BytesIO(b"x"))
    stdout_to(monkeypatch, io.BytesIO())
    assert run("decrypt", "--key", "broken") == 1
    assert capsys.readouterr().err == "sealflow: decrypt failed: HTTP 500\n"


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_aborted_stream_is_a_failure(
    fake: FakeService,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    framing: str,
) -> None:
    data = os.urandom(4 * CHUNK)
    if framing == "chunked":
        stdin_from(monkeypatch, io.BytesIO(data))
        source = []
    else:
        (tmp_path / "in").write_bytes(data)
        source = ["-i", str(tmp_path / "in")]
    assert run("decrypt", "--key", "abort", *source, "-o", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert err.startswith("sealflow: decrypt failed: connection lost after ")
    # No signal from the service (or a proxy dropped it): both possibilities, truthfully.
    assert "or a later part of the input failed to decrypt" in err
    assert err.count("\n") == 1
    assert TOKEN not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"] * (framing != "chunked")
    assert header(b"transfer-encoding") == (b"chunked" if framing == "chunked" else None)


@pytest.mark.parametrize("mode", ["wb", "ab"])
def test_failure_truncates_stdout_file(
    fake: FakeService,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    (tmp_path / "in").write_bytes(os.urandom(4 * CHUNK))
    (tmp_path / "out").write_bytes(b"earlier lines\n")
    with open(tmp_path / "out", mode) as out:  # `> out` or `>> out`
        stdout_to(monkeypatch, out)
        assert run("decrypt", "--key", "abort", "-i", str(tmp_path / "in")) == 1
    # Half the plaintext went out before the abort; none of it may remain.
    assert (tmp_path / "out").read_bytes() == (b"earlier lines\n" if mode == "ab" else b"")
    assert "connection lost" in capsys.readouterr().err


def test_missing_token_is_a_usage_error(
    fake: FakeService,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SEALFLOW_TOKEN")
    assert run("encrypt", "--key", "k", "-o", str(tmp_path / "out")) == 2
    assert "SEALFLOW_TOKEN is not set" in capsys.readouterr().err
    assert FakeService.requests == []
    assert list(tmp_path.iterdir()) == []


def test_token_unfit_for_a_header_is_refused_without_echoing_it(
    fake: FakeService, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEALFLOW_TOKEN", "abc\x01def")
    assert run("decrypt") == 2
    err = capsys.readouterr().err
    assert "SEALFLOW_TOKEN" in err
    assert "abc" not in err
    assert FakeService.requests == []


def test_missing_input_is_a_usage_error(
    fake: FakeService, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run("encrypt", "--key", "k", "-i", str(tmp_path / "nope"), "-o", str(tmp_path / "o"))
    assert code == 2
    assert "No such file or directory" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_unreachable_service(
    fake: FakeService,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as sock:  # a port that was just free: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("SEALFLOW_URL", f"http://127.0.0.1:{port}")
    stdin_from(monkeypatch, io.BytesIO(b"x"))
    assert run("decrypt", "-o", str(tmp_path / "out")) == 1
    assert capsys.readouterr().err.startswith("sealflow: decrypt failed: cannot connect to ")
    assert list(tmp_path.iterdir()) == []


def test_progress_bar_only_on_a_terminal(
    fake: FakeService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(_transfer, "_BAR_DELAY", 0)
    (tmp_path / "in").write_bytes(os.urandom(2 << 20))
    assert run("encrypt", "--key", "k", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "o")) == 0
    assert "100%" in terminal.getvalue()
    assert "2.00M" in terminal.getvalue()
