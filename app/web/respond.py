"""How every web page is answered: our CSP (no scripts at all), gzip when the browser takes it, the viewer's display
preferences from their cookie."""

from __future__ import annotations

import gzip
from typing import Annotated

from fastapi import Cookie, Depends, Request
from fastapi.responses import HTMLResponse, Response

from app.api.auth import CSRF_FIELD, AuthError, Principal, csrf_ok
from app.web import prefs as prefs_mod
from app.web.prefs import Prefs

# No scripts at all; styles only from our own stylesheet; forms post only here.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
MIN_GZIP_BYTES = 1024


def _accepts_gzip(request: Request) -> bool:
    accepted = request.headers.get("accept-encoding", "")
    return any(
        part.split(";")[0].strip() == "gzip" and "q=0" not in part.replace(" ", "") for part in accepted.split(",")
    )


def compressed(
    request: Request, body: bytes, media_type: str, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """The body as is, or gzipped when the client accepts it and it is worth it (a result page: ~10x smaller)."""
    out = {"X-Content-Type-Options": "nosniff", "Vary": "Accept-Encoding", **(headers or {})}
    if len(body) >= MIN_GZIP_BYTES and _accepts_gzip(request):
        body = gzip.compress(body, compresslevel=6)
        out["Content-Encoding"] = "gzip"
    return Response(body, status_code=status_code, media_type=media_type, headers=out)


def html(request: Request, content: str, status_code: int = 200) -> Response:
    return compressed(
        request, content.encode("utf-8"), "text/html; charset=utf-8", status_code, {"Content-Security-Policy": CSP}
    )


def _prefs(tp_prefs: Annotated[str | None, Cookie()] = None) -> Prefs:
    return prefs_mod.parse(tp_prefs)


PrefsDep = Annotated[Prefs, Depends(_prefs)]
HTML = HTMLResponse  # the response class the routes declare (for the OpenAPI-less router)


def require_csrf(viewer: Principal, submitted: str | None) -> None:
    """A form post must carry the session's CSRF token (another site cannot read it)."""
    if not csrf_ok(viewer, submitted):
        raise AuthError(
            403,
            "the form's CSRF token is missing or not this session's: reload the page and submit again",
            field=CSRF_FIELD,
        )
