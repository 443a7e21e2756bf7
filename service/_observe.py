"""ASGI middleware: the per-request log line and metrics, and the concurrency limit."""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import _errors, _metrics
from ._body import send_error
from ._logging import AccessLog

# Operational routes are not counted against the limit: probes must get through.
_UNLIMITED = ("/healthz", "/readyz", "/metrics")


class Observe:
    """One structured log line and the request metrics, per HTTP request."""

    def __init__(self, app: ASGIApp, access: AccessLog) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        log: dict[str, Any] = {}
        scope["sealflow.log"] = log
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            elapsed = time.perf_counter() - started
            template = getattr(scope.get("route"), "path", "other")
            method = scope["method"]
            _metrics.count_request(template, method, status, elapsed)
            fields = {
                "method": method,
                "route": template,
                "status": status,
                "duration_ms": round(elapsed * 1000, 3),
                **log,
            }
            self.access.write(fields)


class ConcurrencyLimit:
    """Answer 503 beyond ``limit`` requests in flight, before reading their bodies.

    ``active`` is also the in-flight gauge, read at each scrape.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.active = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in _UNLIMITED:
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            await send_error(send, _errors.overloaded(), close=True)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
