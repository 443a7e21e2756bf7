"""Per-request cost of the sealflow ASGI app alone: no sockets, no server, one core.

    taskset -c 0 python -m benchmarks.inprocess [--log]

Calls the app in a loop with a 1 KiB single-shot encrypt (token check, key
lookup, pooled buffer, seal, metrics, and the access log with ``--log``), so
the figure is what sealflow adds on top of uvicorn. A profile of the same loop:
``--profile``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any


async def run(requests: int, profile: bool) -> float:
    from sealflow.service.config import Settings
    from sealflow.service.keystore import prepare
    from sealflow.service.server.app import create_app

    settings = Settings()
    token = prepare(settings)
    assert token is not None
    app = create_app(settings)
    body = os.urandom(1024)
    headers = [
        (b"host", b"x"),
        (b"authorization", b"Bearer " + token.encode()),
        (b"content-length", b"1024"),
    ]
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": "/v1/keys/default/encrypt",
        "query_string": b"mode=single",
        "headers": headers,
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200, message

    async with app.router.lifespan_context(app):
        for _ in range(requests // 10):  # warm up
            await app(dict(scope), receive, send)
        profiler = cProfile.Profile() if profile else None
        if profiler:
            profiler.enable()
        start = time.perf_counter()
        for _ in range(requests):
            await app(dict(scope), receive, send)
        elapsed = time.perf_counter() - start
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        app.access_log.flush()  # type: ignore[attr-defined]
    return elapsed / requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", action="store_true", help="access log on (level info)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the loop")
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SEALFLOW_DATA_DIR"] = str(Path(tmp) / "data")
        os.environ["SEALFLOW_LOG_LEVEL"] = "info" if args.log else "warning"
        # Access log lines go to stderr; keep them off the terminal.
        devnull = os.open(os.devnull, os.O_WRONLY)
        saved = os.dup(2)
        os.dup2(devnull, 2)
        try:
            seconds = asyncio.run(run(args.requests, args.profile))
        finally:
            os.dup2(saved, 2)
    log = "on" if args.log else "off"
    print(f"1 KiB single-shot encrypt, access log {log}: {seconds * 1e6:.1f} us per request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
