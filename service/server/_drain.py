"""Graceful shutdown: readiness goes 503 first, then the server stops.

On the first SIGTERM or SIGINT the process starts draining: ``/readyz``
answers 503 while requests are still served, for ``drain_seconds``, so a
load balancer stops sending new ones; then uvicorn's own handler runs (it
closes the listener and waits up to ``shutdown_timeout`` for requests in
flight). A second signal goes straight to uvicorn's handler.

Installed from the app's lifespan, in every worker process, after uvicorn has
installed its handlers (which it restores when it stops).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from ._state import DRAINING

Handler = Callable[[int, FrameType | None], Any]


def install(seconds: float) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signals can only be handled on the main thread (in-process tests)
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)
        if callable(previous):
            signal.signal(sig, _handler(previous, seconds))


def _handler(previous: Handler, seconds: float) -> Handler:
    def handle(signum: int, frame: FrameType | None) -> None:
        if DRAINING.is_set() or seconds <= 0:
            DRAINING.set()
            previous(signum, frame)
            return
        DRAINING.set()
        # uvicorn's handler only sets a flag that its main loop polls: safe from a thread.
        timer = threading.Timer(seconds, previous, (signum, frame))
        timer.daemon = True
        timer.start()

    return handle
