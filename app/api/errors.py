"""Every bad request becomes a 4xx whose JSON body names the field and the reason (never a 500)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.api.schemas import ErrorBody, FieldErrorOut
from app.planner.errors import FieldError
from app.service.auth import AuthError, LoginRequired
from app.service.errors import NotFound, Refused, error_list
from app.service.jsonbody import BodyError
from app.store import NotOwner


def error_response(
    status_code: int, errors: list[FieldError], detail: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(
        detail=detail or "; ".join(str(e) for e in errors) or "bad request",
        errors=[FieldErrorOut(field=e.field, message=e.message) for e in errors],
    )
    return JSONResponse(body.model_dump(), status_code=status_code, headers=dict(headers or {}))


def _retry_after(seconds: int | None) -> dict[str, str]:
    return {"Retry-After": str(seconds)} if seconds is not None else {}


def request_errors(errors: Iterable[Mapping[str, Any]]) -> list[FieldError]:
    """FastAPI's own checks (the typed bodies, query and path parameters) as field errors, worded as the planner's
    field_errors words them; JSON syntax errors say where in the text."""
    out = []
    for err in errors:
        if err.get("type") == "json_invalid":  # loc holds the position in the text, not a field
            reason = (err.get("ctx") or {}).get("error", "")
            where = ".".join(str(p) for p in err.get("loc", ())[1:])
            out.append(FieldError("", f"request body is not valid JSON: {reason} (at character {where})"))
        else:
            out += error_list([err])
    return out


def install(app: FastAPI, site_page: Page) -> None:
    """The error handlers; `site_page` renders what a browser reads instead of the API's JSON."""
    app.state.site_page = site_page

    @app.exception_handler(Refused)
    def _input(_request: Request, exc: Refused) -> Response:
        if exc.status_code == 499:  # the client left: nobody reads this
            return Response(status_code=499)
        return error_response(exc.status_code, exc.errors, headers=_retry_after(exc.retry_after_s))

    @app.exception_handler(BodyError)
    def _body(_request: Request, exc: BodyError) -> JSONResponse:
        return error_response(exc.status_code, exc.errors)

    @app.exception_handler(AuthError)
    def _auth(_request: Request, exc: AuthError) -> JSONResponse:
        headers = _retry_after(exc.retry_after_s)
        if exc.status_code == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="trainplan"'
        return error_response(exc.status_code, [exc.error], headers=headers)

    @app.exception_handler(NotOwner)
    def _not_owner(_request: Request, exc: NotOwner) -> JSONResponse:
        field = "id" if exc.kind == "plan" else "name"
        return error_response(
            403, [FieldError(field, f"{exc}; a user changes only their own {exc.kind}s (admins any)")]
        )

    @app.exception_handler(LoginRequired)
    def _login(_request: Request, exc: LoginRequired) -> RedirectResponse:
        return RedirectResponse(f"/login?next={quote(exc.next_url, safe='')}", status_code=303)

    @app.exception_handler(NotFound)
    def _not_found(request: Request, exc: NotFound) -> Response:
        if _browser_get(request):
            return _page(request, 404, "Not found", str(exc.error))
        return error_response(404, [exc.error])

    @app.exception_handler(RequestValidationError)
    def _validation(request: Request, exc: RequestValidationError) -> Response:
        errors = request_errors(exc.errors())
        if _browser_get(request):  # a page's query (/p/<id>?rank=abc): the site's page, not the API's JSON
            return _page(request, 422, "Bad address", "; ".join(str(e) for e in errors) or "bad request")
        return error_response(422, errors)

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404 and _browser_get(request):
            # a browser at an unknown address gets the site's not-found page, not {"detail": "Not Found"}
            return _page(request, 404, "Not found", f"No page at {request.url.path}.")
        headers = dict(exc.headers or {})
        errors: list[FieldError] = []
        if exc.status_code == 405:  # every method of the path, not only those of the first route that matched it
            headers["Allow"] = allow = ", ".join(allowed_methods(request))
            errors = [FieldError("method", f"{request.method} is not allowed on {request.url.path}; allowed: {allow}")]
        elif exc.status_code == 404:  # an unknown address (a route's own 404s name their field: NotFound)
            errors = [FieldError("path", f"no such address: {request.url.path} (the API is listed at /docs)")]
        return error_response(exc.status_code, errors, detail=str(exc.detail), headers=headers)


def _browser_get(request: Request) -> bool:
    """A browser reading a page (what it accepts names HTML), as against an API client."""
    return request.method in ("GET", "HEAD") and "text/html" in request.headers.get("accept", "")


Page = Callable[[Request, int, str, str], Response]  # (request, status, heading, message) -> the site's page


def _page(request: Request, status: int, heading: str, message: str) -> Response:
    """The site's page (app.web.respond.site_page, which app.main hands to `install`: the API does not import the
    web package) for a browser at an address no route answers or with a query a page does not take."""
    page: Page = request.app.state.site_page
    return page(request, status, heading, message)


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """The methods some route answers on this path (asked of the router, so included routers count too), and HEAD
    wherever GET is (middleware.HeadAsGetMiddleware answers it)."""
    found = [
        m
        for m in _METHODS
        if any(route.matches({**request.scope, "method": m})[0] == Match.FULL for route in request.app.routes)
    ]
    return [*found, "HEAD"] if "GET" in found and "HEAD" not in found else found
