"""The data path's routing: encrypt and decrypt raw bodies (SPEC section 4), and HMAC them
(``_hmac``), as plain ASGI.

These routes carry nearly all of the traffic, and for small bodies the
per-request cost is the whole cost: FastAPI's routing and dependency solving
took ~6x the time of the cryptography and I/O together (docs/BENCHMARKS.md).
So they are matched here, in front of FastAPI, with one pass over the headers;
the token, scope, key and headers are checked before any of the body is read,
then ``_transfer`` streams. Every decision about a request is made here, once: for
``/v1/decrypt`` the key is named by the envelope, so the scope and key checks run when
``_transfer`` has read its prefix (``_decrypt_key``). Their OpenAPI description is
``OPENAPI_PATHS``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from sealflow.engine import Algorithm, Digest
from sealflow.service.envelope import Mode, Prefix, valid_name
from sealflow.service.keystore import (
    KeyInfo,
    KeyNotFound,
    KeyStore,
    KeyStoreError,
    Lease,
    Slot,
    TokenInfo,
    WouldWait,
)

from .. import _auth, _metrics, errors
from .._body import refuse
from .._logging import AccessRecord
from .._state import Services
from ..errors import ApiError
from ..http import Head
from . import _hmac
from ._records import DecryptRecords, EncryptRecords
from ._transfer import Decrypt, Encrypt, Resolve, Transfer

MAX_AAD = 8192
_KEYS = "/v1/keys/"
_ENCRYPT, _DECRYPT, _HMAC, _VERIFY = "/encrypt", "/decrypt", "/hmac", "/verify"
# The query string: the mode and its name in the access log.
_MODES = {
    b"": (Mode.STREAM, "stream"),
    b"mode=stream": (Mode.STREAM, "stream"),
    b"mode=single": (Mode.SINGLE, "single"),
}
_RECORDS = b"mode=records"  # batches of small records (_records), both directions


class Route:
    """What the access log and metrics call a data route (scope["route"]), and what the audit
    record calls its requests."""

    __slots__ = ("operation", "path")

    def __init__(self, path: str, operation: str) -> None:
        self.path = path
        self.operation = operation


ENCRYPT_ROUTE = Route("/v1/keys/{name}/encrypt", "encrypt")
DECRYPT_ROUTE = Route("/v1/keys/{name}/decrypt", "decrypt")
DECRYPT_ANY_ROUTE = Route("/v1/decrypt", "decrypt")
HMAC_ROUTE = Route("/v1/keys/{name}/hmac", "hmac")
VERIFY_ROUTE = Route("/v1/keys/{name}/verify", "verify")


def match(path: str) -> Route | None:
    """The data route a request's path is for, if any (anything else goes to FastAPI)."""
    if path == "/v1/decrypt":
        return DECRYPT_ANY_ROUTE
    if path.startswith(_KEYS) and path.count("/") == 4:
        if path.endswith(_ENCRYPT):
            return ENCRYPT_ROUTE
        if path.endswith(_DECRYPT):
            return DECRYPT_ROUTE
        if path.endswith(_HMAC):
            return HMAC_ROUTE
        if path.endswith(_VERIFY):
            return VERIFY_ROUTE
    return None


def serve(
    svc: Services,
    route: Route,
    token: TokenInfo,
    head: Head,
    log: AccessRecord,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> Awaitable[None]:
    """Serve a data request whose token the front door has authenticated: the answer to await
    (a plain function handing on a coroutine, not one itself: a coroutine fewer per request)."""
    scope["route"] = route
    try:
        if scope["method"] != "POST":
            raise errors.method_not_allowed("POST")
        app = _prepare(svc, route, token, head, log)
    except WouldWait:
        prepare = functools.partial(_prepare, svc, route, token, head, log)
        return _prepared_off_loop(prepare, log, scope, receive, send)
    except (ApiError, KeyStoreError) as exc:
        return refuse(errors.api_error(exc), scope, send, log)
    return app(scope, receive, send)


async def _prepared_off_loop(
    prepare: Callable[[], Transfer], log: AccessRecord, scope: Scope, receive: Receive, send: Send
) -> None:
    """``serve`` for a request whose sealing must be leased from the keystore first (the
    first under a key in this process, or one near its limit): ``prepare`` (``serve``'s own
    call) made in a thread, so the event loop never waits for the database (a database that
    is down answers 503 at once)."""
    try:
        app = await asyncio.to_thread(prepare)
    except (ApiError, KeyStoreError) as exc:
        await refuse(errors.api_error(exc), scope, send, log)
        return
    await app(scope, receive, send)


def answer(
    svc: Services, route: Route, token: TokenInfo, head: Head, log: AccessRecord, body: bytes
) -> errors.Whole | None:
    """The fast answer to a whole-body plan whose body has come (the protocol's): the same
    preparation as ``serve``, then the transfer's own whole-body step (``Transfer.answer``).
    None if its sealing must wait for the keystore: the ASGI path serves it (``serve``)."""
    try:
        transfer = _prepare(svc, route, token, head, log)
    except WouldWait:
        return None
    except (ApiError, KeyStoreError) as exc:
        return _refused(errors.api_error(exc), head, log)
    return transfer.answer(body)


def _refused(error: ApiError, head: Head, log: AccessRecord) -> errors.Whole:
    # As ``refuse`` answers it on the ASGI path, which refuses before reading the body.
    log.status, log.error = error.status, error.code
    return error.whole(close=head.has_body)


def _prepare(
    svc: Services, route: Route, token: TokenInfo, head: Head, log: AccessRecord
) -> Transfer:
    if route is HMAC_ROUTE or route is VERIFY_ROUTE:
        return _prepare_mac(svc, route, token, head, log)
    aad = b"" if head.x_aad is None else _aad(head.x_aad)
    length, duplex = head.length, head.duplex
    records = head.query == _RECORDS
    if records:
        log.mode = "records"
    if route is DECRYPT_ANY_ROUTE:
        resolve = _decrypt_key(svc.store, token, None)
        if records:
            return DecryptRecords(svc, log, aad, length, duplex, resolve)
        return Decrypt(svc, log, aad, length, duplex, resolve)
    path = head.path
    name = path[len(_KEYS) : path.rindex("/")]
    if route is DECRYPT_ROUTE:
        _auth.require(token, "decrypt", name)
        if not valid_name(name):  # no envelope names it (encrypt: sealing_key says so)
            raise errors.transit_only(name)
        resolve = _decrypt_key(svc.store, token, name)
        if records:
            log.key = name
            return DecryptRecords(svc, log, aad, length, duplex, resolve)
        return Decrypt(svc, log, aad, length, duplex, resolve)
    _auth.require(token, "encrypt", name)
    if records:
        # Each batch of records leases its sealings as it comes (_records): none yet.
        key = sealing_key(svc.store, name)
        log.key = name  # and each version sealed under, as its batch is leased
        return EncryptRecords(svc, log, aad, length, duplex, key)
    mode_and_name = _MODES.get(head.query)
    if mode_and_name is None:
        raise errors.bad_request("mode must be stream, single or records")
    mode, mode_name = mode_and_name
    lease = sealing_lease(svc, name)
    limit = svc.settings.max_single_bytes
    if mode is Mode.SINGLE and length is not None and length > limit:
        raise errors.too_large(limit)
    log.key, log.version, log.mode = name, lease.version, mode_name
    prefix = lease_prefix(mode, lease)
    return Encrypt(svc, log, aad, length, duplex, lease, prefix, mode)


def _prepare_mac(
    svc: Services, route: Route, token: TokenInfo, head: Head, log: AccessRecord
) -> Transfer:
    """An HMAC or verify request (``_hmac``): scope, query, tag and key, from the head."""
    path = head.path
    name = path[len(_KEYS) : path.rindex("/")]
    # The path's scope, as Transit's: ``hmac`` makes HMACs, ``verify`` checks them.
    _auth.require(token, "verify" if route is VERIFY_ROUTE else "hmac", name)
    if head.x_aad is not None:
        raise errors.bad_request("an HMAC binds no X-AAD: send the data in the body")
    asked = _hmac.options(head.query)

    def lookup(version: int | None) -> tuple[KeyInfo, Slot, bytes]:
        # The material by the key's identity (its slot), never another key's of its name.
        key = key_info(svc.store, name)
        slot = key.slot(key.latest if version is None else version)
        try:
            return key, slot, svc.store.material(slot)
        except KeyNotFound:
            raise errors.key_not_found(name, slot.version) from None

    if route is VERIFY_ROUTE:
        if asked.records:
            raise errors.bad_request("verify takes one body and one tag (no mode=records)")
        tag, named = _hmac.presented_tag(head)
        if named is not None and asked.version not in (None, named):
            raise errors.bad_request("the tag and the query name different versions")
        key = _hmac.mac_key(lookup, asked.digest, named or asked.version, verify=True)
        return _hmac.MacVerify(svc, log, key, tag)
    key = _hmac.mac_key(lookup, asked.digest, asked.version, verify=False)
    if asked.records:
        return _hmac.MacRecords(svc, log, key, head.duplex)
    return _hmac.MacBody(svc, log, key)


def lease_prefix(mode: Mode, lease: Lease) -> bytes:
    """The envelope prefix of what is sealed under a lease."""
    return _encoded(mode, lease.key.algorithm, lease.version, lease.key.name)


@functools.lru_cache(maxsize=4096)  # the same few for every request; keys come and go
def _encoded(mode: Mode, algorithm: Algorithm, version: int, name: str) -> bytes:
    return Prefix(mode, algorithm, version, name).encode()


def sealing_key(store: KeyStore, name: str) -> KeyInfo:
    """The key a native encrypt names, or 404 key_not_found; 400 for a name an envelope cannot
    carry (a Transit-only key)."""
    if not valid_name(name):
        raise errors.transit_only(name)
    return key_info(store, name)


def sealing_lease(svc: Services, name: str) -> Lease:
    """One sealing under the key's latest version (``UsageMeter.lease``, the one usage rule:
    it rotates the key first if that version is used up), or ``sealing_key``'s refusals."""
    if not valid_name(name):
        raise errors.transit_only(name)
    try:
        return svc.usage.lease(name)
    except KeyNotFound:
        raise errors.key_not_found(name) from None


def key_info(store: KeyStore, name: str) -> KeyInfo:
    """A key, or 404 key_not_found."""
    try:
        return store.get_key(name)
    except KeyNotFound:
        raise errors.key_not_found(name) from None


def key_version(store: KeyStore, name: str, version: int | None = None) -> tuple[KeyInfo, bytes]:
    """A key and the material of one version (the latest by default), or 404 key_not_found."""
    key = key_info(store, name)
    try:
        return key, store.key_material(name, key.latest if version is None else version)
    except KeyNotFound:
        raise errors.key_not_found(name, version) from None


def _decrypt_key(store: KeyStore, token: TokenInfo, route_key: str | None) -> Resolve:
    """The rules for an envelope's prefix (``opening_material``), with their refusals counted."""

    def resolve(prefix: Prefix) -> bytes:
        try:
            return opening_material(store, token, route_key, prefix)
        except ApiError as exc:
            if exc.code == "forbidden":
                _metrics.AUTH_FAILURES.labels("forbidden").inc()
            elif exc.code == "version_retired":
                _metrics.DECRYPTION_FAILURES.labels("version_retired").inc()
            raise

    return resolve


def opening_material(
    store: KeyStore, token: TokenInfo, route_key: str | None, prefix: Prefix
) -> bytes:
    """The material to open an envelope with this prefix, or the ApiError its rules give:
    scope (for /v1/decrypt), key, algorithm, version. Counts nothing."""
    if route_key is None:
        if not _auth.allows(token, "decrypt", prefix.name):
            raise errors.forbidden(f"decrypt:{prefix.name}")
    elif prefix.name != route_key:
        # The envelope names another key: it cannot authenticate under this one.
        raise errors.decryption_failed()
    key, material = key_version(store, prefix.name, prefix.version)
    if prefix.algorithm is not key.algorithm:
        raise errors.decryption_failed()
    if prefix.version < key.min_decryption_version:
        raise errors.version_retired()
    return material


def _aad(header: bytes) -> bytes:
    try:
        aad = base64.b64decode(header + b"=" * (-len(header) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise errors.bad_request("X-AAD is not valid base64") from None
    if len(aad) > MAX_AAD:
        raise errors.bad_request(f"X-AAD exceeds {MAX_AAD} bytes")
    return aad


_RAW = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_ERROR = {
    "content": {"application/json": {"example": {"error": {"code": "...", "message": "..."}}}}
}
_RESPONSES = {
    "200": {"content": _RAW, "description": "the envelope or the plaintext, streamed"},
    "400": {"description": "decryption_failed, malformed_envelope or bad_request", **_ERROR},
    "401": {"description": "unauthorized (missing or invalid token), or token_expired", **_ERROR},
    "403": {"description": "scope missing, or version_retired", **_ERROR},
    "404": {"description": "key_not_found", **_ERROR},
    "408": {"description": "body not received in time", **_ERROR},
    "413": {"description": "single-shot body over the limit", **_ERROR},
    "405": {"description": "method_not_allowed: only POST", **_ERROR},
    "414": {"description": "uri_too_long: a URL over the server's head limit", **_ERROR},
    "429": {"description": "too_many_requests: this token's share of the slots", **_ERROR},
    "431": {"description": "headers_too_large: a head over the server's limit", **_ERROR},
    "500": {
        "description": "spool_damaged: the spool file gave back other bytes (retry), or "
        "internal_error",
        **_ERROR,
    },
    "503": {
        "description": "overloaded, keystore_unavailable or audit_unavailable",
        **_ERROR,
    },
    "507": {
        "description": "spool_full or insufficient_storage: no spool space for a"
        " request-then-response (the budget, or the disk)",
        **_ERROR,
    },
}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_AAD = {
    "name": "X-AAD",
    "in": "header",
    "required": False,
    "description": "additional authenticated data, base64, at most 8 KiB decoded",
    "schema": {"type": "string"},
}
_DUPLEX = {
    "name": "Sealflow-Duplex",
    "in": "header",
    "required": False,
    "description": "1: answer in full duplex, while the body arrives (default: once it ended)",
    "schema": {"type": "string", "enum": ["1"]},
}
_MODE = {
    "name": "mode",
    "in": "query",
    "required": False,
    "description": "stream: chunked, any size; single: one AEAD message; records: each "
    "u32-length-framed record sealed alone, framed the same way (docs/API.md)",
    "schema": {"type": "string", "enum": ["stream", "single", "records"], "default": "stream"},
}
_DECRYPT_MODE = {
    "name": "mode",
    "in": "query",
    "required": False,
    "description": "records: a batch of u32-length-framed envelopes, each answered with its own "
    "status (docs/API.md); absent: one envelope, whose prefix says stream or single",
    "schema": {"type": "string", "enum": ["records"]},
}


_ALGORITHM = {
    "name": "algorithm",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "enum": [d.value for d in Digest], "default": "sha2-256"},
}
_VERSION = {
    "name": "version",
    "in": "query",
    "required": False,
    "description": "the key version (default: the latest)",
    "schema": {"type": "integer", "minimum": 1},
}
_HMAC_MODE = {
    "name": "mode",
    "in": "query",
    "required": False,
    "description": "records: one tag per u32-length-framed record, framed the same way",
    "schema": {"type": "string", "enum": ["records"]},
}
_TAG = {
    "name": "Sealflow-HMAC",
    "in": "header",
    "required": True,
    "description": "the tag, base64, or Transit's vault:v<N>:<base64>",
    "schema": {"type": "string"},
}
_VERDICT = {
    "content": {"application/json": {"example": {"valid": True}}},
    "description": "whether the tag is the body's HMAC under that key version",
}


def _operation(
    summary: str, parameters: list[dict[str, Any]], ok: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "post": {
            "tags": ["data"],
            "summary": summary,
            "parameters": parameters,
            "requestBody": {"required": True, "content": _RAW},
            "responses": _RESPONSES if ok is None else {**_RESPONSES, "200": ok},
            "security": [{"HTTPBearer": []}],
        }
    }


# The data routes in the OpenAPI document (they are served here, not by FastAPI).
OPENAPI_PATHS = {
    ENCRYPT_ROUTE.path: _operation(
        "Seal a body under the key's latest version", [_NAME, _MODE, _AAD, _DUPLEX]
    ),
    DECRYPT_ROUTE.path: _operation(
        "Open an envelope sealed under this key", [_NAME, _DECRYPT_MODE, _AAD, _DUPLEX]
    ),
    DECRYPT_ANY_ROUTE.path: _operation(
        "Open an envelope under the key its prefix names", [_DECRYPT_MODE, _AAD, _DUPLEX]
    ),
    HMAC_ROUTE.path: _operation(
        "HMAC of the body (or of each record) under a key version",
        [_NAME, _ALGORITHM, _VERSION, _HMAC_MODE, _DUPLEX],
        {"content": _RAW, "description": "the tag (or framed tags); Sealflow-Key-Version"},
    ),
    VERIFY_ROUTE.path: _operation(
        "Check a tag against the body", [_NAME, _ALGORITHM, _VERSION, _TAG], _VERDICT
    ),
}
