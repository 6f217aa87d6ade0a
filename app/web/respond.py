"""How every web page is answered: our CSP (no scripts at all), gzip when the browser takes it, the viewer's display
preferences from their cookie."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlencode

from fastapi import Cookie, Depends, Request
from fastapi.responses import HTMLResponse, Response

__all__ = ["bad_address", "compressed", "html", "not_found", "require_csrf"]

from app.planner import __version__
from app.service.auth import CSRF_FIELD, AuthError, Principal, csrf_ok
from app.service.responses import compressed
from app.web import prefs as prefs_mod
from app.web.prefs import Prefs

if TYPE_CHECKING:
    from app.web.templates import WebTemplates

# No scripts at all; styles only from our own stylesheet; forms post only here.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)


DRAFT_URL_MAX = 6000  # longer (a pasted config.json, say) and the preference links return to the empty form


def filled_url(path: str, changed: Mapping[str, str]) -> str:
    """A form's URL filled with the values that differ from its empty form's (`changed`): where its preference
    links return, so that what was typed is not lost (QA, 2026-12-07); the empty form where that URL is too long."""
    url = f"{path}?{urlencode(changed)}" if changed else path
    return url if len(url) <= DRAFT_URL_MAX else path


def html(request: Request, content: str, status_code: int = 200) -> Response:
    return compressed(
        request, content.encode("utf-8"), "text/html; charset=utf-8", status_code, {"Content-Security-Policy": CSP}
    )


def not_found(
    request: Request, templates: WebTemplates, message: str, viewer: Principal, prefs: Prefs, self_url: str = "/"
) -> Response:
    """The 404 page, with `message` and the viewer's header; `self_url`: where the page's preference links return."""
    return _message_page(request, templates, message, viewer, prefs, self_url, "Not found", 404)


def refused(
    request: Request, templates: WebTemplates, message: str, viewer: Principal, prefs: Prefs, self_url: str = "/"
) -> Response:
    """A 403 as a page with the viewer's header (a browser got the API's JSON, QA 2026-12-07)."""
    return _message_page(request, templates, message, viewer, prefs, self_url, "Not allowed", 403)


def bad_address(
    request: Request, templates: WebTemplates, message: str, viewer: Principal, prefs: Prefs, self_url: str = "/"
) -> Response:
    """A 422 as a page: a page's query that is not what it takes (/p/<id>?rank=abc)."""
    return _message_page(request, templates, message, viewer, prefs, self_url, "Bad address", 422)


def site_page(request: Request, status_code: int, heading: str, message: str) -> Response:
    """The site's message page for an address no route answers, or a route's error a browser reads (the API's error
    handlers call it, app/api/errors.py install): the site's CSP (the API's `default-src 'none'` blocked the
    stylesheet) and the viewer's units and theme from the cookie (QA 2026-12-07)."""
    prefs = prefs_mod.parse(request.cookies.get(prefs_mod.COOKIE))
    templates = request.app.state.templates
    return _message_page(request, templates, message, None, prefs, "/", heading, status_code)


def _message_page(
    request: Request,
    templates: WebTemplates,
    message: str,
    viewer: Principal | None,
    prefs: Prefs,
    self_url: str,
    heading: str,
    status_code: int,
) -> Response:
    """The message page; without a `viewer` (an address no route answers: nobody was authenticated) the header has
    no login line."""
    context: dict[str, object] = {"message": message, "heading": heading, "prefs": prefs, "self_url": self_url}
    if viewer is not None:
        context["viewer"] = viewer
    page = templates.render("not_found.html", planner_version=__version__, **context)
    return html(request, page, status_code)


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
