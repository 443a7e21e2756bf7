"""The front door of every HTTP request: one plan per request from its head, then the plan
carried out, the log line and metrics.

``plan`` is the one decision about a request: a pure function of its ``Head`` (and of the
keystore's cached tokens and the slots in use) that either refuses it (status, code, in
sealflow's or Vault's shape) or says how it is served: the data routes (``data``), Transit
(``transit``), or FastAPI for the admin routes, probes and docs. The protocol asks for the plan
as soon as a head is complete (``http.Planner``): it answers a refusal at once, and a
whole-body plan itself once its body has come (``begin``, ``answer``, ``abandon``); every other
request reaches ``__call__`` through the ASGI app with its plan in the scope. An ASGI client
that did not come through the protocol (an in-process one) gets its plan made here, the same
way. ``record`` writes the metrics and the access-log line for every request, however it was
answered; the line names the request by its head's ``request_id`` (the response's
``X-Request-Id``) and the client by its address (``_forwarded``: the peer, or the client a
trusted proxy names).

Fairness: a request to ``/v1/`` is authenticated from its head before it may take a
concurrency slot or have a byte of its body read, so an unauthenticated client never holds a
slot. An authenticated token holds at most ``max_concurrent_per_token`` slots (429 beyond), so
one tenant cannot take all of them either. Bodies of FastAPI's routes are read under the same
receive deadline as the data routes'.

Revocation has a bound: a replica whose keystore has been silent for longer than
``keystore_max_cache_age`` (a PostgreSQL keystore cut off) may be serving a token revoked
meanwhile, so every request that needs a token gets 503 ``keystore_unavailable`` from its head
(``_fresh``), unless the operator chose ``keystore_stale_cache=serve``; probes still answer.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sealflow.service.config import Settings
from sealflow.service.keystore import KeyStoreError, TokenExpired, TokenInfo, TokenNotFound

from . import _audit, _auth, _forwarded, _metrics, data, errors, transit
from ._body import drop_connection, refuse, send_error
from ._logging import AccessLog, AccessRecord
from ._state import DRAINING, Services
from ._trim import Trimmer
from ._watchdog import Watch, stalled
from .http import Head

# Bodies of the routes FastAPI serves (admin JSON of a few hundred bytes); the data routes
# stream and have their own limits. Chunked bodies are bounded by FastAPI's max_body_size.
MAX_OTHER_BODY = 64 * 1024
# Operational routes are not counted against the limit: probes must get through.
_UNLIMITED = frozenset(("/healthz", "/readyz", "/metrics", "/v1/sys/health"))
_API = "/v1/"
_ADMIN = "/v1/keys"
_TOKENS = "/v1/tokens"
_SELF = "/v1/tokens/self"
_SINGLE = b"mode=single"
# What a single-shot envelope adds to its plaintext at most: prefix (75 bytes), nonce, tag.
_ENVELOPE_MAX = 128


class Kind(enum.Enum):
    REFUSE = "refuse"  # answered from the head
    DATA = "data"  # the data routes (data.serve; whole-body when ``whole``)
    TRANSIT = "transit"  # the Vault-Transit-compatible API
    APP = "app"  # FastAPI: admin routes, docs
    OPEN = "open"  # FastAPI, not counted against the limits: probes, metrics


@dataclass(slots=True, eq=False)
class Plan:
    """What ``Front.plan`` decided for one request."""

    kind: Kind
    head: Head
    log: AccessRecord
    started: float  # time.perf_counter() when the head was complete
    route: data.Route | None = None
    vault: transit.Route | None = None
    token: TokenInfo | None = None
    error: errors.ApiError | None = None  # why it is refused
    whole: int = 0  # the largest body the protocol may answer itself (``Front.answer``)
    refused: bool = False
    counted: bool = True  # takes a concurrency slot (probes and metrics do not)
    taken: bool = False  # holds a slot (``_take``)
    ticket: int = 0  # its audit record's (``_audit.Trail.record``); 0: none made yet


class Front:
    def __init__(self, app: ASGIApp, settings: Settings, access: AccessLog) -> None:
        self.app = app
        self.svc: Services | None = None  # set while the app's lifespan runs
        self.limit = settings.max_concurrent_requests
        self.per_token = settings.max_concurrent_per_token or max(1, self.limit // 2)
        self.max_header_bytes = settings.max_header_bytes
        self.max_json_bytes = settings.max_json_bytes
        self.transit = transit.Transit(settings.transit_mount)
        self.max_cache_age = settings.keystore_max_cache_age
        self.refuse_stale = settings.keystore_stale_cache == "refuse"
        self.access = access
        # None without trusted proxies: the peer is the client, nothing to look up.
        proxies = settings.trusted_proxy_networks
        self.proxies = _forwarded.Proxies(proxies) if proxies else None
        self.active = 0  # requests in flight, probes aside; also the in-flight gauge
        # Logins (AppRole, cert): the counted routes a client without a token reaches (AppRole's
        # credential is in the body), so together they may hold at most an eighth of the slots;
        # the rest stay free for clients with a token however many logins trickle their bodies.
        self.login_limit = max(1, self.limit // 8)
        self.logins = 0
        self.by_token: dict[str, int] = {}
        self.trimmer = Trimmer(lambda: self.active > 0)

    # -- the plan ---------------------------------------------------------------------------

    def plan(self, head: Head) -> Plan:
        started = time.perf_counter()
        path = head.path
        route = data.match(path)
        vault = None if route is not None else self.transit.match(path)
        record = AccessRecord()  # its fields set one by one: keywords cost 0.3 us more
        record.request_id = head.request_id
        proxies = self.proxies
        record.remote_addr = head.peer if proxies is None else proxies.client(head)
        plan = Plan(Kind.APP, head, record, started, route, vault)
        plan.counted = head.path not in _UNLIMITED
        try:
            plan.token = token = self._admit(head, route, vault, plan.counted)
        except (errors.ApiError, KeyStoreError) as exc:
            plan.kind, plan.refused, plan.error = Kind.REFUSE, True, errors.api_error(exc)
            return plan
        svc = self.svc
        if route is not None:
            plan.kind = Kind.DATA
            if svc is not None:
                plan.whole = self._whole(svc, route, head)
        elif vault is not None:
            plan.kind = Kind.TRANSIT
            if svc is not None and token is not None:
                if not head.chunked:
                    plan.whole = self.transit.whole(vault, head)
                if svc.audit is not None:  # the values its record names by HMAC, collected
                    record.aads, record.contexts = set(), set()
        elif not plan.counted:
            plan.kind = Kind.OPEN
        if token is not None and token.num_uses:
            plan.whole = 0  # its use is a keystore write, made off the loop (``_use``)
        return plan

    def _admit(
        self,
        head: Head,
        route: data.Route | None,
        vault: transit.Route | None,
        counted: bool,
    ) -> TokenInfo | None:
        """Everything decided from the head: the token if any, or the refusal."""
        if head.error is not None:
            raise errors.bad_request(head.error)
        if head.size > self.max_header_bytes:
            raise errors.headers_too_large(self.max_header_bytes)
        if b"%2f" in head.raw_path.lower():
            # Routing happens on the decoded path: an encoded slash would let a request
            # slip past an ACL that a proxy applies to the raw one.
            raise errors.bad_request("encoded slashes (%2F) are not allowed in the path")
        svc, path, length = self.svc, head.path, head.length or 0
        authorization = None if head.authorization is None else head.authorization.decode("latin-1")
        if vault is not None:
            # The Transit API: Vault's tokens and refusals (403), its own body limit.
            token = None
            if svc is not None and vault.token:
                if self.refuse_stale:
                    self._fresh(svc)
                token = transit.authenticate(svc.store, head.vault_token, authorization)
            if length > self.max_json_bytes:
                raise errors.too_large(self.max_json_bytes)
        elif not path.startswith(_API):
            token = None
        elif svc is None:
            raise errors.keystore_unavailable()
        else:
            if self.refuse_stale:
                self._fresh(svc)
            token = _auth.authenticate(svc.store, authorization)
            if route is None and (path.startswith(_ADMIN) or _manages_tokens(path)):
                _auth.require_admin(token)
        if route is None and vault is None and length > MAX_OTHER_BODY:
            raise errors.too_large(MAX_OTHER_BODY)  # beyond any admin body: refused unread
        trail = None if svc is None else svc.audit
        if token is not None and trail is not None and trail.failing:
            # Mode required: nothing is served that could not be put on record.
            _metrics.AUTH_FAILURES.labels("audit_unavailable").inc()
            raise errors.audit_unavailable()
        if counted and self.active >= self.limit:
            raise errors.overloaded()
        if vault in transit.LOGINS and self.logins >= self.login_limit:
            raise errors.overloaded()
        if token is not None and self.by_token.get(token.id, 0) >= self.per_token:
            _metrics.AUTH_FAILURES.labels("token_limit").inc()
            raise errors.too_many_for_token(self.per_token)
        return token

    def _fresh(self, svc: Services) -> None:
        """Before a token is looked up: 503 if the keystore has been silent too long (the
        token may have been revoked since) and the operator chose to refuse then. One clock
        read and a comparison."""
        if self.refuse_stale and svc.store.stale(self.max_cache_age):
            _metrics.AUTH_FAILURES.labels("keystore_stale").inc()
            raise errors.keystore_stale()

    def _whole(self, svc: Services, route: data.Route, head: Head) -> int:
        """The largest body of a data request the protocol may answer itself: a single-shot
        encrypt, a decrypt or an HMAC, answered once its body has come, in the default
        transport."""
        if head.method != "POST" or head.duplex or head.chunked or DRAINING.is_set():
            return 0
        whole = min(data.WHOLE_MAX, svc.crypto.inline_below - 1)
        if route is data.ENCRYPT_ROUTE:
            return min(whole, svc.settings.max_single_bytes) if head.query == _SINGLE else 0
        if route is data.HMAC_ROUTE or route is data.VERIFY_ROUTE:
            return whole  # one tag, or one per record: no more bytes out than in, plus tags
        return whole + _ENVELOPE_MAX if not head.query else 0

    # -- the protocol's side (http.Planner) --------------------------------------------------

    def begin(self, plan: Plan) -> None:
        self._take(plan)

    def answer(self, plan: Plan, body: bytes | None) -> errors.Whole | None:
        try:
            answer = self._answer(plan, body)
        except BaseException:
            self._answered(plan)
            raise
        if answer is None:
            # Its sealing needs the keystore first, which the event loop never waits for
            # (``UsageMeter.bind_loop``): the protocol hands it to the ASGI path, which asks
            # off the loop; the plan keeps its slot and is recorded there.
            return None
        self._answered(plan)
        trail = None if self.svc is None else self.svc.audit
        if plan.ticket and trail is not None and trail.required and answer.status < 400:
            # No success leaves before its record: the protocol writes the turn's records
            # together before the turn's answers go out (``http.Options.recorded``), and drops
            # the connection of an answer whose record could not be written.
            answer.ticket = plan.ticket
        return answer

    def _answered(self, plan: Plan) -> None:
        if not plan.refused:
            _metrics.count_lane()
        self._give(plan)
        self.record(plan, plan.vault if plan.refused else plan.route or plan.vault)

    def _answer(self, plan: Plan, body: bytes | None) -> errors.Whole | None:
        if plan.refused:
            assert plan.error is not None
            return self._refused(plan, plan.error, plan.head.has_body)
        if body is None:  # the protocol's receive deadline passed
            return self._refused(plan, errors.timeout(), close=True)
        svc, token = self.svc, plan.token
        assert svc is not None
        assert token is not None
        if plan.route is not None:
            return data.answer(svc, plan.route, token, plan.head, plan.log, body)
        assert plan.vault is not None
        return self.transit.answer(svc, token, plan.head, plan.log, body)

    def abandon(self, plan: Plan) -> None:
        plan.log.error = "client_disconnected"
        self._give(plan)
        self.record(plan, plan.route or plan.vault)

    def connection_refused(self, reason: str) -> None:
        _metrics.CONNECTIONS_REFUSED.labels(reason).inc()

    def _refused(self, plan: Plan, error: errors.ApiError, close: bool) -> errors.Whole:
        plan.log.status, plan.log.error = error.status, error.code
        return error.whole(close, vault=plan.vault is not None)

    # -- the ASGI path ------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        plan: Plan | None = scope.get("sealflow.plan")
        if plan is None:
            plan = self.plan(Head.from_scope(scope))
        scope["sealflow.head"] = plan.head  # the protocol's scopes have it; in-process ones too
        log = scope["sealflow.log"] = plan.log
        svc, token = self.svc, plan.token
        if token is not None and token.num_uses and svc is not None:
            token = await self._use(svc, plan, token)
        kind = plan.kind
        if kind is Kind.REFUSE:
            assert plan.error is not None
            if plan.vault is not None:
                scope["route"] = plan.vault
                await transit.refuse(plan.error, scope, send, log)
            else:
                await refuse(plan.error, scope, send, log)
            self.record(plan, scope.get("route"))
            return
        if kind is Kind.APP:  # for FastAPI's routes (admin._deps)
            scope["sealflow.token"] = token
        self._take(plan)
        asked = None
        if svc is not None and svc.audit is not None and token is not None:
            send = self._auditing(svc.audit, plan, scope, send)
            # Who asks, for the records of the keystore changes this request makes.
            asked = _audit.asking.set(self._asker(plan))
        try:
            if kind is Kind.DATA and svc is not None and token is not None:
                assert plan.route is not None
                await data.serve(svc, plan.route, token, plan.head, log, scope, receive, send)
            elif kind is Kind.TRANSIT:
                assert plan.vault is not None
                app = self._transit(svc, plan.vault, token)
                if svc is None:
                    await app(scope, receive, send)
                else:
                    await self._watched(svc, app, scope, receive, send, log, vault=True)
            elif kind is Kind.APP and svc is not None:
                await self._watched(svc, self.app, scope, receive, send, log)
            else:
                await self.app(scope, receive, _noting_status(send, log))
        finally:
            if asked is not None:
                _audit.asking.reset(asked)
            self._give(plan)
            self.record(plan, scope.get("route"))

    async def _use(self, svc: Services, plan: Plan, token: TokenInfo) -> TokenInfo | None:
        """One use of a token with a use limit, counted in the keystore before a byte of the
        body is read (exact across workers and replicas: ``KeyStore.use_token``), off the
        event loop: the token after it, or None with the plan turned into its refusal (no use
        left: ``token_expired``; revoked meanwhile: unknown; keystore down: 503)."""
        try:
            used = await asyncio.to_thread(svc.store.use_token, token.id)
        except (TokenExpired, TokenNotFound, KeyStoreError) as exc:
            vault = plan.vault is not None
            if isinstance(exc, TokenExpired):
                _metrics.AUTH_FAILURES.labels("expired").inc()
                error = transit.token_expired() if vault else errors.token_expired()
            elif isinstance(exc, TokenNotFound):
                _metrics.AUTH_FAILURES.labels("invalid").inc()
                error = transit.permission_denied() if vault else errors.unauthorized()
            else:
                error = errors.api_error(exc)
            plan.kind, plan.refused, plan.error, plan.token = Kind.REFUSE, True, error, None
            return None
        plan.token = used
        return used

    def _auditing(self, trail: _audit.Trail, plan: Plan, scope: Scope, send: Send) -> Send:
        """``send``, with the request's record written before its success can leave (mode
        required). A response of a declared length is put on record as it starts, and
        replaced by 503 ``audit_unavailable`` if the record cannot be written; a streamed one
        (its length unknown until it ends) before its last piece, and if the record cannot be
        written then, the connection is dropped instead: the client never sees it end."""
        replaced = False
        vault = plan.vault is not None

        async def sending(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the app's response, after its replacement went out
            log = plan.log
            if message["type"] == "http.response.start":
                status = message["status"]
                length = _declared_length(message.get("headers", ()))
                if status < 400 and length is not None and not plan.ticket:
                    log.status = status
                    if log.bytes_out is None:
                        log.bytes_out = length
                    if log.bytes_in is None:  # counted as it ends; a success read it all
                        log.bytes_in = plan.head.length
                    self._audit(plan, scope.get("route"), log.fields(), None)
                    if not await trail.confirmed(plan.ticket):
                        replaced = True
                        error = errors.audit_unavailable()
                        log.status, log.error = error.status, error.code
                        body, headers = error.rendered(vault)
                        await send(
                            {"type": "http.response.start", "status": 503, "headers": headers}
                        )
                        await send({"type": "http.response.body", "body": body})
                        return
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                if not plan.ticket:
                    self._audit(plan, scope.get("route"), log.fields(), None)
                if plan.ticket and log.status < 400 and not await trail.confirmed(plan.ticket):
                    log.error = "audit_unavailable"
                    drop_connection(scope)
                    return
            await send(message)

        return sending

    def _asker(self, plan: Plan) -> dict[str, object]:
        fields = _audit.caller(plan.token)
        fields["method"] = plan.head.method
        log = plan.log
        if log.request_id is not None:
            fields["request_id"] = log.request_id
        if log.remote_addr is not None:
            fields["remote_addr"] = log.remote_addr
        return fields

    def _transit(
        self, svc: Services | None, route: transit.Route, token: TokenInfo | None
    ) -> ASGIApp:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await self.transit.serve(svc, route, token, scope, receive, send)

        return app

    def _take(self, plan: Plan) -> None:
        if plan.taken or not plan.counted:
            return
        plan.taken = True
        self.active += 1
        if plan.vault in transit.LOGINS:
            self.logins += 1
        token = plan.token
        if token is not None:
            self.by_token[token.id] = self.by_token.get(token.id, 0) + 1

    def _give(self, plan: Plan) -> None:
        if not plan.taken:
            return
        plan.taken = False
        self.active -= 1
        if plan.vault in transit.LOGINS:
            self.logins -= 1
        if not self.active:
            self.trimmer.idle()
        token = plan.token
        if token is not None:
            left = self.by_token[token.id] - 1
            if left:
                self.by_token[token.id] = left
            else:
                del self.by_token[token.id]

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

    # -- the record ---------------------------------------------------------------------------

    def record(self, plan: Plan, route: object) -> None:
        """The request's metrics, access-log line and audit record, whichever path answered
        it."""
        ended = time.perf_counter()
        elapsed = ended - plan.started
        log = plan.log
        template = getattr(route, "path", "other")
        method = plan.head.method
        _metrics.count_request(template, method, log.status, elapsed)
        log.method, log.route, log.duration_ms = method, template, round(elapsed * 1000, 3)
        access, svc = self.access, self.svc
        audit = svc is not None and svc.audit is not None and not plan.ticket
        logged = access.enabled
        if logged or audit:
            fields = log.fields()  # one dict for both: the audit record adds to it
            if logged:
                access.write(fields, ended)
            if audit:
                self._audit(plan, route, fields, access.wall_clock + ended)

    def _audit(
        self, plan: Plan, route: object, fields: dict[str, object], when: float | None
    ) -> None:
        """The request's audit record (a request with a token, or a failed authentication),
        from its access-log ``fields`` (``AccessRecord.fields``, changed here); its ticket in
        ``plan.ticket``."""
        svc = self.svc
        assert svc is not None
        assert svc.audit is not None
        trail, token, error = svc.audit, plan.token, plan.error
        del fields["duration_ms"]  # the access log's, as are these when set
        fields.pop("duplex", None)
        if token is None:
            if error is None or error.code not in _AUTH_FAILURES:
                return  # no token, and not a failed authentication: probes, docs
            fields["type"] = "auth_failure"
            secret = _presented(plan.head)
            if secret:
                fields["token_hmac"] = trail.hmac(secret)
        elif error is not None and error.code == "audit_unavailable":
            return  # could not be written anyway: counted in the metrics
        else:
            fields["type"] = "request"
            fields["operation"] = _operation(plan, route)
            fields["accessor"] = token.id
            if token.label:
                fields["label"] = token.label
            if "key" not in fields and plan.route not in (None, data.DECRYPT_ANY_ROUTE):
                path = plan.head.path  # /v1/keys/{name}/encrypt|decrypt: refused before its key
                fields["key"] = path[len(_ADMIN) + 1 : path.rindex("/")]
            log = plan.log
            if log.aads is None:  # native: X-AAD as sent (base64)
                aad = plan.head.x_aad
                if aad:
                    fields["aad_hmac"] = trail.hmac(aad)
            elif log.aads:  # Transit (which ignores X-AAD): its associated_data, as sent
                fields["aad_hmac"] = _hmacs(trail, log.aads)
            if log.contexts:
                fields["context_hmac"] = _hmacs(trail, log.contexts)
        fields["method"] = plan.head.method
        template = getattr(route or plan.route or plan.vault, "path", None)
        if template is None:  # the template, never the raw path; unknown: left out
            fields.pop("route", None)
        else:
            fields["route"] = template
        status = plan.log.status or (error.status if error is not None else 0)
        fields["status"] = status or 499  # 499: the client went away before an answer (nginx)
        plan.ticket = trail.record(fields, when)


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


# Refusals that are failed authentications (a token missing, malformed, unknown, expired or used
# up; Vault's 403 for the same on Transit).
_AUTH_FAILURES = frozenset(("unauthorized", "forbidden", "token_expired"))
# What a request of a route does, for the audit record: (method, template) of the native
# admin routes; Transit's by its route's kind; the data routes by their direction.
_ADMIN_OPERATIONS = {
    ("POST", "/v1/keys"): "key_create",
    ("GET", "/v1/keys"): "key_list",
    ("GET", "/v1/keys/{name}"): "key_read",
    ("PATCH", "/v1/keys/{name}"): "key_config",
    ("DELETE", "/v1/keys/{name}"): "key_delete",
    ("POST", "/v1/keys/{name}/rotate"): "key_rotate",
    ("GET", "/v1/keys/{name}/export"): "export",
    ("POST", "/v1/keys/{name}/import"): "key_import",
    ("POST", "/v1/keys/{name}/import-version"): "key_import_version",
    ("POST", "/v1/keys/{name}/trim"): "key_trim",
    ("POST", "/v1/keys/{name}/soft-delete"): "key_soft_delete",
    ("POST", "/v1/keys/{name}/restore"): "key_soft_delete_restore",
    ("GET", "/v1/keys/{name}/byok-export/{destination}"): "byok_export",
    ("GET", "/v1/wrapping-key"): "wrapping_key_read",
    ("POST", "/v1/tokens"): "token_create",
    ("GET", "/v1/tokens"): "token_list",
    ("GET", "/v1/tokens/self"): "token_lookup",
    ("POST", "/v1/tokens/self/renew"): "token_renew",
    ("DELETE", "/v1/tokens/self"): "token_revoke",
    ("DELETE", "/v1/tokens/{accessor}"): "token_revoke",
}
_TRANSIT_OPERATIONS = {
    "keys": "key_list",
    "config": "key_config",
    "rotate": "key_rotate",
    "backup": "key_backup",
    "restore": "key_restore",
    "import": "key_import",
    "import_version": "key_import_version",
    "trim": "key_trim",
    "soft-delete": "key_soft_delete",
    "soft-delete-restore": "key_soft_delete_restore",
    "wrapping_key": "wrapping_key_read",
    "config_keys": "config_keys",
    "create": "token_create",
    "create-orphan": "token_create",
    "lookup": "token_lookup",
    "lookup-self": "token_lookup",
    "lookup-accessor": "token_lookup",
    "renew": "token_renew",
    "renew-self": "token_renew",
    "renew-accessor": "token_renew",
    "revoke": "token_revoke",
    "revoke-self": "token_revoke",
    "revoke-accessor": "token_revoke",
}


def _operation(plan: Plan, route: object) -> str:
    method = plan.head.method
    if plan.route is not None:
        return plan.route.operation
    if plan.vault is not None:
        kind = plan.vault.kind
        if kind == "key":
            return {"GET": "key_read", "DELETE": "key_delete"}.get(method, "key_create")
        return _TRANSIT_OPERATIONS.get(kind, kind)
    template = getattr(route, "path", "")
    return _ADMIN_OPERATIONS.get((method, template), method.lower())


def _manages_tokens(path: str) -> bool:
    """A native token route for ``admin`` only: all but a token's own (``/v1/tokens/self``),
    which every token may use (admin._tokens)."""
    return path.startswith(_TOKENS) and not (path == _SELF or path.startswith(_SELF + "/"))


def _hmacs(trail: _audit.Trail, values: set[str]) -> str | list[str]:
    """The HMAC of the one value, or the sorted HMACs of several (a batch's distinct ones)."""
    if len(values) == 1:
        return trail.hmac(next(iter(values)))
    return sorted({trail.hmac(value) for value in values})


def _presented(head: Head) -> str | None:
    """The token a failed authentication presented (only ever HMAC'd into its record)."""
    if head.vault_token:
        return head.vault_token.decode("latin-1")
    if head.authorization is not None:
        return _auth.bearer(head.authorization.decode("latin-1")) or None
    return None


def _declared_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """A response's Content-Length, if its app declared one."""
    for name, value in headers:
        if name == b"content-length":
            return int(value)
    return None
