"""POST /estimate, GET /catalog/models, GET /catalog/gpus, GET /healthz."""

from __future__ import annotations

from functools import cache

from fastapi import APIRouter, HTTPException
from sqlalchemy.exc import SQLAlchemyError

from app.api.artifacts import renderer_version
from app.api.deps import JsonObject, SettingsDep, StoreDep
from app.api.openapi import EXAMPLE_ESTIMATE, request_body
from app.api.schemas import ErrorBody, GPUList, Health, ModelPreset
from app.api.service import run_estimate
from app.planner import EstimateRequest, ModelSpec, __version__, catalog
from app.planner.results import Estimate

router = APIRouter()


@router.post("/estimate", response_model=Estimate, tags=["plans"], summary="Evaluate one fixed parallel layout",
             responses={422: {"model": ErrorBody}, 413: {"model": ErrorBody}},
             openapi_extra=request_body(EstimateRequest, {"fixed": {"summary": "TP4 PP4 DP16",
                                                                    "value": EXAMPLE_ESTIMATE}}))
def post_estimate(body: JsonObject) -> Estimate:
    """Memory per pipeline stage and step time of the layout in `parallel`; `feasible` and `reasons` say
    whether it fits. Nothing is stored."""
    return run_estimate(body)


@cache
def _presets() -> list[ModelPreset]:
    out = []
    for row in catalog.model_presets():
        spec = ModelSpec(**catalog.model_fields(row["name"]))
        out.append(ModelPreset(name=row["name"], source=row.get("source", ""), num_parameters=spec.num_parameters,
                               published_params=row.get("published_params"), spec=spec))
    return out


@router.get("/catalog/models", response_model=list[ModelPreset], tags=["catalog"], summary="Model presets")
def catalog_models() -> list[ModelPreset]:
    return _presets()


@router.get("/catalog/gpus", response_model=GPUList, tags=["catalog"], summary="The GPU catalogue")
def catalog_gpus() -> GPUList:
    return catalog.gpus()


@router.get("/healthz", response_model=Health, tags=["service"], summary="Liveness and database check",
            responses={503: {"model": ErrorBody}})
def healthz(store: StoreDep, settings: SettingsDep) -> Health:
    try:
        store.ping()
    except SQLAlchemyError as exc:
        raise HTTPException(503, f"database unavailable: {type(exc).__name__}") from None
    return Health(status="ok", planner_version=__version__, renderer_version=renderer_version(),
                  database=settings.database_kind)
