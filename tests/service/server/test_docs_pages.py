"""/docs and /redoc work on a host without internet: every script and stylesheet they load is
served by sealflow."""

from __future__ import annotations

import re

import httpx
import pytest


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_doc_pages_load_only_assets_sealflow_serves(client: httpx.Client, page: str) -> None:
    r = client.get(page)
    assert r.status_code == 200
    html = r.text
    assets = re.findall(r'<script src="([^"]+)"', html) + re.findall(
        r'<link[^>]+href="([^"]+)"', html
    )
    assert any(a.endswith(".js") for a in assets), html
    for asset in assets:
        assert asset.startswith("/"), f"{page} loads {asset} from another host"
        loaded = client.get(asset)
        assert loaded.status_code == 200, asset
        assert len(loaded.content) > 1000, asset
    # The OpenAPI document they render is ours too.
    assert "/openapi.json" in html


def test_swagger_ui_renders_openapi_3_1(client: httpx.Client) -> None:
    # FastAPI writes OpenAPI 3.1, which Swagger UI renders from version 5 on.
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    bundle = client.get("/docs/assets/swagger-ui-bundle.js").text
    assert "OpenAPI31" in bundle
