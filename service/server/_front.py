"""The front door of every HTTP request: refusals from the head, authentication, concurrency
limits, dispatch, the log line and metrics.

One ASGI layer instead of a middleware per concern: for a small request each layer (a
coroutine, often a wrapped ``send``) is a measurable share of the cost. Data routes go to
``data`` as plain ASGI and record their own status; the rest goes to FastAPI through a ``send``
wrapper that notes the status.

Fairness: a request to ``/v1/`` is authenticated here, from its headers, before it may take a
concurrency slot or have a byte of its body read, so an unauthenticated client never holds a
slot. An authenticated token holds at most ``max_concurrent_per_token`` slots (429 beyond), so
one tenant cannot take all of them either. Bodies of FastAPI's routes are read under the same
receive deadline as the data routes'.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sealflow.service.config import Settings
from sealflow.service.keystore import KeyStoreError, TokenInfo

from . import _auth, _metrics, data, errors
from ._body import drop_connection, refuse, send_error
from ._logging import AccessLog, AccessRecord
from ._state import Services
from ._trim import Trimmer
from ._watchdog import Watch, stalled

# Bodies of the routes FastAPI serves (admin JSON of a few hundred bytes); the data routes
# stream and have their own limits. Chunked bodies are bounded by FastAPI's max_body_size.
MAX_OTHER_BODY = 64 * 1024
# Operational routes are not counted against the limit: probes must get through.
_UNLIMITED = frozenset(("/healthz", "/readyz", "/metrics"))
_API = "/v1/"
_ADMIN = "/v1/keys"


class Front:
    def __init__(
        self,
        app: ASGIApp,
        settings: Settings,
        access: AccessLog,
    ) -> None:
        self.app = app
        self.svc: Services | None = None  # set while the app's lifespan runs
        self.limit = settings.max_concurrent_requests
        self.per_token = settings.max_concurrent_per_token or max(1, self.limit // 2)
        self.max_header_bytes = settings.max_header_bytes
        self.access = access
        self.active = 0  # requests in flight, probes aside; also the in-flight gauge
        self.by_token: dict[str, int] = {}
        self.trimmer = Trimmer(lambda: self.active > 0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        log = AccessRecord()
        scope["sealflow.log"] = log
        svc = self.svc
        route = data.match(scope)
        head = data.Head()
        try:
            token = self._admit(scope, svc, route, head)
        except (errors.ApiError, KeyStoreError) as exc:
            # Answered from a helper, so that no local of this frame holds the exception (its
            # traceback holds this frame: a cycle per refused request, left to the collector).
            await refuse(errors.api_error(exc), scope, send, log)
            self._record(scope, log, started)
            return
        limited = scope["path"] not in _UNLIMITED
        self.active += limited
        if token is not None:
            self.by_token[token.id] = self.by_token.get(token.id, 0) + 1
        try:
            if route is not None and svc is not None and token is not None:
                await data.serve(svc, route, token, head, scope, receive, send)
            elif svc is not None and limited:
                await self._fastapi_watched(svc, scope, receive, send, log)
            else:
                await self.app(scope, receive, _noting_status(send, log))
        finally:
            self.active -= limited
            if not self.active:
                self.trimmer.idle()
            if token is not None:
                left = self.by_token[token.id] - 1
                if left:
                    self.by_token[token.id] = left
                else:
                    del self.by_token[token.id]
            self._record(scope, log, started)

    def _admit(
        self, scope: Scope, svc: Services | None, route: data.Route | None, head: data.Head
    ) -> TokenInfo | None:
        """Everything decided from the head, in one pass over the headers (which also fills
        in what the data routes need); the token if any."""
        authorization: str | None = None
        size = 0
        for name, value in scope["headers"]:
            size += len(name) + len(value)
            if name == b"authorization":
                if authorization is not None:
                    raise errors.bad_request("more than one Authorization header")
                authorization = value.decode("latin-1")
            elif name == b"content-length":
                head.length = int(value)  # the parser has refused a malformed one
            elif name == b"x-aad":
                if head.x_aad is not None:
                    raise errors.bad_request("more than one X-AAD header")
                head.x_aad = value
            elif name == data.DUPLEX:
                head.duplex = value.strip() == b"1"
        length = head.length or 0
        if size > self.max_header_bytes:
            raise errors.headers_too_large(self.max_header_bytes)
        raw_path: bytes = scope.get("raw_path") or b""
        if b"%2f" in raw_path.lower():
            # Routing happens on the decoded path: an encoded slash would let a request
            # slip past an ACL that a proxy applies to the raw one.
            raise errors.bad_request("encoded slashes (%2F) are not allowed in the path")
        path: str = scope["path"]
        if svc is None or not path.startswith(_API):
            token = None
        else:
            token = _auth.authenticate(svc.store, authorization)
            if route is None and path.startswith(_ADMIN):
                _auth.require_admin(token)
        if route is None and length > MAX_OTHER_BODY:
            # Beyond the size of any admin body: refused unread.
            raise errors.too_large(MAX_OTHER_BODY)
        if path not in _UNLIMITED and self.active >= self.limit:
            raise errors.overloaded()
        if token is not None and self.by_token.get(token.id, 0) >= self.per_token:
            _metrics.AUTH_FAILURES.labels("token_limit").inc()
            raise errors.too_many_for_token(self.per_token)
        scope["sealflow.token"] = token
        return token

    async def _fastapi_watched(
        self, svc: Services, scope: Scope, receive: Receive, send: Send, log: AccessRecord
    ) -> None:
        """FastAPI's routes, their body reads under the receive deadline like the data routes'."""
        watch = svc.watchdog.watch()
        try:
            await self.app(scope, _watched(receive, watch), _noting_status(send, log))
        except asyncio.CancelledError as exc:
            if not stalled(exc):
                raise
            watch.task.uncancel()
            if log.status:  # the response had started: drop the connection
                drop_connection(scope)
                return
            error = errors.timeout()
            log.status, log.error = error.status, error.code
            await send_error(send, error, close=True)
        finally:
            svc.watchdog.release(watch)

    def _record(self, scope: Scope, log: AccessRecord, started: float) -> None:
        ended = time.perf_counter()
        elapsed = ended - started
        template = getattr(scope.get("route"), "path", "other")
        method = scope["method"]
        _metrics.count_request(template, method, log.status, elapsed)
        log.method, log.route, log.duration_ms = method, template, round(elapsed * 1000, 3)
        self.access.write(log, ended)


def _watched(receive: Receive, watch: Watch) -> Receive:
    async def receiving() -> Message:
        message = await receive()
        watch.touch()
        watch.received += len(message.get("body", b""))
        watch.receiving = message.get("more_body", False)
        return message

    return receiving


def _noting_status(send: Send, log: AccessRecord) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            log.status = message["status"]
        await send(message)

    return sending
