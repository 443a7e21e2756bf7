"""The whole small request in-process: sealflow's own HTTP protocol fed request bytes through a
transport that goes nowhere (the in-process protocol tests' ``Wire``), the real app,
keystore, audit setting and access log behind it; no sockets, no load generator.

    taskset -c 0 python -m benchmarks.wire [--profile ROUTE] [ROUTE ...]

For each route of ``benchmarks.cpu_per_request`` (a 1 KiB Transit encrypt, Transit hmac, native
single-shot encrypt), one connection sends a request and waits for its answer, N times; the
figure is the process's CPU time per request (``time.process_time``: the event loop and every
thread the request wakes), best of five runs. What a socket costs is left out, so it is
steadier than ``benchmarks.cpu_per_request`` on a shared machine and names the same Python
work. The access log is written to stderr as the server writes it (send it to /dev/null); the
figures go to stdout. A tree's ``src`` on ``PYTHONPATH`` is what is timed, so
an older commit's worktree can be timed by the same command (docs/BENCHMARKS.md, "Issue 28, the
small request's shared path"). ``--profile ROUTE`` prints cProfile's top entries for it, timed by
the main thread's CPU time (its call counts are exact however loaded the machine is).
``SEALFLOW_BENCH_N`` requests a run (3,000), ``SEALFLOW_BENCH_TOP`` entries printed (45).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import re
import sys
import tempfile
import time
from pathlib import Path

from tests.service.server.http.wire import Wire

from .cpu_per_request import ROUTES, SETUP

N = int(os.environ.get("SEALFLOW_BENCH_N", "3000"))


def _request(path: str, body: bytes, token: str) -> bytes:
    kind = b"application/octet-stream" if "/v1/keys/" in path else b"application/json"
    return (
        b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Vault-Token: %s\r\nAuthorization: Bearer %s\r\n"
        b"Content-Type: %s\r\nContent-Length: %d\r\n\r\n"
        % (path.encode(), token.encode(), token.encode(), kind, len(body))
    ) + body


def _say(line: str) -> None:
    print(line, flush=True)  # stderr is the access log's


async def _main(routes: list[str], profile: str | None, data: Path) -> None:
    import uvicorn
    from uvicorn.server import ServerState

    from sealflow.service.config import Settings
    from sealflow.service.keystore import prepare
    from sealflow.service.server import http
    from sealflow.service.server.app import create_app

    settings = Settings(data_dir=data)
    token = prepare(settings)
    assert token is not None
    app = create_app(settings)
    config = uvicorn.Config(app, http=http.HttpProtocol, proxy_headers=False, lifespan="off")
    config.load()
    async with app.router.lifespan_context(app) as state:
        protocol = http.HttpProtocol(config, ServerState(), dict(state or {}))
        wire = Wire()
        protocol.connection_made(wire)  # type: ignore[arg-type]

        async def one(request: bytes) -> None:
            before = len(wire.data)
            protocol.data_received(request)
            while len(wire.data) == before or b"\r\n\r\n" not in wire.data[before:]:
                await asyncio.sleep(0)
            await asyncio.sleep(0)

        for name in routes:
            path, body, _ = ROUTES[name]
            if name in SETUP:
                await one(_request(SETUP[name][0], SETUP[name][1], token))
            request = _request(path, body, token)
            wire.data.clear()
            await one(request)
            status = re.match(rb"HTTP/1\.1 (\d{3})", bytes(wire.data))
            if status is None or status.group(1) != b"200":
                _say(f"{name}: missing ({bytes(wire.data[:40])!r})")
                continue
            for _ in range(300):
                await one(request)
            if profile == name:
                # CPU time, not wall time: steadier on a shared machine.
                prof = cProfile.Profile(time.thread_time)
                prof.enable()
                for _ in range(N):
                    await one(request)
                prof.disable()
                pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(
                    int(os.environ.get("SEALFLOW_BENCH_TOP", "45"))
                )
                continue
            best = []
            for _ in range(5):
                wire.data.clear()
                start = time.process_time()
                for _ in range(N):
                    await one(request)
                best.append((time.process_time() - start) / N * 1e6)
            best.sort()
            _say(
                f"{name}: {best[0]:.1f} us CPU/request (runs {', '.join(f'{b:.1f}' for b in best)})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(ROUTES))
    parser.add_argument("routes", nargs="*", default=[r for r in ROUTES if r != "transit-batch"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(
            _main(
                args.routes if not args.profile else [args.profile],
                args.profile,
                Path(tmp) / "data",
            )
        )


if __name__ == "__main__":
    main()
