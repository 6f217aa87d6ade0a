"""The FastAPI application: `uvicorn app.main:app` or `trainplan serve`. Settings come from the environment."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from app.api import clusters_router, deadline_router, docs, errors, misc_router, openapi, plans_router
from app.api.errors import error_response
from app.api.limits import BodyLimitMiddleware
from app.api.middleware import (
    AllowedHostsMiddleware,
    HeadAsGetMiddleware,
    OriginCheckMiddleware,
    SecurityHeadersMiddleware,
)
from app.planner import __version__, collector
from app.planner.errors import FieldError
from app.service.auth import RateLimiter
from app.service.compute import PlannerPool
from app.service.planning import PlanCache
from app.settings import Settings
from app.store import AccountStore, ClusterStore, PlanStore
from app.web.respond import site_page
from app.web.routes import router as web_router
from app.web.templates import WebTemplates

log = logging.getLogger("uvicorn.error")  # shown with uvicorn's own startup lines
LOGIN_ATTEMPTS_PER_MINUTE = 10  # per client address: password guessing at 10 a minute

DESCRIPTION = """Plans parallel training of large transformers: `POST /plans` searches tensor, pipeline, data, context
and expert parallelism, ZeRO or the distributed optimizer, offload, recomputation and micro-batch size for a model on
a cluster, stores the ranked result and renders the chosen plan's DeepSpeed JSON, Megatron-LM arguments, NCCL exports
and launch scripts. The web form for people is at `/`."""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    store = PlanStore(settings.database_url, settings.sqlite_synchronous, settings.idempotency_hours)
    pool = PlannerPool(settings.planner_processes, settings.planner_memory_mib, settings.max_result_bytes)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        store.init()  # creates the SQLite file (and ./var/) or the PostgreSQL tables on first start
        log.info("trainplan %s: plans in %s", __version__, store.engine.url.render_as_string(hide_password=True))
        with collector.settled():  # the loaded app out of the collector's walks (app/planner/collector.py)
            yield
        pool.close()
        store.close()

    app = FastAPI(
        title="trainplan",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served from the installed swagger-ui-bundle's files, not a CDN (app/api/docs.py)
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.store = store
    app.state.accounts = AccountStore(store.engine)
    app.state.clusters = ClusterStore(store.engine)
    app.state.planner_pool = pool
    app.state.rate_limiter = RateLimiter(settings.rate_limit_per_minute, settings.rate_limit_burst)
    app.state.login_limiter = RateLimiter(LOGIN_ATTEMPTS_PER_MINUTE, LOGIN_ATTEMPTS_PER_MINUTE)
    app.state.plan_cache = PlanCache(settings.plan_cache_size)
    app.state.templates = WebTemplates(settings.templates_dir)
    app.include_router(plans_router)
    app.include_router(misc_router)
    app.include_router(clusters_router)
    app.include_router(deadline_router)
    app.include_router(docs.router)
    app.include_router(web_router)
    errors.install(app, site_page)
    openapi.install(app, settings.anonymous_read)

    @app.exception_handler(OperationalError)
    def _database_down(_request: Request, exc: OperationalError) -> JSONResponse:
        log.error("database error: %s", exc)
        return error_response(503, [FieldError("", "the plan database is unavailable; try again later")])

    app.add_middleware(HeadAsGetMiddleware)  # innermost: the routes see a GET
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(OriginCheckMiddleware, trusted_origins=settings.trusted_origins)
    app.add_middleware(AllowedHostsMiddleware, allowed_hosts=settings.allowed_hosts)
    app.add_middleware(SecurityHeadersMiddleware)  # outermost: on every answer, 413 and 403 included
    return app


app = create_app()
