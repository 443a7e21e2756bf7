"""Whether a local audit sink should be written on the audit's writer thread: one batch's
file write on the event loop against handing it to the thread and hearing back on the loop
(issue 25, item 4; docs/AUDIT.md, "PostgreSQL sink", "What it costs").

    python -m benchmarks.audit_hop

No server, no database: an asyncio loop writes one-line batches of a 465-byte record to a
``FileSink`` in a temporary folder, inline (what the server does for files and stdout), and
through a ``BatchWriter`` whose ``done`` wakes the loop with ``call_soon_threadsafe`` (what it
does for the table), with the file write on the thread and with no write at all (the hop
alone). For each: the median and p90 wall time from the start of the write (or the hand-off)
to the loop knowing the batch is written, and the process's CPU time per batch (both threads).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sealflow.service.audit import FileSink
from sealflow.service.audit._writer import BatchWriter

from ._harness import machine

ROUNDS = 5000
LINE = b'{"type":"request","pad":"' + b"x" * 440 + b'"}'


def _report(name: str, walls: list[float], cpu: float) -> None:
    walls.sort()
    median = statistics.median(walls) * 1e6
    p90 = walls[int(len(walls) * 0.9)] * 1e6
    print(f"{name:<28} median {median:7.1f} us  p90 {p90:7.1f} us  cpu {cpu * 1e6:7.1f} us")


async def _inline(sink: FileSink) -> tuple[list[float], float]:
    walls = []
    cpu = time.process_time()
    for _ in range(ROUNDS):
        start = time.perf_counter()
        sink.write([LINE])
        walls.append(time.perf_counter() - start)
        await asyncio.sleep(0)  # a turn of the loop, as between two batches in the server
    return walls, (time.process_time() - cpu) / ROUNDS


async def _hop(write: Callable[[list[bytes], int], bool]) -> tuple[list[float], float]:
    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[bool]] = {}

    def settle(upto: int, wrote: bool) -> None:
        waiting.pop(upto).set_result(wrote)

    def done(upto: int, wrote: bool) -> None:  # on the writer thread
        loop.call_soon_threadsafe(settle, upto, wrote)

    writer = BatchWriter(write, done)
    walls = []
    cpu = time.process_time()
    for n in range(1, ROUNDS + 1):
        start = time.perf_counter()
        waiting[n] = loop.create_future()
        writer.hand([LINE], n)
        assert await waiting[n]
        walls.append(time.perf_counter() - start)
    cpu = (time.process_time() - cpu) / ROUNDS
    writer.close(10)
    return walls, cpu


async def _main() -> None:
    print(machine())
    with tempfile.TemporaryDirectory() as folder:
        sink = FileSink(Path(folder) / "audit.log", 0)

        def to_file(lines: list[bytes], upto: int) -> bool:
            sink.write(lines)
            return True

        for _ in range(2):  # the second round of each is the one to read (warm)
            _report("file, inline on the loop", *await _inline(sink))
            _report("file, on the writer thread", *await _hop(to_file))
            _report("no write, the hop alone", *await _hop(lambda lines, upto: True))
        sink.close()


if __name__ == "__main__":
    asyncio.run(_main())
