"""/docs and /redoc with their scripts served by sealflow itself, not a CDN.

FastAPI's default pages load Swagger UI and ReDoc from jsdelivr, so they stay blank on a host
without internet access. This is FastAPI's documented self-hosting recipe, with the assets
that the ``fastapi-offline`` distribution ships (Swagger UI 5, which renders OpenAPI 3.1).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

ASSETS = "/docs/assets"
_ASSET_DIR = Path(str(files("fastapi_offline") / "static"))

router = APIRouter(include_in_schema=False)


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
    )


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
        with_google_fonts=False,
    )


def install(app: FastAPI) -> None:
    """Serve the pages and their assets (build the app with docs_url=None, redoc_url=None)."""
    app.include_router(router)
    app.mount(ASSETS, StaticFiles(directory=_ASSET_DIR), name="docs-assets")
