"""Stalled-request detection with one timer for all requests.

``asyncio.timeout`` around every receive and send cost about 4 us per request
(two timer handles), a tenth of a small request's budget. Instead each request
records when it last made progress (a float store), and one sweep, every
quarter of the timeout, cancels the requests that have been stalled longer than
the timeout. The cancelled request turns that into a 408 (or a cut-off reply).

A body that trickles (a byte now and then, never a long gap) is cut off too:
once a request has run for the timeout, its body must have averaged at least
``MIN_RATE`` bytes a second.
"""

from __future__ import annotations

import asyncio
from typing import Any

STALLED = "sealflow: request stalled"
MIN_RATE = 1024  # bytes/s a body must average after the first timeout period


class Watch:
    """One request's progress stamp; ``touch()`` after every piece received or sent."""

    __slots__ = ("_loop", "received", "receiving", "stamp", "started", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self._loop = loop
        self.task = task
        self.started = self.stamp = loop.time()
        self.received = 0
        self.receiving = True  # until the body is complete

    def touch(self) -> None:
        self.stamp = self._loop.time()

    def stalled(self, now: float, timeout: float) -> bool:
        if now - self.stamp > timeout:
            return True
        running = now - self.started
        return self.receiving and running > timeout and self.received < MIN_RATE * running


class Watchdog:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._watches: set[Watch] = set()
        self._timer: asyncio.TimerHandle | None = None
        # The loop the requests run on, looked up once: on Python 3.11 each
        # asyncio.get_running_loop() (also inside current_task()) is a getpid() system call.
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self) -> Watch:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None
        watch = Watch(loop, task)
        self._watches.add(watch)
        if self._timer is None:
            self._timer = loop.call_later(self.timeout / 4, self._sweep, loop)
        return watch

    def release(self, watch: Watch) -> None:
        self._watches.discard(watch)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        for watch in [w for w in self._watches if w.stalled(now, self.timeout)]:
            self._watches.discard(watch)
            watch.task.cancel(STALLED)
        if self._watches:
            self._timer = loop.call_later(self.timeout / 4, self._sweep, loop)


def stalled(exc: asyncio.CancelledError) -> bool:
    """Whether this cancellation is the watchdog's (and not a shutdown's)."""
    return exc.args == (STALLED,)
