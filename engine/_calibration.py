"""Start-up calibration: which provider is faster per algorithm and size class, for the
concurrency the process runs.

One thread alone and several threads at once rank the providers differently on Debian 12:
AES chunks through ``cryptography.cobblestone`` (VAES) are the fastest on one thread, but
hold the GIL, so two threads together gain little; the native provider (OpenSSL 3.0, no
VAES) is slower alone and releases the GIL for a whole run of chunks, so two threads
nearly double it (docs/BENCHMARKS.md). So each provider is timed on one thread and, when
the crypto pool runs jobs on more than one core, on that many threads at once. Jobs of the
``small`` class run inline on the event loop, one at a time: they are chosen by the
one-thread figure; every other class runs on the pool and is chosen by the aggregate.
Each job is the code that class runs in use: for chunks, the codec of ``_chunked.CODECS``
(Cobblestone for AES under ``cryptography``), fed as a stream is.

So this module sits above the codecs it times, and ``_selection`` below them cannot import
it: the package's ``__init__`` hands ``measure`` to ``_selection.use_calibrator``, and
``_selection`` keeps what it returns (``Calibration``, defined there).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from ._binding import release_thread_contexts
from ._chunked import CODECS
from ._pool import parallelism
from ._provider import Provider
from ._records import Records
from ._selection import PROVIDERS, Calibration, Measurement, SizeClass
from ._types import CHUNK_LEN, NONCE_LEN, TAG_LEN, Algorithm, AlgorithmSpec

# Per size class: bytes per message (or record), records per batch, repetitions per timed
# round on one thread and per thread in a round of all threads. A round of all threads is
# made longer (512 KiB a thread; 128 KiB of small records) than thread wake-ups; the best
# of three rounds counts, so a moment when another process holds a core is not what is
# kept. The whole calibration takes about 55-70 ms on two threads (docs/ENGINE.md).
_JOBS = {
    SizeClass.SMALL: (1024, 1, 200, 0),
    SizeClass.LARGE: (65536, 1, 8, 8),
    SizeClass.CHUNKS: (16 * CHUNK_LEN, 1, 3, 8),
    SizeClass.RECORDS_SMALL: (256, 64, 3, 8),
    SizeClass.RECORDS_LARGE: (16384, 8, 3, 4),
}
_ROUNDS = 3  # timed rounds on one thread; the best counts
_POOL_ROUNDS = 3  # timed rounds with every thread at once


def _job(provider: Provider, spec: AlgorithmSpec, cls: SizeClass) -> Callable[[], None]:
    """A representative job with its own buffers (one per thread)."""
    key = os.urandom(spec.key_len)
    nonce = os.urandom(NONCE_LEN)
    size, count, _, _ = _JOBS[cls]
    data = bytes(size)
    if cls in (SizeClass.RECORDS_SMALL, SizeClass.RECORDS_LARGE):
        records = Records.from_lengths(bytes(size * count), [size] * count)
        out = bytearray((size + NONCE_LEN + TAG_LEN) * count)
        offsets = bytearray(8 * (count + 1))
        return lambda: provider.seal_many(spec, key, b"", 0, records, False, out, offsets)
    if cls is SizeClass.CHUNKS:
        # One stream, fed whole chunks: what a server's sealing loop does per piece.
        codec = CODECS[provider.name, spec.algorithm].sealer(provider, spec, key, b"")
        out = bytearray(codec.update_size(size))
        codec.update_into(data, out)  # the header goes out with the first call

        def chunks() -> None:
            codec.update_into(data, out)

        return chunks
    if cls is SizeClass.SMALL:

        def small() -> None:
            provider.seal(spec, key, nonce, b"", data)

        return small
    out = bytearray(size + TAG_LEN)
    return lambda: provider.seal_into(spec, key, nonce, b"", data, out)


def _single(job: Callable[[], None], reps: int) -> float:
    """Best seconds for reps runs of job on this thread."""
    job()  # warm the thread's cached context
    best = float("inf")
    for _ in range(_ROUNDS):
        start = time.perf_counter()
        for _ in range(reps):
            job()
        best = min(best, time.perf_counter() - start)
    return best


class _Team:
    """`threads` threads that run the same timed job at once, kept for a whole calibration
    (starting threads per measurement cost more than measuring)."""

    def __init__(self, threads: int) -> None:
        self._go = threading.Barrier(threads + 1)
        self._done = threading.Barrier(threads + 1)
        self._task: tuple[Provider, AlgorithmSpec, SizeClass, int] | None = None
        self._spans: list[list[tuple[float, float]]] = []
        self._failures: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._work, name=f"sealflow-calibrate-{i}", daemon=True)
            for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        try:
            self._serve()
        finally:
            # Now, not in the thread's TLS destructor: that runs after join() has returned,
            # so its events would land in whatever the caller measures next.
            release_thread_contexts()

    def _serve(self) -> None:
        while True:
            self._go.wait()
            task = self._task
            if task is None:
                return
            provider, spec, cls, reps = task
            try:
                job = _job(provider, spec, cls)  # buffers and warm contexts of its own
                job()
            except BaseException as exc:  # raised by run(), in the calibrating thread
                self._failures.append(exc)
                job = None
            self._done.wait()
            for spans in self._spans:
                self._go.wait()
                start = time.perf_counter()
                for _ in range(reps if job is not None else 0):
                    job()  # type: ignore[misc]
                spans.append((start, time.perf_counter()))
                self._done.wait()

    def run(self, provider: Provider, spec: AlgorithmSpec, cls: SizeClass, reps: int) -> float:
        """Best seconds, over a few rounds, for every thread running reps jobs at once: from
        the first thread's start to the last one's end (each thread reads its own clock, so a
        late wake-up of the calibrating thread cannot shorten the span)."""
        self._task = (provider, spec, cls, reps)
        self._spans = [[] for _ in range(_POOL_ROUNDS)]
        self._go.wait()  # set up
        self._done.wait()
        for _ in range(_POOL_ROUNDS):
            self._go.wait()
            self._done.wait()
        if self._failures:
            raise self._failures[0]
        return min(max(e for _, e in r) - min(b for b, _ in r) for r in self._spans)

    def close(self) -> None:
        self._task = None
        self._go.wait()
        for t in self._threads:
            t.join()


def measure(threads: int | None) -> Calibration:
    """Time every provider per algorithm and size class, on one thread and on `threads`
    (None: as many as a default ``CryptoPool`` runs on this process's cores).

    The aggregate of a provider is not measured (None) when it cannot win: when even
    `threads` times its one-thread figure is below another provider's aggregate.
    """
    threads = threads or parallelism()
    began = time.perf_counter()
    rows: list[Measurement] = []
    team = _Team(threads) if threads > 1 else None
    try:
        for alg in Algorithm:
            spec = alg.spec
            for cls in SizeClass:
                size, count, reps, pool_reps = _JOBS[cls]
                single = {
                    name: size * count * reps / _single(_job(provider, spec, cls), reps)
                    for name, provider in PROVIDERS.items()
                }
                aggregate: dict[str, float | None] = dict(single)
                if team is not None and Calibration.basis(cls, threads) == "aggregate":
                    best = 0.0
                    for name in sorted(single, key=lambda n: -single[n]):
                        if threads * single[name] < best:
                            aggregate[name] = None
                            continue
                        seconds = team.run(PROVIDERS[name], spec, cls, pool_reps)
                        result = threads * size * count * pool_reps / seconds
                        aggregate[name], best = result, max(best, result)
                rows.extend(
                    Measurement(alg, cls, name, single[name], aggregate[name]) for name in single
                )
    finally:
        if team is not None:
            team.close()
    return Calibration(threads, time.perf_counter() - began, tuple(rows))
