"""A pool of crypto worker threads that asyncio code awaits.

Each worker thread owns its cached cipher contexts (they are thread-local in
the providers). Jobs smaller than ``inline_below`` bytes run on the event loop
itself: a hop to a thread costs tens of microseconds, more than sealing a few
KiB. A process allowed only one core runs every job inline. The number of jobs
waiting or running is bounded; ``run`` waits for room.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]

DEFAULT_INLINE_BELOW = 64 * 1024
MAX_DEFAULT_THREADS = 8


def parallelism(threads: int | None = None) -> int:
    """How many crypto jobs a pool of `threads` threads (None: the default number) runs at
    once on the cores this process may use (taskset, cgroups). The calibration measures
    the providers at this concurrency."""
    cores = len(os.sched_getaffinity(0))
    return min(threads or min(cores, MAX_DEFAULT_THREADS), cores)


class CryptoPool:
    def __init__(
        self,
        threads: int | None = None,
        max_queue: int = 256,
        inline_below: int | None = None,
    ) -> None:
        cores = len(os.sched_getaffinity(0))  # what this process may run on (taskset, cgroups)
        self.threads = threads or min(cores, MAX_DEFAULT_THREADS)
        # Jobs running at once: what engine.calibrate(threads=...) should measure.
        self.parallelism = parallelism(self.threads)
        if inline_below is None:
            # On one core a worker thread cannot run beside the loop: a hop would only cost.
            inline_below = DEFAULT_INLINE_BELOW if cores > 1 else sys.maxsize
        self.inline_below = inline_below
        self.max_queue = max_queue
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._room: asyncio.Semaphore | None = None
        self._workers = [
            threading.Thread(target=self._work, name=f"sealflow-crypto-{i}", daemon=True)
            for i in range(self.threads)
        ]
        self.queued = 0  # jobs handed to threads and not finished yet
        self.offloaded = 0
        self.inlined = 0
        self._closed = False
        for worker in self._workers:
            worker.start()

    async def run(self, size: int, fn: Callable[..., T], *args: Any) -> T:
        """Run fn(*args): inline when size is below the threshold, else on a worker thread."""
        if self._closed:
            raise RuntimeError("CryptoPool is closed")
        if size < self.inline_below:
            self.inlined += 1
            return fn(*args)
        if self._room is None:
            self._room = asyncio.Semaphore(self.max_queue)
        async with self._room:
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[T] = loop.create_future()
            self.queued += 1
            self.offloaded += 1
            self._jobs.put((fn, args, loop, fut))
            try:
                return await asyncio.shield(fut)
            except asyncio.CancelledError:
                # The worker may still be writing into the caller's buffers: the
                # caller must not reuse or release them until the job is over.
                await _wait_out(fut)
                raise
            finally:
                self.queued -= 1

    def close(self) -> None:
        """Stop the workers after the jobs already queued; idempotent."""
        if self._closed:
            return
        self._closed = True
        for _ in self._workers:
            self._jobs.put(None)
        for worker in self._workers:
            worker.join()

    @staticmethod
    def _work_done(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        if fut.cancelled():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, args, loop, fut = job
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # delivered to the awaiting coroutine
                result, error = None, exc
            # RuntimeError: the loop closed while the job ran, so nobody is waiting.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._work_done, fut, result, error)
            del job, fn, args, fut, result, error


async def _wait_out(fut: asyncio.Future[Any]) -> None:
    while not fut.done():
        try:
            await asyncio.wait([fut])
        except asyncio.CancelledError:
            continue
