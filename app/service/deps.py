"""FastAPI dependencies shared by the API and the pages, as `Annotated` aliases, in one place (the pages' own
few: app/web/deps.py). The app keeps its singletons on `app.state`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import anyio.from_thread
from fastapi import Depends, Header, Path, Query, Request

from app.service.auth import (
    CSRF_HEADER,
    SAFE_METHODS,
    AuthError,
    LoginRequired,
    Principal,
    RateLimiter,
    authenticate,
    csrf_ok,
    require,
)
from app.service.clusters import lookup
from app.service.compute import PlannerPool
from app.service.planning import PlanCache, Work
from app.service.requests import ClusterLookup
from app.settings import Settings
from app.store import AccountStore, ClusterStore, PlanStore


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _store(request: Request) -> PlanStore:
    store: PlanStore = request.app.state.store
    return store


def _cache(request: Request) -> PlanCache:
    cache: PlanCache = request.app.state.plan_cache
    return cache


def _accounts(request: Request) -> AccountStore:
    accounts: AccountStore = request.app.state.accounts
    return accounts


def _clusters(request: Request) -> ClusterStore:
    clusters: ClusterStore = request.app.state.clusters
    return clusters


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
AccountsDep = Annotated[AccountStore, Depends(_accounts)]
ClustersDep = Annotated[ClusterStore, Depends(_clusters)]
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


ACCOUNT_NEEDED = (
    "a deadline search runs many plans (up to TRAINPLAN_MAX_DEADLINE_TIME_S of the planner processes): it needs an "
    "account, even where reading is open to anyone; send 'Authorization: Bearer tp_...' or log in at /login"
)


def _account(principal: PrincipalDep, settings: SettingsDep) -> Principal:
    """Any account, the read-only role included; never anonymous, even with TRAINPLAN_ANONYMOUS_READ: for work that
    stores nothing but costs minutes of the planner processes (the deadline search)."""
    if principal.via == "anonymous":
        raise AuthError(401, ACCOUNT_NEEDED)
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
AccountDep = Annotated[Principal, Depends(_account)]  # any account, never anonymous
WriterDep = Annotated[Principal, Depends(_writer)]  # user or admin
AdminDep = Annotated[Principal, Depends(_admin)]
PageViewerDep = Annotated[Principal, Depends(_page_viewer)]


def _cluster_lookup(clusters: ClustersDep) -> ClusterLookup:
    return lookup(clusters)


ClusterLookupDep = Annotated[ClusterLookup, Depends(_cluster_lookup)]


async def _sent_json(request: Request) -> dict[str, Any]:
    """The body as it was sent: one JSON object, read strictly (app/api/routing.py reads it before the route)."""
    body: dict[str, Any] = await request.json()
    return body


# The JSON of a typed body as it came (stored with the plan, digested for Idempotency-Keys); FastAPI validates the
# same JSON as the route's pydantic body.
SentJson = Annotated[dict[str, Any], Depends(_sent_json)]
PlanId = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$", description="A stored plan's id.")]
Rank = Annotated[int, Query(ge=1, le=1000, description="Which ranked plan (1 = the chosen one).")]
# A page's ?rank= as typed: the page answers a bad one with its own HTML page, as it answers a rank out of range
# (Rank's 422 was the API's JSON at /p/<id>?rank=0, QA 2026-12-07)
PageRank = Annotated[str, Query(max_length=32, description="Which ranked plan (1 = the chosen one).")]
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
