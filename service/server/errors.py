"""HTTP errors: one exception type, ``ApiError``, and the one place that turns any exception
into it (``api_error``) and into a response ``{"error": {"code", "message"}}``.

The data routes (plain ASGI) and FastAPI's routes both go through ``api_error``, so a keystore
failure, a refused token or a bad envelope reads the same wherever it happens. Messages are
fixed strings or name only public things (key names, limits); they never carry key material,
tokens or request data.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from sealflow.engine import DecryptionError
from sealflow.service.keystore import (
    DeletionNotAllowed,
    InvalidRequest,
    KeyExists,
    KeyNotFound,
    KeySoftDeleted,
    KeyStoreCorrupt,
    KeyStoreError,
    NotExportable,
    NotRenewable,
    TokenExpired,
    TokenNotFound,
    VersionRetired,
    VersionUsedUp,
    WrongKeyType,
)

log = logging.getLogger("sealflow")


class ApiError(Exception):
    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}  # e.g. Allow for 405, WWW-Authenticate for 401

    def body(self) -> bytes:
        return json.dumps({"error": {"code": self.code, "message": self.message}}).encode()

    def rendered(self, vault: bool = False) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """The error's body and headers, in sealflow's shape or (``vault``) Vault's
        ``{"errors": [...]}``: what every path that answers an error sends."""
        if vault:
            body = orjson.dumps({"errors": [self.message] if self.message else []})
            headers = [_JSON, _NO_STORE]
        else:
            body = self.body()
            headers = [_JSON]
        headers.append((b"content-length", b"%d" % len(body)))
        for name, value in self.headers.items():
            headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
        return body, headers

    def whole(self, close: bool, vault: bool = False) -> Whole:
        """The error as a whole response, for the protocol's fast answer."""
        body, headers = self.rendered(vault)
        return Whole(self.status, header_lines(headers), (body,), close)

    def response(self) -> Response:
        return Response(
            self.body(),
            status_code=self.status,
            headers=self.headers,
            media_type="application/json",
        )


_JSON = (b"content-type", b"application/json")
_NO_STORE = (b"cache-control", b"no-store")


@dataclass(slots=True)
class Whole:
    """A whole response, answered by the protocol (``http.Answer``): status, header lines
    (each ending in CRLF), body pieces, whether the connection closes after it, and the
    ticket of the audit record that must be written before it leaves (0: none)."""

    status: int
    headers: bytes
    body: Sequence[bytes]
    close: bool = False
    ticket: int = 0


def header_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(b"%s: %s\r\n" % pair for pair in headers)


def decryption_failed() -> ApiError:
    # One code and message for every authentication failure, whatever its cause.
    return ApiError(400, "decryption_failed", "decryption failed")


def malformed_envelope(why: str) -> ApiError:
    return ApiError(400, "malformed_envelope", why)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "bad_request", message)


def transit_only(name: str) -> ApiError:
    """A key name the envelope cannot carry (one of Vault's names, docs/TRANSIT.md)."""
    return ApiError(
        400,
        "bad_request",
        f"key name {name!r} is outside the native rule [a-z0-9][a-z0-9._-]* (1 to 64): an"
        " envelope cannot carry it; a key of such a name is used through the Transit API only",
    )


def unauthorized() -> ApiError:
    # RFC 6750 section 3: a 401 names the scheme the client should use.
    return ApiError(
        401, "unauthorized", "a valid bearer token is required", {"WWW-Authenticate": "Bearer"}
    )


def token_expired() -> ApiError:
    """A known token past its expiry or with no use left (docs/API.md, Authentication); RFC 6750
    section 3.1's ``invalid_token``. Vault's paths answer it as ``permission denied`` (403)."""
    return ApiError(
        401,
        "token_expired",
        "the token has expired or has no use left",
        {"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )


def method_not_allowed(allowed: str) -> ApiError:
    return ApiError(405, "method_not_allowed", "Method Not Allowed", {"Allow": allowed})


def forbidden(scope: str) -> ApiError:
    return ApiError(403, "forbidden", f"the token lacks the scope {scope}")


def version_retired() -> ApiError:
    return ApiError(403, "version_retired", "the key version is below min_decryption_version")


def key_not_found(name: str, version: int | None = None) -> ApiError:
    if version is None:
        return ApiError(404, "key_not_found", f"no key named {name!r}")
    return ApiError(404, "key_not_found", f"key {name!r} has no version {version}")


def timeout() -> ApiError:
    return ApiError(408, "request_timeout", "the request body was not received in time")


def too_large(limit: int) -> ApiError:
    return ApiError(413, "too_large", f"the body exceeds the limit of {limit} bytes")


def headers_too_large(limit: int) -> ApiError:
    return ApiError(431, "headers_too_large", f"request headers exceed {limit} bytes")


def too_many_for_token(limit: int) -> ApiError:
    return ApiError(
        429,
        "too_many_requests",
        f"this token has {limit} requests in flight already; retry later",
        {"Retry-After": "1"},
    )


def spool_full() -> ApiError:
    return ApiError(
        507,
        "spool_full",
        "the server has no spool space for this response now; retry later, or send "
        "Sealflow-Duplex: 1 to stream it",
    )


def insufficient_storage() -> ApiError:
    # The disk under the spool is full (ENOSPC, or a quota): this request's spool is freed
    # before this answer goes out, so a retry may fit; a smaller body, or full duplex, will.
    return ApiError(
        507,
        "insufficient_storage",
        "the server's spool disk is full; retry later, or send Sealflow-Duplex: 1 to stream "
        "the response",
    )


def spool_damaged() -> ApiError:
    # The spool file gave back other bytes than were written (changed on disk, or a disk
    # fault): the server's fault, not the client's; the operator's log says more.
    return ApiError(500, "spool_damaged", "the response could not be completed; retry")


def overloaded() -> ApiError:
    return ApiError(503, "overloaded", "too many concurrent requests; retry later")


def keystore_unavailable() -> ApiError:
    return ApiError(503, "keystore_unavailable", "the keystore is unavailable")


def audit_unavailable() -> ApiError:
    """Mode required: the audit trail cannot be written, so nothing is served that would go
    unrecorded (docs/AUDIT.md)."""
    return ApiError(503, "audit_unavailable", "the audit trail cannot be written; retry later")


def keystore_stale() -> ApiError:
    """A replica that has not heard from its keystore for longer than the max cache age may
    have missed a revocation: it checks no token (``SEALFLOW_KEYSTORE_STALE_CACHE``)."""
    return ApiError(
        503,
        "keystore_unavailable",
        "the keystore has not answered for too long: tokens cannot be checked",
    )


_STORE_ERRORS: dict[type[KeyStoreError], tuple[int, str]] = {
    KeyNotFound: (404, "key_not_found"),
    TokenNotFound: (404, "token_not_found"),
    NotRenewable: (400, "not_renewable"),
    KeyExists: (409, "key_exists"),
    DeletionNotAllowed: (409, "deletion_not_allowed"),
    KeySoftDeleted: (400, "key_soft_deleted"),
    InvalidRequest: (400, "bad_request"),
    NotExportable: (403, "not_exportable"),
    VersionRetired: (403, "version_retired"),
    # Only a sealing under a version asked for by number (Transit, which words its own).
    VersionUsedUp: (400, "version_used_up"),
    # A key of a type the operation has no use for (an hmac key to encrypt), or a derived key
    # used without its context (Transit, which takes a context; the native API takes none).
    WrongKeyType: (400, "wrong_key_type"),
}
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def api_error(exc: Exception) -> ApiError:
    """The HTTP error for any exception a request can end with (500 for the unexpected)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, DecryptionError):
        return decryption_failed()
    if isinstance(exc, TokenExpired):
        return token_expired()
    if isinstance(exc, KeyStoreError):
        known = _STORE_ERRORS.get(type(exc))
        if known is not None:
            return ApiError(*known, str(exc))
        # Unavailable or corrupt: the details (paths, causes) are for the operator's log only.
        # A refused row was logged once by the keystore: not again on every request naming it.
        if not isinstance(exc, KeyStoreCorrupt):
            log.error("keystore unavailable: %s", exc)
        return keystore_unavailable()
    if isinstance(exc, RequestValidationError):
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return bad_request(where or "invalid request")
    if isinstance(exc, HTTPException):
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return ApiError(exc.status_code, code, str(exc.detail), dict(exc.headers or {}))
    log.error("unexpected error", exc_info=exc)
    return ApiError(500, "internal_error", "internal error")


def _body_unread(request: Request) -> bool:
    """Whether the request may have a body that was not read (or only in part)."""
    headers = request.headers
    return "transfer-encoding" in headers or headers.get("content-length", "0") != "0"


def _allowed_methods(request: Request) -> str:
    """Every method the API serves at this path, from the OpenAPI document.

    Starlette's own Allow names the methods of the first route that matched the path only
    (``GET /v1/keys`` and ``POST /v1/keys`` are two routes).
    """
    methods: set[str] = set()
    for template, operations in request.app.openapi()["paths"].items():
        if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), request.url.path):
            methods |= {method.upper() for method in operations}
    return ", ".join(sorted(methods))


def _body_not_json(request: Request, exc: Exception) -> bool:
    """A body FastAPI did not read as JSON because it was not declared as JSON."""
    if not isinstance(exc, RequestValidationError):
        return False
    declared = request.headers.get("content-type", "").split(";")[0].strip()
    is_json = declared == "application/json" or declared.endswith("+json")
    return not is_json and any(e["loc"][:1] == ("body",) for e in exc.errors())


async def _handle(request: Request, exc: Exception) -> Response:
    if _body_not_json(request, exc):
        # `curl -d` sends a form: say what is wrong rather than that the fields are missing.
        exc = ApiError(
            415,
            "unsupported_media_type",
            "the body must be JSON, sent with Content-Type: application/json",
        )
    error = api_error(exc)
    if error.status == 405:
        error.headers["Allow"] = _allowed_methods(request)
    response = error.response()
    # Refused before its body was read (an ApiError from a route's checks, or 413 from
    # FastAPI's body limit by Content-Length): close rather than read what may be large.
    if (isinstance(exc, ApiError) or error.status == 413) and _body_unread(request):
        response.headers["connection"] = "close"
    return response


def install(app: FastAPI) -> None:
    """Every error FastAPI's routes raise leaves through ``api_error``."""
    for exc_type in (ApiError, KeyStoreError, DecryptionError, RequestValidationError):
        app.add_exception_handler(exc_type, _handle)
    app.add_exception_handler(HTTPException, _handle)
