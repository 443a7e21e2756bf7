"""The ASGI application, which ``sealflow serve`` runs on uvicorn with sealflow's own protocol
(``http.serve``): ``create_app`` is its factory."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

import sealflow
from sealflow.service.config import Settings

from . import _drain, _logging, _metrics, _trim, admin, data, errors, http, transit
from ._front import MAX_OTHER_BODY, Front
from ._startup import start_services

log = logging.getLogger("sealflow")


class SealflowApp(FastAPI):
    """FastAPI for keys, probes, metrics and docs; every HTTP request enters through ``Front``,
    which serves the data routes itself (see ``data``)."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state.services = None
        self.access_log = _logging.AccessLog()
        self.front = Front(
            super().__call__,
            settings,
            self.access_log,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.front(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            schema = super().openapi()
            vault = {
                **transit.paths(self.front.transit.mount),
                **transit.approle_paths(),
                **transit.cert_paths(),
            }
            schema["paths"] = {**data.OPENAPI_PATHS, **vault, **schema["paths"]}
            schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
            schemes.update(transit.SECURITY_SCHEMES)
            # Request validation errors leave as 400 bad_request (errors.api_error), never 422.
            for operations in schema["paths"].values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            for unused in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(unused, None)
            self.openapi_schema = schema
        return self.openapi_schema


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    _logging.configure(settings.log_level)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        _trim.tune()  # process-wide, like the server: warm heap pages for large bodies
        svc = start_services(settings)
        svc.usage.bind_loop()  # leases asked for on the event loop never wait on the keystore
        assert isinstance(app, SealflowApp)
        app.state.services = app.front.svc = svc
        _drain.install(settings.drain_seconds)
        hangup = http.install_hangup()  # SIGHUP reloads the TLS files (docs/SERVICE.md)
        sync = asyncio.create_task(_sync_metrics(app))
        audit = None if svc.audit is None else asyncio.create_task(svc.audit.run())
        capacity = http.capacity(settings)
        _log_capacity(capacity)
        # For each connection uvicorn makes (it hands the lifespan state to the protocol).
        options = http.Options(
            head_limit=settings.max_header_bytes,
            head_timeout=settings.header_timeout,
            receive_timeout=settings.receive_timeout,
            planner=app.front,
            fast=settings.small_lane,
            gate=http.Gate(capacity.connections),
            recorded=None if svc.audit is None else svc.audit.recorded,
            wait_recorded=None if svc.audit is None else svc.audit.wait,
        )
        # What start-up made lives as long as the process: out of the collector's way, so that a
        # full collection walks only what requests make, not every loaded module's objects too
        # (a pause on the event loop each time a large Transit batch sets one off:
        # docs/TRANSIT.md, Limits).
        gc.freeze()
        try:
            yield {http.OPTIONS: options}
        finally:
            hangup()
            app.state.services = app.front.svc = None
            sync.cancel()
            app.access_log.flush()
            if audit is not None and svc.audit is not None:
                audit.cancel()
                svc.audit.close()  # the last records and a final checkpoint
            svc.crypto.close()
            svc.usage.close()  # gives back unused reservations, before the store closes
            svc.store.close()
            if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

    app = SealflowApp(
        settings,
        # Front refuses larger bodies by Content-Length; this bounds chunked ones.
        max_body_size=MAX_OTHER_BODY,
        title="sealflow",
        version=sealflow.__version__,
        summary="Encrypt and decrypt streamed bodies under named, versioned keys.",
        description="See docs/API.md for the envelope format and worked examples.",
        lifespan=lifespan,
        docs_url=None,  # admin.install_docs serves /docs and /redoc without a CDN
        redoc_url=None,
    )
    app.include_router(admin.keys_router)
    app.include_router(admin.import_router)
    app.include_router(admin.lifecycle_router)
    app.include_router(admin.tokens_router)
    app.include_router(admin.health_router)
    admin.install_docs(app)
    errors.install(app)
    return app


def _log_capacity(capacity: http.Capacity) -> None:
    fields = {"max_connections": capacity.connections, "descriptors": capacity.descriptors}
    log.info("connections", extra={"fields": fields})
    if capacity.unsafe:
        # The operator's value wins, but say what it risks: descriptors running out fail
        # spool files, the keystore and new connections alike.
        log.warning(
            "%d connections (SEALFLOW_MAX_CONNECTIONS) leave too few of the %d descriptors"
            " (RLIMIT_NOFILE) for spool files and the keystore, %d would;"
            " raise the limit (ulimit -n, systemd LimitNOFILE=, docker --ulimit nofile=), or"
            " lower SEALFLOW_MAX_CONNECTIONS or SEALFLOW_MAX_CONCURRENT_REQUESTS",
            capacity.connections,
            capacity.descriptors,
            max(0, capacity.safe),
        )


async def _sync_metrics(app: FastAPI) -> None:
    # In multiprocess mode each worker must publish its counters itself (a scrape reaches one
    # worker, which publishes its own at once): the others' lag by at most this interval.
    assert isinstance(app, SealflowApp)
    while (svc := app.state.services) is not None:
        _metrics.sync_engine(svc.crypto, svc.buffers, app.front.active)
        await asyncio.sleep(1)
