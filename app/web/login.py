"""The web login: GET/POST /login, POST /logout. A session is a random secret in an HttpOnly, SameSite=Lax cookie
(Secure over https); the login form itself carries a one-off CSRF value that must match its cookie."""

from __future__ import annotations

import logging
import secrets
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.planner import __version__
from app.service.auth import (
    CSRF_FIELD,
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    AuthError,
    RateLimiter,
    client_address,
    csrf_ok,
)
from app.service.deps import AccountsDep, PrincipalDep, SettingsDep
from app.web.deps import TemplatesDep
from app.web.templates import WebTemplates

router = APIRouter(include_in_schema=False)
log = logging.getLogger("trainplan.login")
CSP = "default-src 'none'; style-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
NextUrl = Annotated[str, Query(alias="next", max_length=2000)]


def safe_next(url: str) -> str:
    """Only a path on this site (no scheme, no //host): the login never redirects elsewhere."""
    return url if url.startswith("/") and not url.startswith("//") and "\\" not in url else "/"


def _login_page(
    templates: WebTemplates, request: Request, next_url: str, error: str = "", status_code: int = 200, name: str = ""
) -> HTMLResponse:
    nonce = secrets.token_urlsafe(24)
    body = templates.render(
        "login.html",
        next_url=safe_next(next_url),
        error=error,
        login_csrf=nonce,
        planner_version=__version__,
        typed_name=name[:64],  # typed again after a wrong password: the name is kept, never the password
    )
    response = HTMLResponse(body, status_code=status_code, headers={"Content-Security-Policy": CSP})
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        nonce,
        max_age=3600,
        httponly=True,
        samesite="strict",
        path="/login",
        secure=request.url.scheme == "https",
    )
    return response


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, templates: TemplatesDep, next_url: NextUrl = "/") -> HTMLResponse:
    return _login_page(templates, request, next_url)


async def _small_form(request: Request) -> dict[str, str]:
    """The login or logout form's few text fields (reading a body is I/O, hence async; the routes are plain)."""
    async with request.form(max_files=0, max_fields=10, max_part_size=4096) as form:
        return {k: v for k, v in form.multi_items() if isinstance(v, str)}


SmallForm = Annotated[dict[str, str], Depends(_small_form)]


@router.post("/login", response_class=HTMLResponse)
def login(
    request: Request, values: SmallForm, accounts: AccountsDep, settings: SettingsDep, templates: TemplatesDep
) -> Response:
    """Name and password -> a session cookie and a redirect to `next`."""
    next_url = safe_next(values.get("next", "/"))
    sent, expected = values.get(CSRF_FIELD, ""), request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not expected or not secrets.compare_digest(sent.encode(), expected.encode()):
        return _login_page(templates, request, next_url, "The login form expired: please try again.", 403)
    limiter: RateLimiter = request.app.state.login_limiter
    key = f"login:{client_address(request)}"
    try:
        limiter.check(key, spend=False)  # failed attempts spend it (below): real logins lock nobody out
    except AuthError as exc:
        return _login_page(templates, request, next_url, exc.error.message, 429)
    name, password = values.get("name", "").strip(), values.get("password", "")
    user = accounts.check_login(name, password)
    if user is None:
        limiter.spend(key)
        log.warning("failed login for %r from %s", name[:64], client_address(request))
        return _login_page(templates, request, next_url, "Wrong name or password.", 401, name=name)
    secret = accounts.create_session(user.name, settings.session_hours)
    response = RedirectResponse(next_url, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=int(settings.session_hours * 3600),
        httponly=True,
        samesite="lax",
        path="/",
        secure=request.url.scheme == "https",
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
    return response


@router.post("/logout")
def logout(values: SmallForm, accounts: AccountsDep, who: PrincipalDep) -> Response:
    """End the session (with its CSRF token) and go back to the login page."""
    if who.via == "session":
        if not csrf_ok(who, values.get(CSRF_FIELD)):
            raise AuthError(403, "the logout form's CSRF token is not this session's", field=CSRF_FIELD)
        accounts.end_session(who.session_secret or "")
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
