"""The ASGI application: ``uvicorn --factory service.app:create_app``."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

from fastapi import FastAPI

import engine

from . import _admin, _data, _drain, _handlers, _health, _logging, _metrics
from ._observe import ConcurrencyLimit, Observe
from ._startup import start_services
from .config import Settings


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
    _handlers.install(app)
    app.add_middleware(ConcurrencyLimit, limit=settings.max_concurrent_requests)
    app.add_middleware(Observe)
    return app


async def _sync_metrics(crypto: engine.CryptoPool, buffers: engine.BufferPool) -> None:
    # In multiprocess mode each worker must publish its engine counters itself.
    while True:
        _metrics.sync_engine(crypto, buffers)
        await asyncio.sleep(2)
