"""Exception handlers: every error leaves as ``{"error": {"code", "message"}}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ._errors import ApiError
from ._keystore import InvalidRequest, KeyExists, KeyNotFound, KeyStoreError, TokenNotFound

_STORE_ERRORS: dict[type[KeyStoreError], tuple[int, str]] = {
    KeyNotFound: (404, "key_not_found"),
    TokenNotFound: (404, "token_not_found"),
    KeyExists: (409, "key_exists"),
    InvalidRequest: (400, "bad_request"),
}


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    response = _error(exc.status, exc.code, exc.message)
    headers = request.headers
    if "transfer-encoding" in headers or headers.get("content-length", "0") != "0":
        # Refused before a data route read the body: close the connection
        # rather than have the server read (and discard) what is left of it.
        response.headers["connection"] = "close"
    return response


async def _store_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, KeyStoreError)
    known = _STORE_ERRORS.get(type(exc))
    if known is None:
        # Unavailable: the details (paths, causes) are for the operator's log only.
        logging.getLogger("sealflow").error("keystore unavailable: %s", exc)
        return _error(503, "keystore_unavailable", "the keystore is unavailable")
    return _error(*known, str(exc))


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    return _error(400, "bad_request", where or "invalid request")


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return _error(exc.status_code, code, str(exc.detail))


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(KeyStoreError, _store_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http_error)
