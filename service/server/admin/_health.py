"""Liveness, readiness and the Prometheus endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from sealflow.service.keystore import KeyStoreError

from .. import _metrics
from .._state import DRAINING

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process serves HTTP")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: keystore open and engine self-test passed; 503 while draining",
    responses={503: {"description": "starting, draining, or the keystore unreachable too long"}},
)
async def readyz(request: Request) -> JSONResponse:
    if DRAINING.is_set():
        return JSONResponse({"status": "draining"}, status_code=503)
    svc = getattr(request.app.state, "services", None)
    if svc is None:
        return JSONResponse({"status": "starting"}, status_code=503)
    # Unheard of for a moment is fine (the cache serves); for longer than the setting, what
    # the cache says may be out of date (a revocation missed): take this replica out of
    # rotation, whether the database said no or said nothing (a watcher stuck on a silent peer).
    if svc.audit is not None and svc.audit.failing:
        # Mode required, and the trail cannot be written: requests with a token are refused.
        return JSONResponse({"status": "audit_unavailable"}, status_code=503)
    if svc.store.stale(svc.settings.keystore_max_cache_age):
        age = time.monotonic() - svc.store.health().synced_at
        body = {"status": "keystore_unreachable", "cache_age_seconds": round(age, 1)}
        return JSONResponse(body, status_code=503)
    return JSONResponse({"status": "ready"})


@router.get("/metrics", summary="Prometheus metrics (text format)", response_class=Response)
async def metrics(request: Request) -> Response:
    svc = getattr(request.app.state, "services", None)
    if svc is not None:
        _metrics.sync_engine(svc.crypto, svc.buffers, request.app.front.active)
        _metrics.sync_keystore(svc.store.health())
        with contextlib.suppress(KeyStoreError):  # the keystore's own metrics say why
            await asyncio.to_thread(_metrics.sync_usage, svc.store)
    return Response(generate_latest(_metrics.registry()), media_type=CONTENT_TYPE_LATEST)
