"""Both ways a server may answer a body: request-then-response (the whole body read first, the
answer with Content-Length, no ``Sealflow-Duplex`` echo) and full duplex (the answer streamed
while the body arrives, the header echoed). A stand-in service under a real uvicorn; its
"encryption" is a byte-wise XOR."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from sealflow import Client

XOR = bytes(b ^ 0x5A for b in range(256))
SEEN: list[dict[bytes, bytes]] = []  # request headers, newest last


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    headers = dict(scope["headers"])
    SEEN.append(headers)
    duplex = headers.get(b"sealflow-duplex") == b"1" and "/duplex/" in scope["path"]
    if not duplex:  # request-then-response: all of the body first
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        out = bytes(body).translate(XOR)
        length = str(len(out)).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", length)]})  # fmt: skip
        await send({"type": "http.response.body", "body": out})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"sealflow-duplex", b"1")]})  # fmt: skip
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
        body = message.get("body", b"").translate(XOR)
        await send({"type": "http.response.body", "body": body, "more_body": more})


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_config=None)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="stand-in-service")
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the stand-in service failed to start"
        thread.join(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join()


@pytest.mark.parametrize("key", ["whole", "duplex"])
@pytest.mark.parametrize("kind", ["bytes", "iterator"])
def test_either_way_of_answering_works(service: str, key: str, kind: str) -> None:
    data = os.urandom(48 << 20)  # far beyond what the socket buffers hold
    pieces = (data[i : i + 300_000] for i in range(0, len(data), 300_000))
    source: Any = data if kind == "bytes" else pieces
    with Client(service, "t") as api:
        assert api.encrypt(key, source) == data.translate(XOR)
    assert SEEN[-1][b"sealflow-duplex"] == b"1"  # always asked for
