"""The small-request floor: a raw ASGI app that answers a POST with its own body, run by
uvicorn with its httptools protocol and uvloop, as the naive peer is.

No framework, no authentication, no crypto: each request costs only what uvicorn and the
kernel cost. Its req/s against a peer's is the most an ASGI server on uvicorn could reach
against that peer in the same run (the 1 KiB rows of benchmarks/http.py and
benchmarks/transit.py).

    taskset -c 0 python -m uvicorn benchmarks.peers.echo:app --http httptools --loop uvloop
"""

from __future__ import annotations

from typing import Any


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    pieces, more = [], True
    while more:
        message = await receive()
        pieces.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(pieces)
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"content-length", b"%d" % len(body)),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
