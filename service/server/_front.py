"""The front door of every HTTP request: refusals from the head, authentication, concurrency
limits, dispatch, the log line and metrics.

One ASGI layer instead of a middleware per concern: for a small request each layer (a
coroutine, often a wrapped ``send``) is a measurable share of the cost. Data routes go to
``data`` and the Vault-Transit-compatible routes to ``transit``, both plain ASGI; the rest goes
to FastAPI through a ``send`` wrapper that notes the status. Transit's routes authenticate
with Vault's headers and answer refusals in Vault's shape (``transit.authenticate``,
``transit.refuse``).

Fairness: a request to ``/v1/`` is authenticated here, from its headers, before it may take a
concurrency slot or have a byte of its body read, so an unauthenticated client never holds a
slot. An authenticated token holds at most ``max_concurrent_per_token`` slots (429 beyond), so
one tenant cannot take all of them either. Bodies of FastAPI's routes are read under the same
receive deadline as the data routes'.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sealflow.service.config import Settings
from sealflow.service.keystore import KeyStoreError, TokenInfo

from . import _auth, _metrics, data, errors, transit
from ._body import drop_connection, refuse, send_error
from ._logging import AccessLog, AccessRecord
from ._state import DRAINING, Services
from ._trim import Trimmer
from ._watchdog import Watch, stalled

# Bodies of the routes FastAPI serves (admin JSON of a few hundred bytes); the data routes
# stream and have their own limits. Chunked bodies are bounded by FastAPI's max_body_size.
MAX_OTHER_BODY = 64 * 1024
# Operational routes are not counted against the limit: probes must get through.
_UNLIMITED = frozenset(("/healthz", "/readyz", "/metrics", "/v1/sys/health"))
_API = "/v1/"
_ADMIN = "/v1/keys"
_OK = b"HTTP/1.1 200 OK\r\n"
_OCTETS = b"content-type: application/octet-stream\r\ncontent-length: %d\r\n\r\n"


@dataclass(slots=True, frozen=True)
class LaneTicket:
    """A request held for the lane: what its head decided."""

    svc: Services
    token: TokenInfo
    url: bytes
    x_aad: bytes | None
    started: float  # time.perf_counter() when its head was complete
    vault: bool  # Transit's encrypt (else a data route)


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
        self.max_json_bytes = settings.max_json_bytes
        self.transit = transit.Transit(settings.transit_mount)
        self._vault_encrypt = (settings.transit_mount + "/encrypt/").encode()
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
        vault = None if route is not None else self.transit.match(scope["path"])
        head = data.Head()
        try:
            token = self._admit(scope, svc, route, vault, head)
        except (errors.ApiError, KeyStoreError) as exc:
            # Answered from a helper, so that no local of this frame holds the exception (its
            # traceback holds this frame: a cycle per refused request, left to the collector).
            if vault is not None:
                scope["route"] = vault
                await transit.refuse(errors.api_error(exc), scope, send, log)
            else:
                await refuse(errors.api_error(exc), scope, send, log)
            self._record(scope, log, started)
            return
        limited = scope["path"] not in _UNLIMITED
        self.active += limited
        if token is not None:
            self.by_token[token.id] = self.by_token.get(token.id, 0) + 1
        try:
            if route is not None and svc is not None and token is not None:
                await data.serve(svc, route, token, head, log, scope, receive, send)
            elif vault is not None and svc is not None:
                app = functools.partial(self.transit.serve, svc, vault, token)
                await self._watched(svc, app, scope, receive, send, log, vault=True)
            elif vault is not None:
                await self.transit.serve(svc, vault, token, scope, receive, send)
            elif svc is not None and limited:
                await self._watched(svc, self.app, scope, receive, send, log)
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

    def lane_urls(self) -> tuple[bytes, ...]:
        """The URL prefixes the lane may answer (``lane_head`` decides): the data routes and
        Transit's encrypt."""
        return (*data.lane.URLS, self._vault_encrypt)

    def lane_head(self, url: bytes, headers: list[tuple[bytes, bytes]]) -> LaneTicket | None:
        """Whether the protocol may hold this request for the lane (``data.lane``,
        ``transit.lane``): a live token with room under its limits, a Content-Length within
        the lane's size. Decided from the head, before a byte of the body is kept: an
        unauthenticated client never gets a body buffered (it goes the usual way, and is
        refused unread).

        The front door's part of the lane; ``lane_answer`` is the rest. Anything that is not
        the plain case is None before any side effect: no failure is counted or logged here,
        the ASGI path does that when it serves the request.
        """
        svc = self.svc
        if svc is None or DRAINING.is_set() or self.active >= self.limit:
            return None
        started = time.perf_counter()
        head = data.Head()
        try:
            authorization, vault_token = self._scan(headers, head)
        except errors.ApiError:
            return None  # refused from the head: the app does it
        length = head.length
        if length is None or length > data.lane.MAX_BODY or b"%" in url:
            return None  # no Content-Length: chunked
        vault = url.startswith(self._vault_encrypt)
        if vault and length > self.max_json_bytes:
            return None
        if vault:
            secret = transit.token_secret(vault_token, authorization)
        else:
            secret = None if authorization is None else _auth.bearer(authorization)
        try:
            token = svc.store.find_token(secret) if secret else None
        except KeyStoreError:
            return None
        if token is None or self.by_token.get(token.id, 0) >= self.per_token:
            return None
        return LaneTicket(svc, token, url, head.x_aad, started, vault)

    def lane_answer(
        self, ticket: LaneTicket, body: bytes, default: bytes
    ) -> Sequence[bytes] | None:
        """The whole response's pieces to a held request, or None to serve it the usual way;
        on success the metrics and the log line ``_record`` would write. ``default``: the
        server's own header lines (``date``), as uvicorn writes them."""
        if ticket.vault:
            log = AccessRecord(200, "POST", self.transit.routes["encrypt"].path)
            answer = transit.lane.answer(
                ticket.svc, ticket.token, self._vault_encrypt, ticket.url, body, log
            )
            if answer is None:
                return None
            head, pieces = transit.lane.HEADERS % len(answer), [answer]
        else:
            log = AccessRecord(200, "POST", bytes_in=len(body))
            answered = data.lane.answer(
                ticket.svc, ticket.token, ticket.url, ticket.x_aad, body, log
            )
            if answered is None:
                return None
            pieces, algorithm, operation = answered
            sent = sum(map(len, pieces))
            _metrics.count_bytes(algorithm, operation, len(body), sent)
            log.bytes_out, head = sent, _OCTETS % sent
        ended = time.perf_counter()
        elapsed = ended - ticket.started
        _metrics.count_request(log.route, "POST", 200, elapsed)
        _metrics.count_lane()
        log.duration_ms = round(elapsed * 1000, 3)
        self.access.write(log, ended)
        return (_OK, default, head, *pieces)

    def _admit(
        self,
        scope: Scope,
        svc: Services | None,
        route: data.Route | None,
        vault: transit.Route | None,
        head: data.Head,
    ) -> TokenInfo | None:
        """Everything decided from the head, in one pass over the headers (which also fills
        in what the data routes need); the token if any."""
        authorization, vault_token = self._scan(scope["headers"], head)
        length = head.length or 0
        raw_path: bytes = scope.get("raw_path") or b""
        if b"%2f" in raw_path.lower():
            # Routing happens on the decoded path: an encoded slash would let a request
            # slip past an ACL that a proxy applies to the raw one.
            raise errors.bad_request("encoded slashes (%2F) are not allowed in the path")
        path: str = scope["path"]
        if vault is not None:
            # The Transit API: Vault's tokens and refusals (403), its own body limit.
            token = None
            if svc is not None and vault.token:
                token = transit.authenticate(svc.store, vault_token, authorization)
            if length > self.max_json_bytes:
                raise errors.too_large(self.max_json_bytes)
        elif svc is None or not path.startswith(_API):
            token = None
        else:
            token = _auth.authenticate(svc.store, authorization)
            if route is None and path.startswith(_ADMIN):
                _auth.require_admin(token)
        if route is None and vault is None and length > MAX_OTHER_BODY:
            # Beyond the size of any admin body: refused unread.
            raise errors.too_large(MAX_OTHER_BODY)
        if path not in _UNLIMITED and self.active >= self.limit:
            raise errors.overloaded()
        if token is not None and self.by_token.get(token.id, 0) >= self.per_token:
            _metrics.AUTH_FAILURES.labels("token_limit").inc()
            raise errors.too_many_for_token(self.per_token)
        if route is None and vault is None:  # for FastAPI's routes (admin._deps)
            scope["sealflow.token"] = token
        return token

    def _scan(
        self, headers: list[tuple[bytes, bytes]], head: data.Head
    ) -> tuple[str | None, bytes | None]:
        """The one pass over a request's headers (for ``_admit`` and ``lane_head``): fills in
        ``head`` and gives the ``Authorization`` and ``X-Vault-Token`` values; 400 for a second
        Authorization or X-AAD, 431 beyond ``max_header_bytes``."""
        authorization: str | None = None
        vault_token: bytes | None = None
        size = 0
        for name, value in headers:
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
            elif name == b"x-vault-token":
                vault_token = value
        if size > self.max_header_bytes:
            raise errors.headers_too_large(self.max_header_bytes)
        return authorization, vault_token

    async def _watched(
        self,
        svc: Services,
        app: ASGIApp,
        scope: Scope,
        receive: Receive,
        send: Send,
        log: AccessRecord,
        vault: bool = False,
    ) -> None:
        """FastAPI's and Transit's routes, their body reads under the receive deadline like
        the data routes'. ``vault``: Transit's, which note ``log.status`` themselves (through
        ``_wire``) and whose timeout is answered in Vault's shape."""
        watch = svc.watchdog.watch()
        try:
            sending = send if vault else _noting_status(send, log)
            await app(scope, _watching(receive, watch), sending)
        except asyncio.CancelledError as exc:
            if not stalled(exc):
                raise
            watch.task.uncancel()
            if log.status:  # the response had started: drop the connection
                drop_connection(scope)
                return
            error = errors.timeout()
            if vault:  # {"errors": [...]}, the connection closed (the body is left unread)
                await transit.refuse(error, scope, send, log)
                return
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


def _watching(receive: Receive, watch: Watch) -> Receive:
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
