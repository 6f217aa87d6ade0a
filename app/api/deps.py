"""FastAPI dependencies, as `Annotated` aliases, in one place. The app keeps its singletons on `app.state`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Body, Depends, Request
from starlette.datastructures import UploadFile

from app.api.service import PlanCache
from app.planner.errors import FieldError
from app.settings import Settings
from app.store import PlanStore
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


SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[PlanStore, Depends(_store)]
CacheDep = Annotated[PlanCache, Depends(_cache)]
TemplatesDep = Annotated[WebTemplates, Depends(_templates)]


@dataclass(frozen=True)
class SubmittedForm:
    values: dict[str, str]  # every text field as typed
    upload: bytes | None  # the config.json file, if one was chosen and is within the limit
    upload_error: FieldError | None


async def _submitted_form(request: Request, settings: SettingsDep) -> SubmittedForm:
    """The multipart form (reading the body is I/O, hence async; the route that uses it is a plain def)."""
    limit = settings.max_upload_bytes
    async with request.form(max_files=2, max_fields=300, max_part_size=limit) as form:
        values = {k: v for k, v in form.multi_items() if isinstance(v, str)}
        file = form.get(UPLOAD_FIELD)
        upload, error = None, None
        if isinstance(file, UploadFile) and file.filename:
            data = await file.read(limit + 1)
            if len(data) > limit:
                error = FieldError(UPLOAD_FIELD, f"the file is larger than the limit of {limit} bytes")
            else:
                upload = data
    return SubmittedForm(values, upload, error)


FormDep = Annotated[SubmittedForm, Depends(_submitted_form)]
# A JSON object body, validated by the planner's own specs in the route (so the API, the form and the CLI
# report the same field errors); the OpenAPI schema of each body is set on its route (app/api/openapi.py).
JsonObject = Annotated[dict[str, Any], Body()]
