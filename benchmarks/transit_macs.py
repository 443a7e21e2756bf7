"""Issue 28's three Transit lines, in-process: what one request costs sealflow's CPU, without
sockets or a load generator (the machine may be shared: figures are the calling thread's CPU
time, or the process's when a thread hop is part of the request).

    taskset -c 0 python -m benchmarks.transit_macs

Rows: ``hmac/:name`` of a 1 KiB input and ``sign/:name`` of a 1 KiB input with an ed25519 key
as the protocol's fast answer (``Front.plan``, ``begin``, ``answer`` on a ``Head``, what the
protocol calls for a whole small body), a 1 KiB ``encrypt`` the same way for scale, and a
``batch_input`` of 1,000 HMAC inputs of 100 B (``json.dumps`` of it, as the benchmark posts
it) through the ASGI app, and its route's work alone on the body. Best and median of
``ROUNDS`` loops (docs/BENCHMARKS.md, "Issue 28 in-process").
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

ROUNDS = 9


def _loops(fn: Callable[[], object], n: int, clock: Callable[[], float]) -> tuple[float, float]:
    """(best, median) microseconds per call of ``fn`` over ``ROUNDS`` loops of ``n`` calls."""
    for _ in range(max(1, n // 10)):
        fn()
    runs = []
    for _ in range(ROUNDS):
        start = clock()
        for _ in range(n):
            fn()
        runs.append((clock() - start) / n * 1e6)
    return min(runs), statistics.median(runs)


async def measure() -> list[tuple[str, tuple[float, float]]]:
    from sealflow import engine
    from sealflow.service.config import Settings
    from sealflow.service.keystore import prepare
    from sealflow.service.server.app import create_app
    from sealflow.service.server.http import Head
    from sealflow.service.server.transit import _keys, _routes

    settings = Settings()
    token = prepare(settings)
    assert token is not None
    app: Any = create_app(settings)
    small = json.dumps({"input": base64.b64encode(os.urandom(1024)).decode()}).encode()
    plain = json.dumps({"plaintext": base64.b64encode(os.urandom(1024)).decode()}).encode()
    inputs = [{"input": base64.b64encode(os.urandom(100)).decode()} for _ in range(1000)]
    batch = json.dumps({"batch_input": inputs}).encode()

    def fast(path: str, body: bytes) -> Callable[[], None]:
        raw = path.encode()
        headers = [(b"host", b"x"), (b"x-vault-token", token.encode()),
                   (b"content-length", b"%d" % len(body))]  # fmt: skip

        def once() -> None:
            head = Head("POST", raw, b"", path, "127.0.0.1")
            for name, value in headers:
                head.add(name, value)
            plan = app.front.plan(head.complete())
            app.front.begin(plan)
            answer = app.front.answer(plan, body)
            assert answer is not None
            assert answer.status == 200, answer

        return once

    path = "/v1/transit/hmac/bench"
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": path,
                             "raw_path": path.encode(), "query_string": b"",
                             "headers": [(b"host", b"x"), (b"x-vault-token", token.encode()),
                                         (b"content-length", b"%d" % len(batch))]}  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": batch, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200, message

    async def warm_encrypt() -> None:  # its lease taken, as a server's first encrypt takes it
        path = "/v1/transit/encrypt/bench"
        headers = [(b"host", b"x"), (b"x-vault-token", token.encode()),
                   (b"content-length", b"%d" % len(plain))]  # fmt: skip
        first = {**scope, "path": path, "raw_path": path.encode(), "headers": headers}

        async def body() -> dict[str, Any]:
            return {"type": "http.request", "body": plain, "more_body": False}

        await app(first, body, send)

    async def asgi_loop(n: int) -> float:
        start = time.process_time()  # the batch runs on a thread: the process's CPU
        for _ in range(n):
            await app(dict(scope), receive, send)
        return time.process_time() - start

    async with app.router.lifespan_context(app):
        svc = app.front.svc
        svc.store.create_key("bench", engine.Algorithm.AES_256_GCM, False, None, None)
        await _keys.create(svc.store, "bench-sign", {"type": "ed25519"})
        await warm_encrypt()

        def work() -> None:  # what the route does with the body it read
            with svc.budget.hold() as hold:
                _routes._mac_work(svc, "hmac", "bench", batch, hold, None)[0]()

        rows = [
            ("hmac 1 KiB, fast answer", _loops(fast(path, small), 5000, time.thread_time)),
            ("sign ed25519 1 KiB, fast answer",
             _loops(fast("/v1/transit/sign/bench-sign", small), 2000, time.thread_time)),
            ("encrypt 1 KiB, fast answer (for scale)",
             _loops(fast("/v1/transit/encrypt/bench", plain), 5000, time.thread_time)),
            ("batch hmac 1,000 x 100 B: the route's work on the body",
             _loops(work, 50, time.thread_time)),
        ]  # fmt: skip
        await asgi_loop(10)
        runs = [await asgi_loop(50) / 50 * 1e6 for _ in range(ROUNDS)]
        rows.append(("batch hmac 1,000 x 100 B: whole request, ASGI app (process CPU)",
                     (min(runs), statistics.median(runs))))  # fmt: skip
    return rows


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SEALFLOW_DATA_DIR"] = str(Path(tmp) / "data")
        os.environ["SEALFLOW_LOG_LEVEL"] = "warning"
        devnull = os.open(os.devnull, os.O_WRONLY)
        saved = os.dup(2)
        os.dup2(devnull, 2)  # access log lines go to stderr: off the terminal
        try:
            rows = asyncio.run(measure())
        finally:
            os.dup2(saved, 2)
    print("| in-process, CPU us per request | best | median |\n|---|---:|---:|")
    for label, (best, median) in rows:
        print(f"| {label} | {best:,.1f} | {median:,.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
