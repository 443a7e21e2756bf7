"""Routing and authorisation of the Vault-Transit-compatible API, as plain ASGI.

Served in front of FastAPI like the data routes (``_front.Front``): a 1 KiB encrypt costs
about as much as FastAPI's routing alone would (docs/BENCHMARKS.md). The front door
authenticates from the head (``authenticate``: ``X-Vault-Token`` or ``Authorization:
Bearer``, 403 ``permission denied`` like Vault) before a byte of the body is read; ``serve``
then checks the scope the route needs against the key it names, reads the JSON body (at most
``max_json_bytes``) and answers in Vault's envelope.

Scopes: ``encrypt:<glob>`` covers encrypt and datakey, ``decrypt:<glob>`` decrypt, rewrap
needs both; reading a key's metadata needs either (clients read ``latest_version``) or
``admin``; every other key route needs ``admin`` (trim and soft delete among them), and what
lets material leave (``export/``, and ``exportable`` asked for on create or ``config``) or come
in (``keys/:name/import`` and ``import_version``, and ``byok-export`` of its source) needs
``export:<glob>`` besides, which ``admin`` does not imply. The public half of the import
wrapping key (``wrapping_key``) is for any token.

Outside the mount, Vault's token routes (``_token_routes``): every token looks up, renews and
revokes itself; the routes that create tokens or name another token manage tokens, so they need
``admin``, refused before the body is read.

And Vault's AppRole routes (``APPROLE_ROUTES``): ``login`` (``_approle_login``) needs no token
(its body, read with a small limit, is the credential); managing roles and secret ids
(``_approle``) needs ``admin``, refused before the body is read. Vault's cert routes
(``CERT_ROUTES``) likewise: ``login`` (``_cert_login``) needs no token (the connection's TLS
client certificate is the credential), managing certificate roles (``_cert``) needs ``admin``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

from starlette.types import Receive, Scope, Send

from sealflow.service.keystore import KeyStore, TokenInfo, WouldWait

from .. import _auth, _metrics, errors
from .._budget import Hold
from .._logging import AccessRecord
from .._state import Services
from ..errors import ApiError
from ..http import LIST_METHOD as LIST
from ..http import Head
from . import (
    _approle,
    _approle_login,
    _backup,
    _cert,
    _cert_login,
    _checks,
    _data,
    _encrypt,
    _groups,
    _hmac,
    _hmac_column,
    _import,
    _items,
    _key_export,
    _keys,
    _lifecycle,
    _login,
    _oaep,
    _public,
    _sign,
    _signer,
    _sys,
    _token_routes,
    _utility,
    _verify,
    _wire,
)
from ._wire import Reply

# The largest encrypt body the protocol answers itself (``Transit.answer``), at once on the event
# loop, as the ASGI path's ``_encrypt.encrypt`` runs it (inline below the pool's threshold).
WHOLE_MAX = 64 * 1024
HEALTH_PATH = "/v1/sys/health"
VAULT_AUTH = "/v1/auth/token/"  # Vault's token routes (``TOKEN_ROUTES``) are under it
_WRITE = frozenset(("POST", "PUT"))
_WHOLE = frozenset(
    ("encrypt", "sign", "hmac", "verify")
)  # the routes the protocol answers itself (``answer``)


class Route:
    """A Transit route; ``path`` is its template in the access log and metrics."""

    __slots__ = ("kind", "methods", "path", "token")

    def __init__(self, kind: str, path: str, methods: frozenset[str], token: bool = True) -> None:
        self.kind = kind
        self.path = path
        self.methods = methods
        self.token = token  # whether it needs one (health does not)


HEALTH = Route("health", HEALTH_PATH, frozenset(("GET", "HEAD")), token=False)
# Under VAULT_AUTH, by name (``_token_routes``). Vault takes them as updates (POST, PUT), and
# lookup-self as a read.
TOKEN_ROUTES = {
    name: Route(name, VAULT_AUTH + name, frozenset(("GET",)) if name == "lookup-self" else _WRITE)
    for name in sorted(_token_routes.KINDS)
}


class Transit:
    """The routes under one mount (``SEALFLOW_TRANSIT_MOUNT``)."""

    def __init__(self, mount: str) -> None:
        self.mount = mount
        self._under = mount + "/"
        get, any_write = frozenset(("GET",)), _WRITE
        templates = {
            "encrypt": (f"{mount}/encrypt/{{name}}", any_write),
            "decrypt": (f"{mount}/decrypt/{{name}}", any_write),
            "rewrap": (f"{mount}/rewrap/{{name}}", any_write),
            "datakey": (f"{mount}/datakey/{{type}}/{{name}}", any_write),
            "keys": (f"{mount}/keys", get | {LIST}),
            "key": (f"{mount}/keys/{{name}}", get | any_write | {"DELETE"}),
            "rotate": (f"{mount}/keys/{{name}}/rotate", any_write),
            "config": (f"{mount}/keys/{{name}}/config", any_write),
            "import": (f"{mount}/keys/{{name}}/import", any_write),
            "import_version": (f"{mount}/keys/{{name}}/import_version", any_write),
            "trim": (f"{mount}/keys/{{name}}/trim", any_write),
            "soft-delete": (f"{mount}/keys/{{name}}/soft-delete", frozenset(("DELETE",))),
            "soft-delete-restore": (f"{mount}/keys/{{name}}/soft-delete-restore", any_write),
            "wrapping_key": (f"{mount}/wrapping_key", get),
            "config_keys": (f"{mount}/config/keys", get | any_write),
            "hmac": (f"{mount}/hmac/{{name}}[/{{algorithm}}]", any_write),
            "verify": (f"{mount}/verify/{{name}}[/{{algorithm}}]", any_write),
            "hash": (f"{mount}/hash[/{{algorithm}}]", any_write),
            "sign": (f"{mount}/sign/{{name}}[/{{algorithm}}]", any_write),
            "random": (f"{mount}/random[/{{source}}][/{{bytes}}]", any_write),
            "export": (f"{mount}/export/{{type}}/{{name}}[/{{version}}]", get),
            "backup": (f"{mount}/backup/{{name}}", get),
            "restore": (f"{mount}/restore[/{{name}}]", any_write),
            "byok_export": (f"{mount}/byok-export/{{destination}}/{{source}}[/{{version}}]", get),
            "other": (f"{mount}/{{path}}", frozenset()),
        }
        self.routes = {kind: Route(kind, *spec) for kind, spec in templates.items()}

    def match(self, path: str) -> Route | None:
        if path.startswith(self._under):
            return self.routes[_kind(path[len(self._under) :].split("/"))]
        if path == HEALTH_PATH:
            return HEALTH
        if path.startswith(VAULT_AUTH):
            return TOKEN_ROUTES.get(path[len(VAULT_AUTH) :])
        if path.startswith(_approle.PREFIX):
            kind = _approle.kind(path[len(_approle.PREFIX) :].split("/"))
            return APPROLE_ROUTES[kind or "approle_other"]
        if path.startswith(_cert.PREFIX):
            return CERT_ROUTES[_cert.kind(path[len(_cert.PREFIX) :].split("/")) or "cert_other"]
        return None

    async def serve(
        self,
        svc: Services | None,
        route: Route,
        token: TokenInfo | None,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        scope["route"] = route
        log: AccessRecord = scope["sealflow.log"]
        method: str = scope["method"]
        try:
            if route is HEALTH:
                if method not in route.methods:
                    raise _unsupported_operation()
                status, body = _sys.health(svc, scope["query_string"])
                await _wire.respond(send, status, body, log, head=method == "HEAD")
                return
            if route in LOGINS and svc is not None:
                if method not in route.methods:
                    raise _unsupported_operation()
                # No token: the credential is the body (AppRole) or the connection's client
                # certificate (cert); a body is read with a small limit.
                with svc.budget.hold() as hold:
                    fields = _wire.parse(await _read(receive, _login.LOGIN_MAX, hold, log), hold)
                    if route is APPROLE_LOGIN:
                        status, reply = await _approle_login.login(svc, fields, log)
                    else:
                        cert = scope["sealflow.head"].peer_cert
                        status, reply = await _cert_login.login(svc, cert, fields, log)
                await _wire.respond(send, status, reply, log, head=False)
                return
            if svc is None or token is None:
                raise errors.keystore_unavailable()
            if method not in route.methods:
                # Vault routes a LIST to the path with a slash appended: only a listing matches.
                unknown = not route.methods or method == LIST
                if route.kind in ("hash", "random"):  # OpenBao's patterns decide
                    unknown = not _utility.routed(scope["path"][len(self._under) :], method)
                raise _unsupported_path() if unknown else _unsupported_operation()
        except Exception as exc:  # every error leaves in Vault's shape, unexpected ones as 500
            await _wire.refuse(errors.api_error(exc), scope, send, log)
            return
        # The body, what parsing it makes and the answer are held until the answer is sent.
        with svc.budget.hold() as hold:
            try:
                status, answer = await self._answer(svc, route, token, scope, receive, hold, log)
            except Exception as exc:  # as above
                await _wire.refuse(errors.api_error(exc), scope, send, log)
                return
            await _wire.respond(send, status, answer, log, head=False)

    def whole(self, route: Route, head: Head) -> int:
        """The largest body of this request the protocol may answer itself (``answer``)."""
        return WHOLE_MAX if route.kind in _WHOLE and head.method in _WRITE else 0

    def answer(
        self,
        svc: Services,
        token: TokenInfo,
        head: Head,
        log: AccessRecord,
        body: bytes,
    ) -> errors.Whole | None:
        """The fast answer to a small encrypt or sign (``whole``): ``serve``'s steps for it;
        None if it must wait for the keystore, or the work is not small (then the ASGI path
        serves it)."""
        kind, _, tail = head.path[len(self._under) :].partition("/")
        name, _, algorithm = tail.partition("/") if kind != "encrypt" else (tail, "", "")
        log.key = name
        try:
            _allow(kind, token, name)
            if kind == "encrypt" and _oaep.is_rsa(svc.store, name):
                return None  # RSA-OAEP: in a thread, on the ASGI path
            log.bytes_in = len(body)  # as the ASGI path reads it: once allowed
            answer: Reply
            if kind in _KEYED:
                status, answer = _mac_now(svc, kind, name, algorithm, body)
            elif kind == "sign":
                status, answer = _sign.sign_now(svc, name, algorithm, body)
            else:
                status, answer = _encrypt.encrypt_now(svc, name, body, log)
        except WouldWait:
            return None  # its lease needs the keystore: ``serve`` asks off the event loop
        except Exception as exc:  # as in serve: every error leaves in Vault's shape
            error = errors.api_error(exc)
            log.status, log.error = error.status, error.code
            return error.whole(close=head.has_body, vault=True)  # as ``_wire.refuse`` does
        pieces = (answer,) if isinstance(answer, bytes) else answer
        log.status, log.bytes_out = status, sum(map(len, pieces))
        return errors.Whole(status, _wire.HEADER_LINES % log.bytes_out, pieces)

    async def _answer(
        self,
        svc: Services,
        route: Route,
        token: TokenInfo,
        scope: Scope,
        receive: Receive,
        hold: Hold,
        log: AccessRecord,
    ) -> tuple[int, Reply]:
        store, kind, method = svc.store, route.kind, scope["method"]
        limit = svc.settings.max_json_bytes
        if route is TOKEN_ROUTES.get(kind):

            async def parsed() -> _wire.Body:
                return _wire.parse(await _read(receive, limit, hold, log), hold)

            secret = _secret(scope) or ""
            return await _token_routes.answer(store, kind, token, secret, parsed, log)
        if kind in APPROLE_ROUTES:
            _admin(token)  # before the body is read
            if kind in ("approle_roles", "approle_secret_id") and method == "GET":
                if not _listing(scope):
                    raise _unsupported_operation()
                method = LIST
            read = functools.partial(_read_json, receive, limit, hold, log)
            return await _approle.manage(svc, kind, method, scope["path"], token, read)
        if kind in CERT_ROUTES:
            _admin(token)  # before the body is read
            if kind == "cert_roles" and method != LIST and not _listing(scope):
                raise _unsupported_operation()
            read = functools.partial(_read_json, receive, limit, hold, log)
            return await _cert.manage(svc, kind, method, scope["path"], token, read)
        if kind == "keys":
            _admin(token)
            query = scope["query_string"]
            if method != LIST and not _utility.listing(query):
                raise _unsupported_operation()
            return 200, await asyncio.to_thread(_utility.key_page, store, query)  # a read
        if kind == "config_keys":
            _admin(token)
            if method == "GET":
                return 200, _utility.config_keys(None)
            return 200, _utility.config_keys(
                _wire.parse(await _read(receive, limit, hold, log), hold)
            )
        if kind == "wrapping_key":  # its public half: any token may read it
            return 200, await _import.wrapping_key(store)
        if kind in ("hash", "random"):  # no key: any token (docs/TRANSIT.md)
            body = await _read(receive, limit, hold, log)
            fields = _wire.parse(body, hold)
            hold.take(len(body))  # the decoded input, smaller than its body
            work = functools.partial(_utility.answer, kind, scope["path"][len(self._under) :])
            large = len(body) > WHOLE_MAX  # hashed off the event loop
            return 200, await asyncio.to_thread(work, fields) if large else work(fields)
        parts = scope["path"][len(self._under) :].split("/")
        if kind == "restore":
            _admin(token)  # before the body is read; export on the name once it is known
            fields = _wire.parse(await _read(receive, limit, hold, log), hold)
            named = parts[1] if len(parts) == 2 else None

            def allow(name: str) -> None:
                log.key = name
                _allow("export", token, name)

            restored = await _backup.restore(store, named, fields, allow)
            svc.usage.forget(restored)  # what it held of a key force replaced: not the new one's
            return 204, b""
        name = parts[2] if kind in ("export", "datakey", "byok_export") else parts[1]
        log.key = name
        if kind == "datakey":
            if not _auth.allows(token, "encrypt", name):
                raise _denied()
            body = await _read(receive, limit, hold, log)
            return await _data.datakey(svc, parts[1], name, _wire.parse(body, hold), log)
        if kind == "sign":
            _allow("sign", token, name)  # before the body is read
            fields = _wire.parse(await _read(receive, limit, hold, log), hold)
            return await _sign.sign(svc, name, "/".join(parts[2:]), fields)
        if kind in _KEYED:  # the scope is the path's, as a Vault policy is: from the head
            _allow(kind, token, name)
            body = await _read(receive, limit, hold, log)
            url = parts[2] if len(parts) == 3 else None
            call, fields = _mac_work(svc, kind, name, body, hold, url)
            # A key to read first, a heavy signature verification (``_sign.light``), or a batch
            # larger than a column group of encrypt (``_groups.COLUMN_BYTES``: milliseconds of
            # work), in a thread; the rest is CPU work for the crypto pool, which runs it on the
            # event loop when small, or when the process has one core (a hop only costs there).
            heavy = kind == "verify" and not _sign.light(store, name, fields)
            if len(body) > _groups.COLUMN_BYTES or not _checks.known(store, name) or heavy:
                return 200, await asyncio.to_thread(call)
            return 200, await svc.crypto.run(len(body), call)
        if kind == "export" and parts[1] == "public-key":
            # Public: any token that may verify with the key, or admin (docs/TRANSIT.md).
            if not (_auth.is_admin(token) or _auth.allows(token, "verify", name)):
                raise _denied()
            return 200, await _export_keys(store, parts, name, scope["query_string"])
        operation = _DATA.get(kind)
        if operation is not None:
            _allow(kind, token, name)
            if kind in _RSA and _oaep.is_rsa(store, name):
                operation = _RSA[kind]
            return await operation(svc, name, await _read(receive, limit, hold, log), hold, log)
        if kind == "key" and method == "GET":
            if not _auth.is_admin(token) and not (
                _auth.allows(token, "encrypt", name) or _auth.allows(token, "decrypt", name)
            ):
                raise _denied()
            return 200, await _keys.read(store, name)
        _admin(token)
        if kind in _IMPORTS:  # material comes in: the export scope, as when it leaves
            _allow("export", token, name)
            fields = _wire.parse(await _read(receive, limit, hold, log), hold)
            await _IMPORTS[kind](store, name, fields)
            return 204, b""
        if kind == "byok_export":  # the source's material leaves, wrapped: as an export
            _allow("export", token, name)
            version = parts[3] if len(parts) == 4 else None
            query = scope["query_string"]
            return 200, await asyncio.to_thread(
                _public.byok_export, store, parts[1], name, version, query, log
            )
        if kind == "export":
            _allow("export", token, name)
            rsa = parts[1] == "encryption-key" and _oaep.is_rsa(store, name)
            if parts[1] in _key_export.TYPES or rsa:
                return 200, await _export_keys(store, parts, name, scope["query_string"])
            version = parts[3] if len(parts) == 4 else None
            return 200, await asyncio.to_thread(_keys.export, store, parts[1], name, version)
        if kind == "backup":
            _allow("export", token, name)
            return 200, _backup.backup(store, name)
        body = await _read(receive, limit, hold, log) if method in _WRITE else b""
        if kind == "trim":
            trimmed = await _lifecycle.trim(store, name, _wire.parse(body, hold))
            _signer.forget()  # a removed version's private key: not kept in a cache either
            return 200, trimmed
        if kind == "soft-delete":
            return await _lifecycle.soft_delete(store, name)
        if kind == "soft-delete-restore":
            return await _lifecycle.restore(store, name)
        if kind == "rotate":
            return 200, await _keys.rotate(store, name)
        if method == "DELETE":
            await _keys.delete(store, name)
            svc.usage.forget(name)  # sealings this process holds for it are not a new key's
            _signer.forget()  # nor its private keys
            return 204, b""
        fields = _wire.parse(body, hold)
        if _keys.asks_export(fields):  # checked before a field is, so a refusal writes nothing
            _allow("export", token, name)
        if kind == "config":
            return 200, await _keys.config(store, name, fields)
        return 200, await _keys.create(store, name, fields)


_DATA: dict[
    str, Callable[[Services, str, bytes, Hold, AccessRecord], Awaitable[tuple[int, Reply]]]
] = {
    "encrypt": _encrypt.encrypt,
    "decrypt": _data.decrypt,
    "rewrap": _data.rewrap,
}
# RSA keys encrypt and decrypt with OAEP (``_oaep``), not the AEAD paths.
_RSA: dict[
    str, Callable[[Services, str, bytes, Hold, AccessRecord], Awaitable[tuple[int, Reply]]]
] = {"encrypt": _oaep.encrypt, "decrypt": _oaep.decrypt}
_IMPORTS: dict[str, Callable[[KeyStore, str, _wire.Body], Awaitable[None]]] = {
    "import": _import.import_key,
    "import_version": _import.import_version,
}
_SCOPES: dict[str, tuple[_auth.Action, ...]] = {
    "sign": ("sign",),
    "encrypt": ("encrypt",),
    "decrypt": ("decrypt",),
    "rewrap": ("decrypt", "encrypt"),
    "export": ("export",),
    "hmac": ("hmac",),
    "verify": ("verify",),
}


def _mac_now(svc: Services, kind: str, name: str, algorithm: str, body: bytes) -> tuple[int, Reply]:
    """A small ``hmac`` or HMAC ``verify`` answered on the spot (the protocol's fast answer),
    as the route answers it; WouldWait for a key the cache does not hold, or a signature to
    verify (the ASGI path serves those)."""
    if not _checks.known(svc.store, name) or (kind == "verify" and b"signature" in body):
        raise WouldWait("not a small HMAC")
    with svc.budget.hold() as hold:
        return 200, _mac_work(svc, kind, name, body, hold, algorithm or None)[0]()


def _mac_work(
    svc: Services, kind: str, name: str, body: bytes, hold: Hold, url: str | None
) -> tuple[Callable[[], Reply], _wire.Body]:
    """The answer of ``hmac`` or ``verify`` to the body, to run on the loop or a thread, and
    the fields it was parsed into; a batch of more than ``max_batch_items`` is refused here,
    before any item is read. An hmac batch in a usual serialization is not parsed at all
    (``_hmac_column``: the same answer)."""
    limit = svc.settings.max_batch_items
    hold.take(len(body))  # the decoded inputs, smaller than the body
    column = _hmac_column.from_body(body) if kind == "hmac" else None
    if column is not None:  # decoded in one native pass over the body, then counted
        count = len(column.records)
        if count > limit:
            raise _items.too_many_items(limit)
        hold.take(count * _hmac_column.ROW_BYTES)  # the tags and the answer
        return functools.partial(_hmac.generate, svc.store, name, {}, url, column), {}
    fields = _wire.parse(body, hold)
    _hmac.bounded(fields, limit)
    answer = _verify.answer if kind == "verify" else _hmac.generate
    return functools.partial(answer, svc.store, name, fields, url), fields


def _allow(kind: str, token: TokenInfo, name: str) -> None:
    for action in _SCOPES[kind]:
        if not _auth.allows(token, action, name):
            raise _denied()


# Routes of a key with an optional algorithm after its name (``hmac/:name[/:algorithm]``).
_KEYED = frozenset(("hmac", "verify"))
_KEY_ACTIONS = frozenset(
    ("rotate", "config", "import", "import_version", "trim", "soft-delete", "soft-delete-restore")
)


async def _export_keys(store: KeyStore, parts: list[str], name: str, query: bytes) -> bytes:
    """``export/public-key|signing-key/:name[/:version]`` (``_key_export``), ``format`` from
    the query."""
    version = parts[3] if len(parts) == 4 else None
    form = _utility.query_field(query, "format")
    return await asyncio.to_thread(_key_export.export, store, parts[1], name, version, form)


def _kind(parts: list[str]) -> str:
    n, first = len(parts), parts[0]
    if first in ("hash", "random"):  # OpenBao's patterns: segments may be empty
        return _utility.kind("/".join(parts)) or "other"
    if not all(parts[1:]):
        return "keys" if parts == ["keys", ""] else "other"
    if first in _DATA and n == 2:
        return first
    if first == "sign" and n >= 2:  # the hash algorithm may hold '/' (OpenBao's .+)
        return first
    if first == "keys":
        if n == 1:
            return "keys"
        if n == 2:
            return "key"
        if n == 3 and parts[2] in _KEY_ACTIONS:
            return parts[2]
    if parts == ["wrapping_key"]:
        return "wrapping_key"
    if parts == ["config", "keys"]:
        return "config_keys"
    if first == "export" and n in (3, 4):
        return "export"
    if (first == "backup" and n == 2) or (first == "restore" and n in (1, 2)):
        return first
    if first == "byok-export" and n in (3, 4):
        return "byok_export"
    if first == "datakey" and n == 3:
        return "datakey"
    if first in _KEYED and n in (2, 3):
        return first
    return "other"


def authenticate(
    store: KeyStore, vault_token: bytes | None, authorization: str | None
) -> TokenInfo:
    """The live token of ``X-Vault-Token`` (first) or ``Authorization: Bearer``; else 403, as
    Vault refuses a token it does not know, an expired one included (with the code
    ``token_expired`` for the log and the audit trail; the body is Vault's either way)."""
    secret = token_secret(vault_token, authorization)
    if not secret:
        _metrics.AUTH_FAILURES.labels("missing").inc()
        raise _wire.permission_denied()
    token = store.find_token(secret)
    if token is None:
        _metrics.AUTH_FAILURES.labels("invalid").inc()
        raise _wire.permission_denied()
    if not _auth.usable(token):
        raise _wire.token_expired()
    return token


def token_secret(vault_token: bytes | None, authorization: str | None) -> str | None:
    """The secret a Transit request presents: ``X-Vault-Token`` first, as Vault reads it, else
    ``Authorization: Bearer``; None (or empty) if neither. No side effect."""
    if vault_token is not None:
        return vault_token.decode("latin-1").strip()
    if authorization is not None:
        return _auth.bearer(authorization)
    return None


def _secret(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-vault-token":
            return str(value.decode("latin-1").strip())
    for name, value in scope["headers"]:
        if name == b"authorization":
            return str(value.decode("latin-1").partition(" ")[2].strip())
    return None


async def _read(receive: Receive, limit: int, hold: Hold, log: AccessRecord) -> bytes:
    """The whole body, refused with 413 as soon as it exceeds ``limit``, and with 503 as soon as
    the memory budget cannot hold it (paid as it arrives, as the data routes pay: a declared
    length buys nothing before its bytes come); its size in ``log.bytes_in``."""
    pieces: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ApiError(400, "bad_request", "the client disconnected")
        piece: bytes = message.get("body", b"")
        size += len(piece)
        if size > limit:
            raise errors.too_large(limit)
        hold.take(len(piece))
        pieces.append(piece)
        if not message.get("more_body", False):
            log.bytes_in = size
            if len(pieces) == 1:
                return pieces[0]
            hold.take(size)  # the joined copy, while the pieces still exist
            whole = b"".join(pieces)
            pieces.clear()
            hold.give_back(size)
            return whole


def _admin(token: TokenInfo) -> None:
    if not _auth.is_admin(token):  # the native rule, refused in Vault's words
        raise _denied()


def _denied() -> ApiError:
    _metrics.AUTH_FAILURES.labels("forbidden").inc()
    return _wire.permission_denied()


def _unsupported_path() -> ApiError:
    return ApiError(404, "not_found", _wire.framework_error("unsupported path"))


def _unsupported_operation() -> ApiError:
    return ApiError(405, "method_not_allowed", _wire.framework_error("unsupported operation"))


async def _read_json(receive: Receive, limit: int, hold: Hold, log: AccessRecord) -> _wire.Body:
    return _wire.parse(await _read(receive, limit, hold, log), hold)


def _listing(scope: Scope) -> bool:
    return scope["query_string"] in (b"list=true", b"list=1")


# Vault's AppRole routes (``_approle``), by kind; the login alone needs no token.
APPROLE_ROUTES = {
    kind: Route(kind, _approle.PREFIX + path, methods, token=kind != "approle_login")
    for kind, path, methods in (
        ("approle_login", "login", _WRITE),
        ("approle_roles", "role", frozenset(("GET", LIST))),
        ("approle_role", "role/{name}", _WRITE | {"GET", "DELETE"}),
        ("approle_role_id", "role/{name}/role-id", _WRITE | {"GET"}),
        ("approle_secret_id", "role/{name}/secret-id", _WRITE | {"GET", LIST}),
        ("approle_custom_secret_id", "role/{name}/custom-secret-id", _WRITE),
        ("approle_secret_id_lookup", "role/{name}/secret-id/lookup", _WRITE),
        ("approle_secret_id_destroy", "role/{name}/secret-id/destroy", _WRITE | {"DELETE"}),
        ("approle_secret_id_accessor_lookup", "role/{name}/secret-id-accessor/lookup", _WRITE),
        (
            "approle_secret_id_accessor_destroy",
            "role/{name}/secret-id-accessor/destroy",
            _WRITE | {"DELETE"},
        ),
        ("approle_other", "{path}", frozenset()),  # Vault's 404 unsupported path
    )
}
APPROLE_LOGIN = APPROLE_ROUTES["approle_login"]
# Vault's cert routes (``_cert``), by kind; the login alone needs no token.
CERT_ROUTES = {
    kind: Route(kind, _cert.PREFIX + path, methods, token=kind != "cert_login")
    for kind, path, methods in (
        ("cert_login", "login", _WRITE),
        ("cert_roles", "certs", frozenset(("GET", LIST))),
        ("cert_role", "certs/{name}", _WRITE | {"GET", "DELETE"}),
        ("cert_other", "{path}", frozenset()),  # Vault's 404 unsupported path
    )
}
CERT_LOGIN = CERT_ROUTES["cert_login"]
# The routes a client without a token reaches to log in: they share the login slots (``_front``).
LOGINS = frozenset((APPROLE_LOGIN, CERT_LOGIN))
