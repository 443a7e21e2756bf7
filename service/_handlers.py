"""Exception handlers: every error leaves as ``{"error": {"code", "message"}}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from ._errors import ApiError
from ._keystore import InvalidRequest, KeyExists, KeyNotFound, KeyStoreError, TokenNotFound

_STORE_ERRORS: dict[type[KeyStoreError], tuple[int, str]] = {
    KeyNotFound: (404, "key_not_found"),
    TokenNotFound: (404, "token_not_found"),
    KeyExists: (409, "key_exists"),
    InvalidRequest: (400, "bad_request"),
}


def _error(status: int, code: str, message: str) -> Response:
    # The same body as the data routes' errors: ApiError renders it in one place.
    body = ApiError(status, code, message).body()
    return Response(body, status_code=status, media_type="application/json")


def _closing(request: Request, response: Response) -> Response:
    """Close after answering a request whose body may not have been read (or only in part)."""
    headers = request.headers
    if "transfer-encoding" in headers or headers.get("content-length", "0") != "0":
        response.headers["connection"] = "close"
    return response


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _closing(request, _error(exc.status, exc.code, exc.message))


async def _store_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, KeyStoreError)
    known = _STORE_ERRORS.get(type(exc))
    if known is None:
        # Unavailable: the details (paths, causes) are for the operator's log only.
        logging.getLogger("sealflow").error("keystore unavailable: %s", exc)
        return _error(503, "keystore_unavailable", "the keystore is unavailable")
    return _error(*known, str(exc))


async def _invalid(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    return _error(400, "bad_request", where or "invalid request")


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    response = _error(exc.status_code, code, str(exc.detail))
    # 413: FastAPI's body limit refused the body from its Content-Length, unread.
    return _closing(request, response) if exc.status_code == 413 else response


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(KeyStoreError, _store_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http_error)
