"""The front door of every HTTP request: concurrency limit, dispatch, log line and metrics.

One ASGI layer instead of a middleware per concern: for a small request each
layer (a coroutine, often a wrapped ``send``) is a measurable share of the cost.
Data routes go to ``data`` as plain ASGI and record their own status; the rest
goes to FastAPI through a ``send`` wrapper that notes the status.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import _metrics, data, errors
from ._body import send_error
from ._logging import AccessLog, AccessRecord
from ._state import Services

# The parser (httptools) accepts headers of any size; requests beyond this get 431.
MAX_HEADER_BYTES = 16 * 1024
# Bodies of the routes FastAPI serves (admin JSON of a few hundred bytes); the data routes
# stream and have their own limits. Chunked bodies are bounded by FastAPI's max_body_size.
MAX_OTHER_BODY = 64 * 1024
# Operational routes are not counted against the limit: probes must get through.
_UNLIMITED = frozenset(("/healthz", "/readyz", "/metrics"))


class Front:
    def __init__(
        self,
        app: ASGIApp,
        services: Callable[[], Services | None],
        limit: int,
        access: AccessLog,
    ) -> None:
        self.app = app
        self.services = services
        self.limit = limit
        self.access = access
        self.active = 0  # requests in flight, probes aside; also the in-flight gauge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        log = AccessRecord()
        scope["sealflow.log"] = log
        limited = scope["path"] not in _UNLIMITED
        route = data.match(scope)
        refusal = None
        if limited and self.active >= self.limit:
            refusal = errors.overloaded()
        elif sum(len(name) + len(value) for name, value in scope["headers"]) > MAX_HEADER_BYTES:
            refusal = errors.headers_too_large(MAX_HEADER_BYTES)
        elif route is None and _content_length(scope) > MAX_OTHER_BODY:
            # FastAPI reads a route's JSON body before its dependencies check the token.
            refusal = errors.too_large(MAX_OTHER_BODY)
        if refusal is not None:
            log.status = refusal.status
            await send_error(send, refusal, close=True)
            self._record(scope, log, started)
            return
        self.active += limited
        try:
            svc = self.services()
            if route is not None and svc is not None:
                await data.serve(svc, route, scope, receive, send)
            else:
                await self.app(scope, receive, _noting_status(send, log))
        finally:
            self.active -= limited
            self._record(scope, log, started)

    def _record(self, scope: Scope, log: AccessRecord, started: float) -> None:
        elapsed = time.perf_counter() - started
        template = getattr(scope.get("route"), "path", "other")
        method = scope["method"]
        _metrics.count_request(template, method, log.status, elapsed)
        log.method, log.route, log.duration_ms = method, template, round(elapsed * 1000, 3)
        self.access.write(log)


def _content_length(scope: Scope) -> int:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value)  # the parser has refused a malformed one
    return 0


def _noting_status(send: Send, log: AccessRecord) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            log.status = message["status"]
        await send(message)

    return sending
