"""/docs: Swagger UI from the installed `swagger-ui-bundle-v2` package (its swagger-ui-dist files), never from a
CDN, so the page works on a machine without Internet access. No inline script: the page loads the bundle and a
small initialiser from here, and its Content-Security-Policy allows scripts from this origin only."""

from __future__ import annotations

from functools import cache
from typing import Annotated

import swagger_ui_bundle
from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, Response

from app.service.responses import compressed

router = APIRouter(include_in_schema=False)
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
INIT_JS = """window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
  persistAuthorization: false
});
"""
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
</head><body><div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/init.js"></script>
</body></html>
"""
CACHE = {"Cache-Control": "public, max-age=86400"}


@cache
def _asset(name: str) -> bytes:
    return (swagger_ui_bundle.swagger_ui_path / name).read_bytes()


@router.get("/docs", response_class=HTMLResponse)
def docs_page(request: Request) -> Response:
    return HTMLResponse(PAGE.format(title=request.app.title))


@router.get("/docs/assets/{name}")
def docs_asset(request: Request, name: Annotated[str, Path(max_length=64)]) -> Response:
    if name == "init.js":
        return compressed(request, INIT_JS.encode(), "text/javascript; charset=utf-8", headers=CACHE)
    if name not in ASSETS:
        return Response(status_code=404)
    return compressed(request, _asset(name), ASSETS[name], headers=CACHE)
