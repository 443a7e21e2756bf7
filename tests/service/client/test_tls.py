"""Every kind of input over TLS, in both clients, full duplex and request-then-response.

asyncio's TLS transport (and uvloop's) told the client to pause after a write that had gone
out whole, and said nothing more until its next event; the client waited for it to resume.
Bodies the server answers as they arrive (bytes, files: 1 MiB pieces) got that event from the
answer, but a pipe's or an iterator's small chunks in full duplex, and any body over 64 KiB
sent request-then-response, waited for a server that was waiting for the rest of the body.
Each case here runs several times: a hang shows as the client's ``TransportError`` after
``TIMEOUT`` seconds without progress, not as a test that never ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from sealflow import AsyncClient, Client
from tests.service.conftest import Server

TIMEOUT = 20.0  # seconds without any progress before a call fails (a hang, not slowness)
ROUNDS = 3
# Empty, a pipe's worth, over the 64 KiB of a small call, and several 1 MiB reads.
SIZES = [0, 3, 65_536, 200_000, (3 << 20) + 5]
PIECE = 16 << 10  # what the iterators yield at a time
KINDS = ["bytes", "file", "pipe", "iterator", "async iterator"]

Inputs = Callable[[bytes], contextlib.AbstractContextManager[Any]]


def _pieces(data: bytes) -> Iterator[bytes]:
    for start in range(0, len(data), PIECE):
        yield data[start : start + PIECE]


async def _async_pieces(data: bytes) -> AsyncIterator[bytes]:
    for piece in _pieces(data):
        await asyncio.sleep(0)
        yield piece


@contextlib.contextmanager
def _pipe(data: bytes) -> Iterator[Any]:
    """The read end of a real pipe that a thread fills with ``data`` and then closes."""
    read_end, write_end = os.pipe()

    def fill() -> None:
        with contextlib.suppress(BrokenPipeError), open(write_end, "wb") as w:
            w.write(data)

    writer = threading.Thread(target=fill, daemon=True)
    writer.start()
    with open(read_end, "rb") as r:  # as sys.stdin.buffer: read1 gives what the pipe has
        yield r
    writer.join()  # the reader's end is closed: a writer still blocked gets EPIPE


@pytest.fixture
def as_input(tmp_path: Path, kind: str) -> Inputs:
    """``as_input(data)``: a context manager giving ``data`` as this test's kind of input."""
    counter = iter(range(1 << 30))

    @contextlib.contextmanager
    def make(data: bytes) -> Iterator[Any]:
        if kind == "bytes":
            yield data
        elif kind == "file":
            path = tmp_path / f"in{next(counter)}"
            path.write_bytes(data)
            with open(path, "rb") as f:
                yield f
        elif kind == "pipe":
            with _pipe(data) as r:
                yield r
        elif kind == "iterator":
            yield _pieces(data)
        else:
            yield _async_pieces(data)

    return make


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("duplex", [True, False], ids=["duplex", "request-then-response"])
def test_client_sends_every_input_kind_over_tls(
    tls_server: Server, as_input: Inputs, duplex: bool
) -> None:
    assert tls_server.cert is not None
    with Client(
        tls_server.https_url, tls_server.token, verify=tls_server.cert, timeout=TIMEOUT,
        duplex=duplex,
    ) as api:  # fmt: skip
        for _ in range(ROUNDS):
            for size in SIZES:
                data = os.urandom(size)
                with as_input(data) as plain:
                    envelope = api.encrypt("default", plain)
                with as_input(envelope) as sealed:
                    assert api.decrypt(sealed) == data


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("duplex", [True, False], ids=["duplex", "request-then-response"])
def test_async_client_sends_every_input_kind_over_tls(
    tls_server: Server, as_input: Inputs, duplex: bool, loop: str
) -> None:
    cert = tls_server.cert
    assert cert is not None

    async def main() -> None:
        async with AsyncClient(
            tls_server.https_url, tls_server.token, verify=cert, timeout=TIMEOUT,
            duplex=duplex,
        ) as api:  # fmt: skip
            for _ in range(ROUNDS):
                for size in SIZES:
                    data = os.urandom(size)
                    with as_input(data) as plain:
                        envelope = await api.encrypt("default", plain)
                    with as_input(envelope) as sealed:
                        assert await api.decrypt(sealed) == data

    factory = uvloop.new_event_loop if loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
