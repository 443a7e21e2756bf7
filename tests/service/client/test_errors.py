"""Every exception class, from a real server's answer (or a real failure of the transport);
the token in no message or repr."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from io import FileIO
from pathlib import Path
from typing import Literal

import pytest

from sealflow import AsyncClient, Client
from sealflow.service.client import (
    DecryptionFailed,
    Forbidden,
    InputChanged,
    KeyNotFound,
    MalformedEnvelope,
    SealflowError,
    ServiceUnavailable,
    TooLarge,
    TransportError,
    Unauthorized,
    VersionRetired,
)
from sealflow.service.client._errors import ERRORS, error_from_reply
from tests.service.conftest import Server

MakeServer = Callable[..., Server]


def no_token_in(error: BaseException, token: str) -> None:
    for text in (str(error), repr(error), str(error.args)):
        assert token not in text


def test_bad_token_is_unauthorized(server: Server) -> None:
    bad = "not-a-valid-token-" + os.urandom(8).hex()
    with Client(server.url, bad) as api:
        with pytest.raises(Unauthorized) as caught:
            api.encrypt("default", os.urandom(3 << 20))  # refused before any upload
        assert (caught.value.status, caught.value.code) == (401, "unauthorized")
        no_token_in(caught.value, bad)
        assert bad not in repr(api)
    with Client(server.url, "") as api, pytest.raises(Unauthorized):
        api.list_keys()


def test_a_token_without_the_scope_is_forbidden(server: Server) -> None:
    token = server.cli("tokens", "create", "--scope", "encrypt:default").stdout.decode().strip()
    with Client(server.url, token) as api:
        envelope = api.encrypt("default", b"allowed")
        for call in (
            lambda: api.decrypt(envelope),  # no decrypt scope
            lambda: api.encrypt("t-aes128", b"x"),  # another key
            lambda: api.list_keys(),  # not admin
        ):
            with pytest.raises(Forbidden) as caught:
                call()
            assert (caught.value.status, caught.value.code) == (403, "forbidden")
            no_token_in(caught.value, token)


def test_unknown_key_and_version(api: Client, server: Server) -> None:
    with pytest.raises(KeyNotFound) as caught:
        api.encrypt("no-such-key", b"x")
    assert caught.value.status == 404
    assert "no-such-key" in caught.value.message
    with pytest.raises(KeyNotFound):
        api.get_key("no-such-key")
    envelope = bytearray(api.encrypt("default", b"x"))
    envelope[6:10] = (999).to_bytes(4, "big")  # a version the key does not have
    with pytest.raises(KeyNotFound):
        api.decrypt(bytes(envelope))
    no_token_in(caught.value, server.token)


def test_a_retired_version_after_patch(api: Client) -> None:
    name = "retire-" + os.urandom(3).hex()
    api.create_key(name)
    old = api.encrypt(name, b"sealed under v1")
    api.rotate_key(name)
    assert api.update_key(name, min_decryption_version=2).min_decryption_version == 2
    with pytest.raises(VersionRetired) as caught:
        api.decrypt(old)
    assert (caught.value.status, caught.value.code) == (403, "version_retired")
    assert api.decrypt(api.encrypt(name, b"v2")) == b"v2"


@pytest.mark.parametrize("mode", ["stream", "single"])
def test_a_tampered_envelope_fails_to_decrypt(
    api: Client, mode: Literal["stream", "single"]
) -> None:
    envelope = bytearray(api.encrypt("default", os.urandom(5000), mode=mode))
    envelope[-20] ^= 1
    with pytest.raises(DecryptionFailed) as caught:
        api.decrypt(bytes(envelope))
    assert (caught.value.status, caught.value.code) == (400, "decryption_failed")
    assert str(caught.value).startswith("400 decryption_failed: ")


def test_a_late_failure_in_a_large_stream_is_never_a_clean_end(api: Client) -> None:
    data = os.urandom(8 << 20)
    envelope = bytearray(api.encrypt("default", data))
    envelope[-20_000] ^= 1
    # Full duplex: the service sends the authenticated chunks, then cuts the response off,
    # naming the cause in-band first (docs/API.md, "Transports").
    got = bytearray()
    with pytest.raises(DecryptionFailed, match="decryption failed after") as caught:  # noqa: PT012
        for chunk in api.decrypt_stream(iter([bytes(envelope)])):
            got += chunk
    assert (caught.value.status, caught.value.code) == (None, "decryption_failed")
    assert data.startswith(got)
    # Into bytes (replayable input): an error either way, never a short plaintext.
    with pytest.raises((DecryptionFailed, TransportError)):
        api.decrypt(bytes(envelope))


def test_not_an_envelope_is_malformed(api: Client) -> None:
    with pytest.raises(MalformedEnvelope) as caught:
        api.decrypt(b"XXXX" + bytes(100))
    assert (caught.value.status, caught.value.code) == (400, "malformed_envelope")


def test_a_single_shot_body_over_the_limit_is_too_large(make_server: MakeServer) -> None:
    srv = make_server(max_single_bytes=4096)
    with Client(srv.url, srv.token) as api:
        with pytest.raises(TooLarge) as caught:
            api.encrypt("default", bytes(5000), mode="single")
        assert (caught.value.status, caught.value.code) == (413, "too_large")
        assert api.encrypt("default", bytes(4096))[4] == 2  # single-shot, as the client chose
        # Single-shot was the client's choice, not the caller's: once more in stream mode,
        # which has no limit.
        envelope = api.encrypt("default", bytes(5000))
        assert envelope[4] == 1
        assert api.decrypt(envelope) == bytes(5000)

    async def in_async() -> bytes:
        async with AsyncClient(srv.url, srv.token) as api:
            return await api.encrypt("default", bytes(5000))

    assert asyncio.run(in_async())[4] == 1


def test_overloaded_is_service_unavailable(make_server: MakeServer) -> None:
    srv = make_server(max_concurrent_requests=2, max_concurrent_per_token=2)
    slow = srv.stalled_encrypts(2)
    try:
        deadline = time.monotonic() + 10
        with Client(srv.url, srv.token) as api:
            refused: ServiceUnavailable | None = None
            while refused is None:
                assert time.monotonic() < deadline, "the two slow requests never counted"
                try:
                    api.encrypt("default", b"y")
                except ServiceUnavailable as e:
                    refused = e
                time.sleep(0.05)
            assert (refused.status, refused.code) == (503, "overloaded")
    finally:
        for sock in slow:
            sock.close()


def test_other_codes_are_the_base_class(api: Client) -> None:
    with pytest.raises(SealflowError) as caught:
        api.export_key("default")  # not created exportable
    assert type(caught.value) is SealflowError
    assert (caught.value.status, caught.value.code) == (403, "not_exportable")
    with pytest.raises(SealflowError) as caught:
        api.encrypt("default", b"x", aad=bytes(9000))  # over 8 KiB of AAD
    assert (caught.value.status, caught.value.code) == (400, "bad_request")


def test_the_table_and_answers_that_are_not_the_services_json() -> None:
    assert set(ERRORS) >= {"unauthorized", "forbidden", "spool_full", "too_many_requests"}
    assert ERRORS["insufficient_storage"] is ServiceUnavailable
    e = error_from_reply(429, b'{"error": {"code": "too_many_requests", "message": "slow"}}')
    assert (type(e), e.status, str(e)) == (ServiceUnavailable, 429, "429 too_many_requests: slow")
    for body in (b"<h1>Bad Gateway</h1>", b'{"error": "x"}', b"[1]", b"\xff", b""):
        e = error_from_reply(502, body)
        assert (type(e), e.status, e.code, str(e)) == (SealflowError, 502, None, "HTTP 502")


def test_unreachable_service_is_a_transport_error() -> None:
    with socket.socket() as sock:  # a port that was just free: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}", "secret-token") as api:
        with pytest.raises(TransportError, match=r"^cannot connect to http://127\.0\.0\.1:") as c:
            api.encrypt("default", b"x")
        assert c.value.status is None
        no_token_in(c.value, "secret-token")


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for sock in [listener, *accepted]:
            sock.close()


def test_no_progress_for_timeout_seconds_is_a_transport_error(silent_server: int) -> None:
    api = Client(f"http://127.0.0.1:{silent_server}", "t", timeout=0.3)
    with api, pytest.raises(TransportError, match=r"^no progress for 0\.3 s before a response"):
        api.list_keys()


def test_a_file_that_changes_size_while_sent(api: Client, tmp_path: Path) -> None:
    class Growing(FileIO):
        def read(self, size: int | None = -1, /) -> bytes:
            with open(self.name, "ab") as more:
                more.write(b"appended meanwhile")
            return super().read(size) or b""

    (tmp_path / "log").write_bytes(os.urandom(1000))
    with Growing(tmp_path / "log") as f, pytest.raises(InputChanged):
        api.encrypt("default", f)
    assert api.decrypt(api.encrypt("default", b"still fine")) == b"still fine"


def test_the_inputs_own_exception_passes_through(api: Client) -> None:
    def failing() -> Iterator[bytes]:
        yield b"first"
        raise ZeroDivisionError("the producer broke")

    with pytest.raises(ZeroDivisionError, match="the producer broke"):
        api.encrypt("default", failing())
    with pytest.raises(TypeError, match="encode the text"):
        api.encrypt("default", "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes-like objects, not int"):  # not bytes(97) zeros
        api.encrypt("default", iter(b"abc"))  # type: ignore[arg-type]


def test_a_token_unfit_for_a_header_is_refused_without_echoing_it(server: Server) -> None:
    with pytest.raises(ValueError, match="characters not allowed") as caught:
        Client(server.url, "abc\x01secret")
    assert "secret" not in str(caught.value)
