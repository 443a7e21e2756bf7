"""The HTTP clients of the matrix, each behind one signature: POST a file, save the reply.

Every client is a real one, used the way its users use it (bytes, generators, files,
subprocesses for curl and Node), so what the matrix finds is what they would find. Each
``post`` sends the file at ``src`` to ``url`` and writes the response body to ``dst`` as it
arrives (the tests hold no second copy of a large body), and returns a ``Reply``:

- a body the server cut off (a short ``Content-Length`` body, a chunked one without its last
  chunk, a connection reset once the reply started) is ``complete=False``, with the client's
  own error in ``error``;
- anything else the client raises is raised: a stall ends in the client's timeout (``STALL``
  seconds without a byte moving), a refused connection in its connection error.

Half-duplex clients (httpx, requests, urllib, http.client) send the whole body before they
read anything; duplex-capable ones (aiohttp with an async generator, curl, Node's fetch) read
while they send, so only they can take part in full duplex (``Sealflow-Duplex: 1``).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import aiohttp
import httpx
import requests

# Seconds without a byte moving before a client gives up. Far beyond any pause of a working
# transfer on loopback, and below the server's own 30 s (SEALFLOW_RECEIVE_TIMEOUT): a stall
# ends in the client's timeout, not in the server dropping the connection. (httpx, requests and
# urllib hand a bytes body to one sendall, for which it bounds the whole upload: 64 MiB takes
# well under a second here.)
STALL = 20
PIECE = 1 << 20
NODE_SCRIPT = Path(__file__).with_name("fetch.mjs")


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # names in lower case
    complete: bool = True  # False: the body was cut off
    error: str = ""  # why it is incomplete, as the client put it


Post = Callable[[str, Mapping[str, str], Path, Path], Reply]


@dataclass(frozen=True)
class Client:
    name: str
    post: Post
    duplex: bool  # reads the reply while it sends: can take part in full duplex


def file_pieces(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while piece := f.read(PIECE):
            yield piece


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _save(status: int, headers: Mapping[str, str], pieces: Iterator[bytes], dst: Path) -> Reply:
    """Write the body to dst; a cut-off body is a Reply too."""
    with dst.open("wb") as out:
        try:
            for piece in pieces:
                out.write(piece)
        except (http.client.IncompleteRead, ConnectionResetError) as exc:
            return Reply(status, _lower(headers), False, repr(exc))
    return Reply(status, _lower(headers))


# httpx: bytes, a generator (chunked) and the async client with an async generator.


def _httpx_stream(
    content: bytes | Iterator[bytes], url: str, headers: Mapping[str, str], dst: Path
) -> Reply:
    with (
        httpx.Client(timeout=STALL) as client,
        client.stream("POST", url, content=content, headers=headers) as r,
        dst.open("wb") as out,
    ):
        try:
            for piece in r.iter_raw():
                out.write(piece)
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:  # closed early, or reset
            return Reply(r.status_code, _lower(r.headers), False, repr(exc))
        return Reply(r.status_code, _lower(r.headers))


def httpx_bytes(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    return _httpx_stream(src.read_bytes(), url, headers, dst)


def httpx_generator(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    return _httpx_stream(file_pieces(src), url, headers, dst)


async def _async_pieces(path: Path) -> AsyncIterator[bytes]:
    for piece in file_pieces(path):
        yield piece


async def _httpx_async(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    async with (
        httpx.AsyncClient(timeout=STALL) as client,
        client.stream("POST", url, content=_async_pieces(src), headers=headers) as r,
    ):
        with dst.open("wb") as out:
            try:
                async for piece in r.aiter_raw():
                    out.write(piece)
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                return Reply(r.status_code, _lower(r.headers), False, repr(exc))
        return Reply(r.status_code, _lower(r.headers))


def httpx_async(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    return asyncio.run(_httpx_async(url, headers, src, dst))


# requests: bytes, and an open file (sent with its length, read from disk as it goes).


def _requests(data: bytes | IO[bytes], url: str, headers: Mapping[str, str], dst: Path) -> Reply:
    with requests.post(url, data=data, headers=dict(headers), stream=True, timeout=STALL) as r:
        with dst.open("wb") as out:
            try:
                for piece in r.iter_content(PIECE):
                    out.write(piece)
            except requests.exceptions.ChunkedEncodingError as exc:  # also short, or reset
                return Reply(r.status_code, _lower(r.headers), False, repr(exc))
        return Reply(r.status_code, _lower(r.headers))


def requests_bytes(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    return _requests(src.read_bytes(), url, headers, dst)


def requests_file(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    with src.open("rb") as f:
        return _requests(f, url, headers, dst)


# The standard library: urllib.request with bytes, http.client with a file (sent chunked).


def _read_pieces(response: IO[bytes]) -> Iterator[bytes]:
    while piece := response.read(PIECE):
        yield piece


def urllib_request(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    request = urllib.request.Request(url, src.read_bytes(), dict(headers), method="POST")  # noqa: S310 (http://127.0.0.1 only)
    try:
        response = urllib.request.urlopen(request, timeout=STALL)  # noqa: S310
    except urllib.error.HTTPError as error:  # 4xx and 5xx: the error is the response
        response = error
    with response:
        return _save(response.status, dict(response.headers), _read_pieces(response), dst)


def http_client(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=STALL)
    try:
        with src.open("rb") as f:
            # A file without a Content-Length header goes out chunked, read as it is sent.
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            conn.request("POST", path, body=f, headers=dict(headers))
            response = conn.getresponse()
        return _save(response.status, dict(response.getheaders()), _read_pieces(response), dst)
    finally:
        conn.close()


# aiohttp: an open file, or an async generator; a task of its own sends it while the reply is
# read. aiohttp closes a file body once the reply starts (it owns the file from then on,
# aio-libs/aiohttp#1907), which ends the upload of a full-duplex exchange midway: with a file it
# is a half-duplex client, with a generator a full-duplex one.


# Not ClientConnectionError: its ServerTimeoutError is a stall, not a cut.
_AIOHTTP_CUT = (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


async def _aiohttp(
    data: IO[bytes] | AsyncIterator[bytes], url: str, headers: Mapping[str, str], dst: Path
) -> Reply:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=STALL, sock_read=STALL)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(url, data=data, headers=dict(headers)) as r,
    ):
        with dst.open("wb") as out:
            try:
                while piece := await _aiohttp_read(r):
                    out.write(piece)
            except _AIOHTTP_CUT as exc:
                return Reply(r.status, _lower(r.headers), False, repr(exc))
        return Reply(r.status, _lower(r.headers))


async def _aiohttp_read(r: aiohttp.ClientResponse) -> bytes:
    """The next piece of the body (b"" at its end). When a full-duplex upload fails while the
    reply is read ("Cannot write to closing transport"), aiohttp 3.x closes the connection but
    can leave the body reader waiting, with no read timeout: seen under load, with no socket
    left on either side (`ss`). A closing transport delivers nothing more, so a reader idle for
    STALL seconds on one is a cut connection, not a stall; a read that starts after the close
    gets aiohttp's RuntimeError("Connection closed.") instead of its ClientPayloadError."""
    try:
        return await asyncio.wait_for(r.content.read(PIECE), STALL)
    except RuntimeError as exc:  # the same, found by a read that starts after the close
        if str(exc) != "Connection closed.":
            raise
        raise aiohttp.ServerDisconnectedError("closed (aiohttp: Connection closed.)") from None
    except TimeoutError:
        transport = r.connection.transport if r.connection is not None else None
        if transport is None or transport.is_closing():
            raise aiohttp.ServerDisconnectedError("closed (aiohttp missed it)") from None
        raise


def _run_aiohttp(
    data: IO[bytes] | AsyncIterator[bytes], url: str, headers: Mapping[str, str], dst: Path
) -> Reply:
    try:
        return asyncio.run(_aiohttp(data, url, headers, dst))
    except _AIOHTTP_CUT as exc:  # cut before the response head was read: no status, no body
        dst.write_bytes(b"")
        return Reply(0, {}, False, repr(exc))


def aiohttp_file(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    with src.open("rb") as f:
        return _run_aiohttp(f, url, headers, dst)


def aiohttp_generator(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    return _run_aiohttp(_async_pieces(src), url, headers, dst)


# curl and Node's fetch, in subprocesses.

# curl's exit codes for a reply cut off after it started: 18 (partial file: a short body or a
# chunked one without its end), 56 (receive failure: the connection was reset), 55 (send
# failure: in full duplex the connection can break while the body is still going up).
_CURL_CUT = {18, 55, 56}


def curl(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    head = dst.with_name(dst.name + ".head")
    command = ["curl", "-sS", "-X", "POST", "-T", str(src), url, "-o", str(dst), "-D", str(head)]
    command += ["--speed-limit", "1", "--speed-time", str(STALL), "-w", "%{http_code}"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    status = int(done.stdout or 0)
    if done.returncode and not (done.returncode in _CURL_CUT and status):
        raise RuntimeError(f"curl exited {done.returncode}: {done.stderr.strip()}")
    # The last header block: curl writes the 100 Continue's first.
    block = head.read_bytes().decode("latin-1").rstrip("\r\n").split("\r\n\r\n")[-1]
    head.unlink()
    fields = dict(line.split(": ", 1) for line in block.split("\r\n")[1:] if ": " in line)
    return Reply(status, _lower(fields), done.returncode == 0, done.stderr.strip())


def node_fetch(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    node = shutil.which("node")
    assert node, "node is missing: apt-get install nodejs (see .ci/run)"
    pairs = [f"{name}={value}" for name, value in headers.items()]
    command = [node, str(NODE_SCRIPT), url, str(src), str(dst), str(STALL), *pairs]
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode not in (0, 3) or not done.stdout:  # 4: stalled
        raise RuntimeError(f"node exited {done.returncode}: {done.stderr.strip()}")
    answer = json.loads(done.stdout)
    return Reply(answer["status"], answer["headers"], done.returncode == 0, done.stderr.strip())


# sealflow's own client library: full duplex unless told otherwise, with its fallback.
LIBRARY = "sealflow-client"


def sealflow_client(url: str, headers: Mapping[str, str], src: Path, dst: Path) -> Reply:
    from sealflow import Client
    from sealflow.service.client import SealflowError, TransportError

    base, _, path = url.partition("/v1/")
    token = _lower(headers)["authorization"].removeprefix("Bearer ")
    duplex = _lower(headers).get("sealflow-duplex") == "1"
    with (
        Client(base, token, duplex=duplex, timeout=STALL) as client,
        src.open("rb") as body,
        dst.open("wb") as out,
    ):
        try:
            if path.startswith("keys/") and path.endswith("/encrypt"):
                # The route's own default mode (the library picks single-shot for small
                # bodies when it is given none).
                client.encrypt(path.split("/")[1], body, mode="stream", out=out)
            else:
                client.decrypt(body, out=out)
        except TransportError as exc:
            return Reply(200, {}, False, repr(exc))
        except SealflowError as exc:  # the service's answer: its code stands for the body
            if exc.status is None:
                if exc.code is None:
                    raise
                # Full duplex cut off after the service named the cause: still incomplete.
                return Reply(200, {}, False, repr(exc))
            return Reply(exc.status, {}, True, str(exc.code))
    return Reply(200, {})


CLIENTS = {
    client.name: client
    for client in [
        Client("httpx-bytes", httpx_bytes, duplex=False),
        Client("httpx-generator", httpx_generator, duplex=False),
        Client("httpx-async", httpx_async, duplex=False),
        Client("requests-bytes", requests_bytes, duplex=False),
        Client("requests-file", requests_file, duplex=False),
        Client("urllib", urllib_request, duplex=False),
        Client("http.client", http_client, duplex=False),
        Client("aiohttp-file", aiohttp_file, duplex=False),
        Client("aiohttp-generator", aiohttp_generator, duplex=True),
        Client("curl", curl, duplex=True),
        Client("node-fetch", node_fetch, duplex=True),
        Client(LIBRARY, sealflow_client, duplex=True),
    ]
}
