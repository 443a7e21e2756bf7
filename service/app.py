"""The ASGI application: ``uvicorn --factory service.app:create_app``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

import engine

from . import _admin, _data, _drain, _health, _logging, _metrics
from ._errors import ApiError
from ._keystore import InvalidRequest, KeyExists, KeyNotFound, KeyStoreError, TokenNotFound
from ._observe import ConcurrencyLimit, Observe
from ._startup import start_services
from .config import Settings

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


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    _logging.configure(settings.log_level)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc = start_services(settings)
        app.state.services = svc
        _drain.install(settings.drain_seconds)
        sync = asyncio.create_task(_sync_metrics(svc.crypto, svc.buffers))
        try:
            yield
        finally:
            app.state.services = None
            sync.cancel()
            svc.crypto.close()
            svc.store.close()
            if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

    app = FastAPI(
        title="sealflow",
        version="0.1.0",
        summary="Encrypt and decrypt streamed bodies under named, versioned keys.",
        description="See docs/API.md for the envelope format and worked examples.",
        lifespan=lifespan,
    )
    app.state.services = None
    app.include_router(_data.router)
    app.include_router(_admin.router)
    app.include_router(_health.router)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(KeyStoreError, _store_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_middleware(ConcurrencyLimit, limit=settings.max_concurrent_requests)
    app.add_middleware(Observe)
    return app


async def _sync_metrics(crypto: engine.CryptoPool, buffers: engine.BufferPool) -> None:
    # In multiprocess mode each worker must publish its engine counters itself.
    while True:
        _metrics.sync_engine(crypto, buffers)
        await asyncio.sleep(2)
