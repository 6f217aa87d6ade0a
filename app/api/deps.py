"""FastAPI dependencies, as `Annotated` aliases, in one place. The app keeps its singletons on `app.state`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, Depends, Request

from app.api.service import PlanCache
from app.settings import Settings
from app.store import PlanStore


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _store(request: Request) -> PlanStore:
    store: PlanStore = request.app.state.store
    return store


def _cache(request: Request) -> PlanCache:
    cache: PlanCache = request.app.state.plan_cache
    return cache


SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[PlanStore, Depends(_store)]
CacheDep = Annotated[PlanCache, Depends(_cache)]
# A JSON object body, validated by the planner's own specs in the route (so the API, the form and the CLI
# report the same field errors); the OpenAPI schema of each body is set on its route (app/api/openapi.py).
JsonObject = Annotated[dict[str, Any], Body()]
