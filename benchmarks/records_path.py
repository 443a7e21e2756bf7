"""Where a value's time goes on the ``mode=records`` path, stage by stage, in-process.

    taskset -c 1 python -m benchmarks.records_path [--profile]

One batch as ``Client.encrypt_many`` sends it: 10,082 values of 100 B, a 1 MiB body. Server
stages: the frame watch over the body's 64 KiB pieces (as uvicorn hands them over), the
batches of about 256 KiB cut from them (``_transfer.BATCH``), the engine's ``seal_many`` of
each, and the whole codec (``RecordSealer.run``: batches, leases from a real usage meter
over a real keystore, sealing). Client stages: cutting 1,000,000 values into batches, framing
a batch, cutting an encrypt's and a decrypt's answer into results, and the whole client path
of ``Client.encrypt_many`` with the sockets left out (``_pipeline.results`` with its send and
receive replaced by the canned answer of the batch's size). Each row: microseconds per value,
best and median of ROUNDS runs (``time.perf_counter``). ``--profile``: a cProfile of the
whole codec and of the client path (docs/BENCHMARKS.md, "Issue 30, the records path").
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import struct
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sealflow import engine
from sealflow.service.client import _pipeline
from sealflow.service.client import _records as client
from sealflow.service.client._blocking import Exchange, Pool
from sealflow.service.client._origin import Endpoint
from sealflow.service.config import Settings
from sealflow.service.envelope import Mode, Prefix
from sealflow.service.keystore import UsageMeter, open_store, prepare
from sealflow.service.server._logging import AccessRecord
from sealflow.service.server.data import _records as server
from sealflow.service.server.data._transfer import BATCH

ROUNDS = int(os.environ.get("SEALFLOW_BENCH_ROUNDS", "30"))
SIZE = 100
VALUES = 10_082  # a 1 MiB body of 100 B values
CLIENT_VALUES = 1_000_000
PIECE = 64 * 1024
KEY = "default"


def timed(fn: Callable[[], object], per: int) -> tuple[float, float]:
    runs = []
    fn()
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return min(runs) / per * 1e6, statistics.median(runs) / per * 1e6


def server_batches(body: bytes) -> list[list[bytes]]:
    """The body's 64 KiB pieces, grouped as ``Transfer.pipeline`` groups them."""
    groups: list[list[bytes]] = [[]]
    size = 0
    for i in range(0, len(body), PIECE):
        groups[-1].append(body[i : i + PIECE])
        size += len(groups[-1][-1])
        if size >= BATCH:
            groups.append([])
            size = 0
    return [g for g in groups if g]


def sealer(meter: UsageMeter) -> server.RecordSealer:
    watch = server.FrameWatch(1 << 20)
    return server.RecordSealer(
        lambda n: meter.lease(KEY, None, n), b"", 1 << 20, 1 << 30, meter.add_bytes,
        lambda n: meter.ready(KEY, n), AccessRecord(), watch,
    )  # fmt: skip


ENVELOPE = SIZE + client.overhead(KEY)
_ANSWERS: dict[int, bytes] = {}


def receive(pool: Pool, endpoint: Endpoint, batch: client.Batch, ex: Exchange) -> bytes:
    """An encrypt's answer for a batch of its size (its envelopes are random bytes)."""
    if batch.count not in _ANSWERS:
        head = struct.pack(">I", ENVELOPE)
        body = head.join(os.urandom(ENVELOPE) for _ in range(batch.count))
        _ANSWERS[batch.count] = head + body
    return _ANSWERS[batch.count]


def send(pool: Pool, endpoint: Endpoint, batch: client.Batch, *, fresh: bool) -> Any:
    return types.SimpleNamespace(conn=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="also print two cProfiles")
    args = parser.parse_args()
    values = [os.urandom(SIZE) for _ in range(VALUES)]
    rows: list[tuple[str, tuple[float, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp))
        prepare(settings)
        meter = UsageMeter(open_store(settings, 1.0))

        def head(length: int) -> bytes:
            return b"POST /v1/keys/default/encrypt?mode=records HTTP/1.1\r\n\r\n"

        group = (list[client.Value](values), [SIZE] * VALUES)
        batch = client.Batch(head, group, 0, client.overhead(KEY))
        body = batch.body[batch.start :]
        groups = server_batches(body)

        def watch() -> None:
            seen = server.FrameWatch(1 << 20)
            for pieces in groups:
                for piece in pieces:
                    seen(piece)

        def complete() -> None:
            codec = sealer(meter)
            for i, pieces in enumerate(groups):
                codec._complete(list(pieces), i == len(groups) - 1)

        lease = meter.lease(KEY, None, 1)
        prefix = Prefix(Mode.SINGLE, lease.key.algorithm, lease.version, KEY).encode()
        step = -(-VALUES // len(groups))  # the codec's batches: as many, about as large
        records = [
            engine.Records.from_framed(
                b"".join(struct.pack(">I", SIZE) + v for v in values[i : i + step])
            )
            for i in range(0, VALUES, step)
        ]

        def seal() -> None:
            for part in records:
                engine.seal_many(
                    lease.key.algorithm, lease.material, b"", part, prefix=prefix, framed=True
                )

        def codec() -> list[Any]:
            run = sealer(meter)
            return [run.run(list(g), i == len(groups) - 1) for i, g in enumerate(groups)]

        rows += [
            ("server: FrameWatch over the 64 KiB pieces", timed(watch, VALUES)),
            ("server: Framed._complete (join, frames parsed)", timed(complete, VALUES)),
            ("server: engine.seal_many, one call per batch", timed(seal, VALUES)),
            ("server: RecordSealer.run, the whole codec", timed(codec, VALUES)),
        ]
        answer = b"".join(codec())
        many = [os.urandom(SIZE) for _ in range(CLIENT_VALUES)]

        def cut() -> None:
            for _ in client.batches(many):
                pass

        envelopes = client.sealed(answer, batch)
        decrypt = client.Records("/v1/keys/default/decrypt?mode=records", b"", None)
        opening = decrypt.batch("", b"", (list(envelopes), [len(e) for e in envelopes]), 0)
        status = struct.pack(">BI", 0, SIZE)
        opened_answer = b"".join(status + v for v in values)

        def frame() -> None:
            client.Batch(head, group, 0, client.overhead(KEY))

        def cut_sealed() -> None:
            client.sealed(answer, batch)

        def cut_opened() -> None:
            client.opened(opened_answer, opening, "raise")

        rows += [
            ("client: batches() over 1,000,000 values", timed(cut, CLIENT_VALUES)),
            ("client: Batch framing (encrypt)", timed(frame, VALUES)),
            ("client: sealed(), an encrypt's answer", timed(cut_sealed, VALUES)),
            ("client: opened(), a decrypt's answer", timed(cut_opened, VALUES)),
        ]
        call = client.Records("/v1/keys/default/encrypt?mode=records", b"", KEY)
        endpoint: Any = types.SimpleNamespace(target="", prelude=b"", timeout=None)
        pool: Any = types.SimpleNamespace(release=lambda conn, ok: None)
        _pipeline._send = send
        _pipeline._receive = receive

        def client_path() -> None:
            limits = (client.BATCH_BYTES, client.BATCH_RECORDS)
            for _ in _pipeline.results(pool, endpoint, call, many, limits):
                pass

        rows.append(
            ("client: the encrypt_many path, no sockets", timed(client_path, CLIENT_VALUES))
        )
        print(f"\n| stage ({SIZE} B values) | best us a value | median |\n|---|---:|---:|")
        for name, (best, median) in rows:
            print(f"| {name} | {best:.3f} | {median:.3f} |")
        if args.profile:
            for fn in (codec, client_path):
                profile = cProfile.Profile()
                profile.runcall(fn)
                pstats.Stats(profile).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
