"""Pure ASGI middleware: security headers on every response, no cross-origin browser POSTs, and only the allowed
host names.

Security headers go on JSON, files and errors as well as HTML (a route's own header, e.g. the pages' CSP or
the stylesheet's Cache-Control, is kept). Any state-changing request whose `Origin` (or `Sec-Fetch-Site`) says
it comes from another site is refused with 403 before the app sees it: with the session cookie's SameSite=Lax
and the CSRF token, a third guard against cross-site form posts. A request for a host name the service does not
serve (TRAINPLAN_ALLOWED_HOSTS) is refused with 400: a page whose own name was rebound to this service's address is
same-origin with itself, so the origin check alone lets it through.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.service.auth import SAFE_METHODS

# JSON and files: nothing may run or be framed. The docs page (Swagger UI) runs this origin's scripts only (served
# from the installed swagger-ui-bundle-v2, app/api/docs.py); Swagger UI sets inline styles.
API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
DOCS_PATHS = ("/docs",)
HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",  # "no-referrer" makes browsers send Origin: null on forms
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=(), interest-cohort=()",
    "cache-control": "no-store",
}


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = DOCS_CSP if scope.get("path") in DOCS_PATHS else API_CSP
        https = scope.get("scheme") == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in {**HEADERS, "content-security-policy": csp}.items():
                    if name not in headers:
                        headers[name] = value
                if https:
                    headers.setdefault("strict-transport-security", "max-age=31536000")
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HeadAsGetMiddleware:
    """HEAD is answered wherever GET is, with GET's status and headers and no body (RFC 9110 sec. 9.3.2: a
    general-purpose server must support it). FastAPI registers GET routes only, so HEAD /healthz, the load
    balancers' check, got a 405 whose Allow header listed GET (QA 2026-12-07)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        if scope["method"] == "HEAD":  # (a 405's Allow lists HEAD beside GET: errors.allowed_methods)
            await self.app({**scope, "method": "GET"}, receive, send_without_body)
        else:
            await self.app(scope, receive, send)


async def refuse(send: Send, status: int, field: str, reason: str) -> None:
    """The service's JSON error, naming the field, sent before the app sees the request."""
    body = json.dumps({"detail": f"{field}: {reason}", "errors": [{"field": field, "message": reason}]}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _own_origin(scope: Scope, headers: Headers) -> str:
    host = headers.get("host", "")
    return f"{scope.get('scheme', 'http')}://{host}".lower()


class OriginCheckMiddleware:
    """403 for a POST/PUT/PATCH/DELETE that a browser says comes from another origin."""

    def __init__(self, app: ASGIApp, trusted_origins: tuple[str, ...] = ()) -> None:
        self.app = app
        self.trusted = {o.lower() for o in trusted_origins}

    def _refusal(self, scope: Scope) -> str | None:
        headers = Headers(scope=scope)
        if headers.get("sec-fetch-site") == "cross-site":
            return "a cross-site request (Sec-Fetch-Site: cross-site) may not change anything here"
        origin = headers.get("origin")
        if origin is None:
            return None  # not a browser, or a same-origin navigation of an old browser: the CSRF token decides
        parts = urlsplit(origin.lower())
        if origin == "null" or f"{parts.scheme}://{parts.netloc}" not in {_own_origin(scope, headers), *self.trusted}:
            return (
                f"{origin!r} is not this service's origin ({_own_origin(scope, headers)}) nor one of "
                "TRAINPLAN_TRUSTED_ORIGINS; cross-origin requests may not change anything"
            )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        reason = self._refusal(scope)
        if reason is None:
            await self.app(scope, receive, send)
            return
        await refuse(send, 403, "origin", reason)


HEALTH_PATHS = ("/healthz",)  # probes ask by address (Kubernetes' httpGet sends the pod IP as Host)


def host_name(header: str) -> str:
    """The Host header without its port or the root's dot: `Example.com.:8000` -> `example.com`, `[::1]:8000` ->
    `[::1]` (a browser sends the dot when the URL has it)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return (header.rsplit(":", 1)[0] if header.count(":") == 1 else header).removesuffix(".")


def host_allowed(name: str, allowed: tuple[str, ...]) -> bool:
    return any(
        pattern == "*" or name == pattern or (pattern.startswith("*.") and name.endswith(pattern[1:]))
        for pattern in allowed
    )


class AllowedHostsMiddleware:
    """400 for a request whose Host is not one of the allowed names (every name when they include `*`)."""

    def __init__(self, app: ASGIApp, allowed_hosts: tuple[str, ...] = ("*",)) -> None:
        self.app = app
        self.allowed = tuple(h.lower() for h in allowed_hosts)
        self.any = "*" in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.any or scope["type"] not in ("http", "websocket") or scope.get("path") in HEALTH_PATHS:
            await self.app(scope, receive, send)
            return
        name = host_name(Headers(scope=scope).get("host", ""))
        if host_allowed(name, self.allowed):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":  # refused before the handshake is accepted (the server answers 403)
            await send({"type": "websocket.close", "code": 1008})
            return
        # the allowed names are not listed: an unauthenticated client would learn the internal ones
        reason = f"{name or '(none)'!r} is not a host name this service answers (TRAINPLAN_ALLOWED_HOSTS)"
        await refuse(send, 400, "host", reason)
