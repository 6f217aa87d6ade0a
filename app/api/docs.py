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
  deepLinking: false,
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
<link rel="stylesheet" href="/docs/assets/contrast.css">
<link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
</head><body><main id="swagger-ui"></main>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/init.js"></script>
</body></html>
"""
# Swagger UI's own colours fail WCAG AA contrast (axe color-contrast, serious: white method names on #49cc90, 2.0:1;
# the version badges; the "Expand all" buttons, 1.9:1): darker shades of the same hues, each at least 5:1
CONTRAST_CSS = """.swagger-ui .info .title small { background: #5a6270; }
.swagger-ui .info .title small.version-stamp { background: #4d7a00; }
.swagger-ui .info .base-url, .swagger-ui .info a.link, .swagger-ui .url { color: #1f6fcf; }
.swagger-ui .btn.authorize { color: #1d7a53; border-color: #1d7a53; }
.swagger-ui .btn.authorize span { color: #1d7a53; }
.swagger-ui .btn.authorize svg { fill: #1d7a53; }
.swagger-ui .opblock.opblock-post .opblock-summary-method { background: #1d7a53; }
.swagger-ui .opblock.opblock-get .opblock-summary-method { background: #1565c0; }
.swagger-ui .opblock.opblock-put .opblock-summary-method { background: #a35200; }
.swagger-ui .opblock.opblock-delete .opblock-summary-method { background: #c62828; }
.swagger-ui .opblock.opblock-patch .opblock-summary-method { background: #00796b; }
.swagger-ui .opblock.opblock-head .opblock-summary-method { background: #6a1b9a; }
.swagger-ui .opblock.opblock-options .opblock-summary-method { background: #0d5aa7; }
.swagger-ui .json-schema-2020-12-expand-deep-button { color: #595959; }
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
    if name == "contrast.css":
        return compressed(request, CONTRAST_CSS.encode(), "text/css; charset=utf-8", headers=CACHE)
    if name not in ASSETS:
        return Response(status_code=404)
    return compressed(request, _asset(name), ASSETS[name], headers=CACHE)
