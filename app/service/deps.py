"""FastAPI dependencies, as `Annotated` aliases, in one place. The app keeps its singletons on `app.state`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio.from_thread
from fastapi import Depends, Header, Request
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.auth import (
    CSRF_HEADER,
    AuthError,
    LoginRequired,
    Principal,
    RateLimiter,
    authenticate,
    csrf_ok,
    require,
)
from app.api.compute import PlannerPool
from app.api.jsonbody import BodyError, parse_json_object
from app.api.middleware import SAFE_METHODS
from app.api.service import PlanCache, Work
from app.planner.errors import FieldError
from app.settings import Settings
from app.store import AccountStore, PlanStore
from app.web.templates import WebTemplates

UPLOAD_FIELD = "hf.config"


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _store(request: Request) -> PlanStore:
    store: PlanStore = request.app.state.store
    return store


def _cache(request: Request) -> PlanCache:
    cache: PlanCache = request.app.state.plan_cache
    return cache


def _templates(request: Request) -> WebTemplates:
    templates: WebTemplates = request.app.state.templates
    return templates


def _accounts(request: Request) -> AccountStore:
    accounts: AccountStore = request.app.state.accounts
    return accounts


def _client_gone(request: Request) -> Callable[[], bool]:
    """Whether the client has closed the connection; callable from the route's worker thread."""

    def gone() -> bool:
        try:
            return bool(anyio.from_thread.run(request.is_disconnected))
        except RuntimeError:  # not in one of anyio's worker threads
            return False

    return gone


def _work(request: Request, settings: Annotated[Settings, Depends(_settings)]) -> Work:
    pool: PlannerPool = request.app.state.planner_pool
    return Work(pool, settings, _client_gone(request))


SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[PlanStore, Depends(_store)]
CacheDep = Annotated[PlanCache, Depends(_cache)]
TemplatesDep = Annotated[WebTemplates, Depends(_templates)]
AccountsDep = Annotated[AccountStore, Depends(_accounts)]
WorkDep = Annotated[Work, Depends(_work)]


def _principal(request: Request, accounts: AccountsDep) -> Principal:
    """Who is asking (token, session or anonymous), counted against their rate limit."""
    limiter: RateLimiter = request.app.state.rate_limiter
    try:
        principal = authenticate(request, accounts)
    except AuthError:
        limiter.check(f"address:{request.client.host if request.client else 'unknown'}")  # slows token guessing
        raise
    limiter.check(principal.limit_key)
    return principal


PrincipalDep = Annotated[Principal, Depends(_principal)]


def _reader(principal: PrincipalDep, settings: SettingsDep) -> Principal:
    return require(principal, "read", settings)


def _csrf_checked(request: Request, principal: Principal) -> Principal:
    if request.method not in SAFE_METHODS and not csrf_ok(principal, request.headers.get(CSRF_HEADER)):
        raise AuthError(
            403,
            f"a change made with a login session needs the {CSRF_HEADER} header of that "
            "session (API clients: use a token)",
            field=CSRF_HEADER,
        )
    return principal


def _writer(request: Request, principal: PrincipalDep, settings: SettingsDep) -> Principal:
    return _csrf_checked(request, require(principal, "write", settings))


def _admin(request: Request, principal: PrincipalDep, settings: SettingsDep) -> Principal:
    return _csrf_checked(request, require(principal, "admin", settings))


def _page_viewer(request: Request, principal: PrincipalDep, settings: SettingsDep) -> Principal:
    """Pages for people: without a login (and anonymous reading off), a redirect to /login and back."""
    if principal.via == "anonymous" and not settings.anonymous_read:
        raise LoginRequired(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    return require(principal, "read", settings)


ReaderDep = Annotated[Principal, Depends(_reader)]  # any account, or anyone with TRAINPLAN_ANONYMOUS_READ on
WriterDep = Annotated[Principal, Depends(_writer)]  # user or admin
AdminDep = Annotated[Principal, Depends(_admin)]
PageViewerDep = Annotated[Principal, Depends(_page_viewer)]


@dataclass(frozen=True)
class SubmittedForm:
    values: dict[str, str]  # every text field as typed
    upload: bytes | None  # the config.json file, if one was chosen and is within the limit
    upload_error: FieldError | None


async def _submitted_form(request: Request, settings: SettingsDep) -> SubmittedForm:
    """The multipart form (reading the body is I/O, hence async; the route that uses it is a plain def)."""
    limit = settings.max_upload_bytes
    try:
        form = await request.form(max_files=2, max_fields=300, max_part_size=limit)
    except StarletteHTTPException as exc:  # the form parser's 400 (a part over the limit, too many fields, ...)
        status = 413 if "maximum size" in str(exc.detail) else 422
        raise BodyError([FieldError("", f"the form could not be read: {exc.detail}")], status) from None
    try:
        values = {k: v for k, v in form.multi_items() if isinstance(v, str)}
        file = form.get(UPLOAD_FIELD)
        upload, error = None, None
        if isinstance(file, UploadFile) and file.filename:
            data = await file.read(limit + 1)
            if len(data) > limit:
                error = FieldError(UPLOAD_FIELD, f"the file is larger than the limit of {limit} bytes")
            else:
                upload = data
    finally:
        await form.close()
    return SubmittedForm(values, upload, error)


FormDep = Annotated[SubmittedForm, Depends(_submitted_form)]


async def _json_object(request: Request) -> dict[str, Any]:
    """The body as one JSON object, read strictly (app/api/jsonbody.py)."""
    return parse_json_object(await request.body(), request.headers.get("content-type"))


# A JSON object body, validated by the planner's own specs in the route (so the API, the form and the CLI
# report the same field errors); the OpenAPI schema of each body is set on its route (app/api/openapi.py).
JsonObject = Annotated[dict[str, Any], Depends(_json_object)]
IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=r"^[\x21-\x7e]+$",
        description="Any 1-255 printable ASCII characters (a UUID, say). A retry of a POST with the same key and "
        "body within the window returns the plan the first one made (201, `Idempotent-Replayed: true`) instead "
        "of a second plan; the same key with another body is a 422.",
    ),
]
