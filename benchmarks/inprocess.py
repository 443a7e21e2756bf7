"""Per-request cost of the sealflow ASGI app alone: no sockets, no server, one core.

    taskset -c 0 python -m benchmarks.inprocess [--log]

Calls the app in a loop with a 1 KiB single-shot encrypt (token check, key
lookup, seal, metrics, and the access log with ``--log``), so the figure is
what sealflow adds on top of uvicorn; then the same request as the protocol's fast answer
(``Front.plan``, ``begin`` and ``answer`` on a ``Head``, what the protocol calls instead of
the app for a whole-body plan).
A profile of the same loop: ``--profile``.
``--budget`` also times the parts of the request on their own (the table in
docs/BENCHMARKS.md, "Small requests"). ``--transit-batch`` times a Transit ``batch_input``
encrypt of 1,000 items of 100 bytes instead, whole and in parts, and the general path for
comparison (docs/BENCHMARKS.md, "Transit"). ``--transit-single`` times one Transit encrypt of a
1 KiB plaintext (``{"plaintext": ...}``) as the fast answer calls it (``_encrypt.encrypt_now``)
and as the ASGI route does (``_encrypt.encrypt``), against real Services (docs/BENCHMARKS.md,
"Single Transit encrypt, in-process"). ``--audit`` times the fast answer with the audit
file on against the same with it off, the records written once per 16 requests as the
protocol writes a turn's (the CPU side of ``python -m benchmarks.http audit``;
docs/BENCHMARKS.md, "The audit trail"). ``--large`` times a 256 MiB stream encrypt and its
decrypt in request-then-response instead, spool and all (docs/BENCHMARKS.md, "The spool").
``--records`` times ``mode=records`` encrypt of a 1 MiB body of 10,082 values of 100 B and
the decrypt of its answer: CPU per value (docs/BENCHMARKS.md, "Client: batches of records").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any


def _each(fn: Callable[[], object], n: int = 100_000) -> float:
    """Microseconds per call of fn, best of three."""
    fn()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def budget(app: Any, token: str, body: bytes) -> list[tuple[str, float]]:
    """The parts of a 1 KiB single-shot encrypt, each timed alone (us)."""
    from sealflow import engine
    from sealflow.service.server import _auth, _logging, _metrics

    svc = app.front.svc
    store = svc.store
    info = _auth.authenticate(store, "Bearer " + token)
    key = store.get_key("default")
    material = store.key_material("default", key.latest)
    nonce, aad = os.urandom(12), b"x" * 20
    record = _logging.AccessRecord(200, "POST", "/v1/keys/{name}/encrypt", 0.1, "default", 1,
                                   "single", 1024, 1076)  # fmt: skip

    def watch() -> None:
        svc.watchdog.release(svc.watchdog.watch())

    def count() -> None:
        _metrics.count_request("/v1/keys/{name}/encrypt", "POST", 200, 0.0001)
        _metrics.count_bytes("aes-256-gcm", "encrypt", 1024, 1076)

    return [
        ("token: SHA-256 of the secret, cached lookup, constant-time compare",
         _each(lambda: _auth.authenticate(store, "Bearer " + token))),
        ("scope check (cached answer)", _each(lambda: _auth.allows(info, "encrypt", "default"))),
        ("key and material (cached)", _each(lambda: (store.get_key("default"),
                                                     store.key_material("default", 1)))),
        ("nonce: os.urandom(12)", _each(lambda: os.urandom(12))),
        ("seal 1 KiB (engine.seal, AES-256-GCM)",
         _each(lambda: engine.seal("aes-256-gcm", material, nonce, aad, body))),
        ("metrics: request and bytes counted", _each(count)),
        ("receive deadline: watch and release", _each(watch)),
        ("access log line (built, encoded, queued)",
         _each(lambda: app.access_log.write(record, time.perf_counter()))),
    ]  # fmt: skip


async def _floor(requests: int, scope: dict[str, Any], receive: Any, send: Any) -> float:
    """Per-request cost of a trivial ASGI app (read the body, answer it) in this same loop."""

    async def echo(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        headers = [(b"content-length", b"%d" % len(message["body"]))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": message["body"], "more_body": False})

    start = time.perf_counter()
    for _ in range(requests):
        await echo(dict(scope), receive, send)
    return (time.perf_counter() - start) / requests


async def run(requests: int, profile: bool, parts: list[tuple[str, float]] | None = None) -> float:
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
        "client": ("127.0.0.1", 50000),  # the access log's remote_addr
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
        lane = _lane(app, token, body, requests)
        if parts is not None:
            parts.append(("ASGI harness floor (a trivial app, same loop)",
                          await _floor(requests, scope, receive, send) * 1e6))  # fmt: skip
            parts.extend(budget(app, token, body))
        app.access_log.flush()  # type: ignore[attr-defined]
    LANE_US[0] = lane * 1e6
    return elapsed / requests


LANE_US = [0.0]


def _lane(app: Any, token: str, body: bytes, requests: int) -> float:
    """Seconds per request of the same encrypt as the protocol's fast answer: the head scanned
    (``Head.add`` per header), then ``plan``, ``begin`` and ``answer``."""
    from sealflow.service.server.http import Head

    front = app.front
    headers = [
        (b"host", b"x"),
        (b"authorization", b"Bearer " + token.encode()),
        (b"content-length", b"1024"),
    ]

    def once() -> None:
        head = Head("POST", b"/v1/keys/default/encrypt", b"mode=single",
                    "/v1/keys/default/encrypt", "127.0.0.1")  # fmt: skip
        for name, value in headers:
            head.add(name, value)
        plan = front.plan(head.complete())
        front.begin(plan)
        assert front.answer(plan, body).status == 200

    for _ in range(requests // 10):
        once()
    start = time.perf_counter()
    for _ in range(requests):
        once()
    return (time.perf_counter() - start) / requests


async def audit_lane(requests: int, rounds: int = 5) -> tuple[float, float]:
    """Microseconds per 1 KiB encrypt as the fast answer, audit file off and on (best of
    ``rounds``, alternating): every 16 requests the turn ends as under wrk's 16 connections,
    each answer's record checked written (``Trail.recorded``: the first writes the batch)."""
    from sealflow.service.config import Settings
    from sealflow.service.keystore import prepare
    from sealflow.service.server.app import create_app
    from sealflow.service.server.http import Head

    body = os.urandom(1024)
    with tempfile.TemporaryDirectory() as tmp:
        fronts = []
        async with contextlib.AsyncExitStack() as stack:
            for audited in (False, True):
                data = Path(tmp) / ("on" if audited else "off")
                settings = Settings(
                    data_dir=data, audit_file=data / "audit.log" if audited else None
                )
                token = prepare(settings)
                assert token is not None
                app: Any = create_app(settings)
                await stack.enter_async_context(app.router.lifespan_context(app))
                # The first sealing under a key leases from the keystore (off the loop).
                await asyncio.to_thread(app.front.svc.usage.lease, "default", None, 1)
                fronts.append((app.front, b"Bearer " + token.encode()))

            def once(front: Any, bearer: bytes) -> int:
                head = Head("POST", b"/v1/keys/default/encrypt", b"mode=single",
                            "/v1/keys/default/encrypt", "127.0.0.1")  # fmt: skip
                head.add(b"host", b"x")
                head.add(b"authorization", bearer)
                head.add(b"content-length", b"1024")
                plan = front.plan(head.complete())
                front.begin(plan)
                answer = front.answer(plan, body)
                assert answer.status == 200
                ticket: int = answer.ticket
                return ticket

            def turns(front: Any, bearer: bytes, n: int) -> float:
                trail = front.svc.audit
                start = time.perf_counter()
                for _ in range(n // 16):
                    tickets = [once(front, bearer) for _ in range(16)]
                    if trail is not None:
                        assert all(trail.recorded(t) for t in tickets)
                return (time.perf_counter() - start) / (n // 16 * 16)

            best = [float("inf"), float("inf")]
            for front, bearer in fronts:
                turns(front, bearer, requests // 10)  # warm up
            for _ in range(rounds):
                for i, (front, bearer) in enumerate(fronts):
                    best[i] = min(best[i], turns(front, bearer, requests))
                    await asyncio.sleep(0)  # the loop's own turn: the trail's scheduled flush
    return best[0] * 1e6, best[1] * 1e6


async def transit_batch(items: int = 1000, size: int = 100, rounds: int = 300) -> None:
    """A Transit batch encrypt through the ASGI app, and its parts, in microseconds per batch."""
    import base64
    import json

    import orjson

    from sealflow import engine
    from sealflow.service.config import Settings
    from sealflow.service.keystore import prepare
    from sealflow.service.server.app import create_app
    from sealflow.service.server.transit import _column, _encrypt

    settings = Settings()
    token = prepare(settings)
    assert token is not None
    app: Any = create_app(settings)
    batch = [{"plaintext": base64.b64encode(os.urandom(size)).decode()} for _ in range(items)]
    body = json.dumps({"batch_input": batch}).encode()
    path = "/v1/transit/encrypt/bench"
    headers = [(b"host", b"x"), (b"x-vault-token", token.encode()),
               (b"content-length", b"%d" % len(body))]  # fmt: skip
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": path,
                             "raw_path": path.encode(), "query_string": b"",
                             "headers": headers}  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200, message

    async with app.router.lifespan_context(app):
        svc = app.front.svc
        svc.store.create_key("bench", engine.Algorithm.AES_256_GCM, False, None, None)
        for _ in range(rounds // 10):
            await app(dict(scope), receive, send)
        start = time.perf_counter()
        for _ in range(rounds):
            await app(dict(scope), receive, send)
        whole = (time.perf_counter() - start) / rounds * 1e6
        parsed = orjson.loads(body)
        column = _column.column(parsed)
        assert column is not None
        records = engine.Records.from_base64(column.texts, column.count)
        key = svc.store.key_material("bench", 1)
        ALG = engine.Algorithm.AES_256_GCM

        def general() -> None:
            _encrypt._Items(svc, "bench", parsed, {})()

        n = rounds
        raw = _column.from_body(body)
        assert raw is not None
        rows = [
            ("_column.from_body: the unparsed column found",
             _each(lambda: _column.from_body(body), n)),
            ("engine.Records.from_base64 of it (decode the column)",
             _each(lambda: engine.Records.from_base64(raw.texts, raw.count, raw.sep), n)),
            ("engine.seal_many alone (the AEAD of every item)",
             _each(lambda: engine.seal_many("aes-256-gcm", key, b"", records), n)),
            ("_column.seal: seal_many_text, the answer's bytes",
             _each(lambda: _column.seal(ALG, key, b"", records, 1, column), n)),
            (f"another serialization: orjson.loads of the {len(body):,}-byte body (and freeing it)",
             _each(lambda: orjson.loads(body), n)),
            ("another serialization: _column.column (plaintexts joined, shape checked)",
             _each(lambda: _column.column(parsed), n)),
            ("for comparison: the general path (_encrypt._Items: checks, leases, seal, answer)",
             _each(general, n // 10)),
        ]  # fmt: skip
    print(f"\n| Transit batch encrypt, {items:,} items of {size} B | us per batch |\n|---|---:|")
    for label, us in rows:
        print(f"| {label} | {us:,.0f} |")
    print(f"| **the whole request through the ASGI app, in-process** | **{whole:,.0f}** |")


def transit_single(calls: int = 10_000, rounds: int = 15) -> None:
    """A single Transit encrypt of 1 KiB, called directly: us of the calling thread's CPU per
    call (``time.thread_time``: the time another process takes the core does not count, on a
    shared machine), median and best of ``rounds`` loops of ``calls`` (no HTTP, no app: the
    encrypt alone, key warm; the leases and the seal run in this thread)."""
    import base64
    import statistics

    import orjson

    from sealflow.service.config import Settings
    from sealflow.service.keystore import prepare
    from sealflow.service.server._logging import AccessRecord
    from sealflow.service.server._startup import start_services
    from sealflow.service.server.transit import _encrypt

    settings = Settings(crypto_threads=1)
    prepare(settings)
    svc = start_services(settings)
    body = orjson.dumps({"plaintext": base64.b64encode(os.urandom(1024)).decode()})
    log = AccessRecord()  # the request's, as the front door makes one

    def now() -> None:
        assert _encrypt.encrypt_now(svc, "default", body, log)[0] == 200

    async def routed(n: int) -> float:
        start = time.thread_time()
        for _ in range(n):
            with svc.budget.hold() as hold:
                await _encrypt.encrypt(svc, "default", body, hold, log)
        return time.thread_time() - start

    def loop_now(n: int) -> float:
        start = time.thread_time()
        for _ in range(n):
            now()
        return time.thread_time() - start

    try:
        for _ in range(calls // 10):
            now()
        svc.usage.bind_loop()  # as the server does: a lease that needs the keystore would raise
        rows: dict[str, list[float]] = {"encrypt_now": [], "encrypt (ASGI route)": []}
        runner = asyncio.Runner()
        runner.run(routed(calls // 10))
        for _ in range(rounds):  # interleaved, so that the machine's load hits both alike
            rows["encrypt_now"].append(loop_now(calls) / calls * 1e6)
            rows["encrypt (ASGI route)"].append(runner.run(routed(calls)) / calls * 1e6)
        runner.close()
    finally:
        svc.usage.close()
        svc.crypto.close()
        svc.store.close()
    print(f"\n| single Transit encrypt, 1 KiB, {rounds} x {calls:,} calls | median CPU us | best |")
    print("|---|---:|---:|")
    for label, us in rows.items():
        print(f"| {label} | {statistics.median(us):.2f} | {min(us):.2f} |")


Times = tuple[float, float, float]  # seconds, user and system CPU seconds


async def large(size: int = 256 << 20, rounds: int = 5) -> None:
    """A stream encrypt of `size` bytes, then its decrypt, through the ASGI app in
    request-then-response (spooled), in 64 KiB pieces as uvicorn hands them over: the best
    seconds of `rounds` each, and where the time went (process CPU, user and system)."""
    from sealflow.service.config import Settings
    from sealflow.service.keystore import prepare
    from sealflow.service.server.app import create_app

    settings = Settings()
    token = prepare(settings)
    assert token is not None
    app: Any = create_app(settings)
    piece = 64 * 1024
    block = os.urandom(piece)
    auth = (b"authorization", b"Bearer " + token.encode())

    async def call(path: str, pieces: list[bytes], keep: list[bytes] | None) -> Times:
        """One request; its answer's pieces go to `keep` if given, else are dropped as a
        server drops them once sent."""
        length = sum(map(len, pieces))
        headers = [(b"host", b"x"), auth, (b"content-length", b"%d" % length)]
        scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
                 "query_string": b"", "headers": headers}  # fmt: skip
        left = iter(pieces)
        sent = 0

        async def receive() -> dict[str, Any]:
            body = next(left, b"")
            return {"type": "http.request", "body": body, "more_body": bool(body)}

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal sent
            if message["type"] == "http.response.start":
                assert message["status"] == 200, message
            elif keep is not None:
                keep.append(message["body"])
            else:
                sent += len(message["body"])

        before, start = os.times(), time.perf_counter()
        await app(scope, receive, send)
        seconds, after = time.perf_counter() - start, os.times()
        if keep is None and path == "/v1/decrypt":
            assert sent == size
        return seconds, after.user - before.user, after.system - before.system

    best: dict[str, Times] = {}
    async with app.router.lifespan_context(app):
        plain = [block] * (size // piece)
        out: list[bytes] = []
        await call("/v1/keys/default/encrypt", plain, out)
        sealed = b"".join(out)
        del out
        envelope = [sealed[i : i + piece] for i in range(0, len(sealed), piece)]
        del sealed
        for _ in range(rounds):
            for name, path, pieces in (
                ("encrypt", "/v1/keys/default/encrypt", plain),
                ("decrypt", "/v1/decrypt", envelope),
            ):
                times = await call(path, pieces, None)
                if name not in best or times[0] < best[name][0]:
                    best[name] = times
    print(
        f"\n| {size >> 20} MiB stream, request-then-response, in-process | s | user s | system s |"
    )
    print("|---|---:|---:|---:|")
    for name, (seconds, user, system) in best.items():
        print(f"| {name} | {seconds:.3f} | {user:.2f} | {system:.2f} |")


async def records(values: int = 10_082, size: int = 100, rounds: int = 20) -> None:
    """``mode=records`` encrypt of a 1 MiB body of ``values`` framed values of ``size``
    bytes (``Client.encrypt_many``'s batch), then the decrypt of its answer, through the ASGI
    app in request-then-response, in 64 KiB pieces as uvicorn hands them over: the process
    CPU (user and system) per value, best of ``rounds`` requests each."""
    import struct

    from sealflow.service.config import Settings
    from sealflow.service.keystore import prepare
    from sealflow.service.server.app import create_app

    settings = Settings()
    token = prepare(settings)
    assert token is not None
    app: Any = create_app(settings)
    piece = 64 * 1024
    auth = (b"authorization", b"Bearer " + token.encode())
    frame = struct.pack(">I", size)
    body = b"".join(frame + os.urandom(size) for _ in range(values))

    async def call(path: str, data: bytes) -> tuple[float, bytes]:
        headers = [(b"host", b"x"), auth, (b"content-length", b"%d" % len(data))]
        scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
                 "query_string": b"mode=records", "headers": headers}  # fmt: skip
        left = iter([data[i : i + piece] for i in range(0, len(data), piece)])
        out: list[bytes] = []

        async def receive() -> dict[str, Any]:
            chunk = next(left, b"")
            return {"type": "http.request", "body": chunk, "more_body": bool(chunk)}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                assert message["status"] == 200, message
            else:
                out.append(message["body"])

        start = time.process_time()
        await app(scope, receive, send)
        return time.process_time() - start, b"".join(out)

    async with app.router.lifespan_context(app):
        _, sealed = await call("/v1/keys/default/encrypt", body)
        best = {"encrypt": float("inf"), "decrypt": float("inf")}
        for _ in range(rounds):
            seconds, _ = await call("/v1/keys/default/encrypt", body)
            best["encrypt"] = min(best["encrypt"], seconds)
            seconds, opened = await call("/v1/keys/default/decrypt", sealed)
            best["decrypt"] = min(best["decrypt"], seconds)
        assert opened[:5] == b"\x00" + frame
        assert len(opened) == values * (size + 5)
    print(f"\n| mode=records, {values:,} values of {size} B, in-process | CPU us a value |")
    print("|---|---:|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds / values * 1e6:.3f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", action="store_true", help="access log on (level info)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the loop")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--budget", action="store_true", help="also time each part alone")
    parser.add_argument(
        "--transit-batch", action="store_true", help="a Transit batch of 1,000 items instead"
    )
    parser.add_argument(
        "--transit-single", action="store_true", help="a single Transit encrypt of 1 KiB instead"
    )
    parser.add_argument(
        "--large", action="store_true", help="a 256 MiB stream encrypt and decrypt instead"
    )
    parser.add_argument(
        "--records", action="store_true", help="mode=records encrypt and decrypt of 1 MiB instead"
    )
    parser.add_argument(
        "--audit", action="store_true", help="the fast answer with the audit file off and on"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SEALFLOW_DATA_DIR"] = str(Path(tmp) / "data")
        os.environ["SEALFLOW_LOG_LEVEL"] = "info" if args.log else "warning"
        # Access log lines go to stderr; keep them off the terminal.
        devnull = os.open(os.devnull, os.O_WRONLY)
        saved = os.dup(2)
        os.dup2(devnull, 2)
        if args.transit_single:
            try:
                transit_single()
            finally:
                os.dup2(saved, 2)
            return 0
        if args.audit:
            try:
                off, on = asyncio.run(audit_lane(args.requests))
            finally:
                os.dup2(saved, 2)
            print(f"1 KiB encrypt, fast answer: audit off {off:.2f} us, on {on:.2f} us")
            print(f"audit adds {on - off:.2f} us a request: on / off throughput {off / on:.3f}x")
            return 0
        if args.transit_batch or args.large or args.records:
            try:
                jobs = {args.transit_batch: transit_batch, args.records: records}
                asyncio.run(jobs.get(True, large)())
            finally:
                os.dup2(saved, 2)
            return 0
        try:
            parts: list[tuple[str, float]] | None = [] if args.budget else None
            seconds = asyncio.run(run(args.requests, args.profile, parts))
        finally:
            os.dup2(saved, 2)
    log = "on" if args.log else "off"
    print(f"1 KiB single-shot encrypt, access log {log}: {seconds * 1e6:.1f} us per request")
    print(f"the same as the protocol's fast answer: {LANE_US[0]:.1f} us per request")
    if parts:
        _print_budget(parts, seconds * 1e6, LANE_US[0])
    return 0


# The parts the fast answer does not have: it runs no ASGI app and needs no receive deadline
# (the body has come whole when it answers).
_NOT_IN_LANE = ("ASGI harness floor", "receive deadline")


def _print_budget(parts: list[tuple[str, float]], total: float, lane: float) -> None:
    print("\n| part of a 1 KiB single-shot encrypt | ASGI app, us | fast answer, us |")
    print("|---|---:|---:|")
    in_lane = 0.0
    for label, us in parts:
        if label.startswith(_NOT_IN_LANE):
            print(f"| {label} | {us:.2f} | - |")
        else:
            in_lane += us
            print(f"| {label} | {us:.2f} | {us:.2f} |")
    rest = total - sum(us for _, us in parts)
    print(
        "| the rest: front door, routing, body and reply, awaits (fast answer: head, plan, "
        f"response) | {rest:.2f} | {lane - in_lane:.2f} |"
    )
    print(f"| **the whole request, in-process** | **{total:.1f}** | **{lane:.1f}** |")


if __name__ == "__main__":
    sys.exit(main())
