"""POST /estimate, GET /catalog/models, GET /catalog/gpus, GET /me, GET /audit, GET /healthz."""

from __future__ import annotations

from functools import cache
from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Query
from sqlalchemy.exc import SQLAlchemyError

from app.api.openapi import AUTH_ERRORS, EXAMPLE_ESTIMATE
from app.api.routing import StrictJSONRoute
from app.api.schemas import AuditEntry, AuditPage, ErrorBody, GPUList, Health, Me, ModelPreset
from app.planner import ModelSpec, __version__, catalog
from app.planner.results import Estimate
from app.service.artifacts import renderer_version
from app.service.bodies import EstimateBody
from app.service.deps import AccountsDep, AdminDep, ClusterLookupDep, ReaderDep, SettingsDep, StoreDep, WorkDep
from app.service.planning import run_estimate
from app.service.requests import estimate_request

router = APIRouter(route_class=StrictJSONRoute)


@router.post(
    "/estimate",
    response_model=Estimate,
    tags=["plans"],
    summary="Evaluate one fixed parallel layout",
    responses={
        422: {"model": ErrorBody},
        413: {"model": ErrorBody},
        415: {"model": ErrorBody},
        503: {"model": ErrorBody},
        **AUTH_ERRORS,
    },
)
def post_estimate(
    body: Annotated[
        EstimateBody, Body(openapi_examples={"fixed": {"summary": "TP4 PP4 DP16", "value": EXAMPLE_ESTIMATE}})
    ],
    clusters: ClusterLookupDep,
    work: WorkDep,
    who: ReaderDep,
) -> Estimate:
    """Memory per pipeline stage and step time of the layout in `parallel`; `feasible` and `reasons` say
    whether it fits. Nothing is stored. A layout larger than its model (pp > layers, tp > heads, ...) is
    refused before any work; the evaluation is capped in time, memory and output and stops when the client
    leaves."""
    return run_estimate(estimate_request(body, clusters), work)


@cache
def _presets() -> list[ModelPreset]:
    out = []
    for row in catalog.model_presets():
        spec = ModelSpec(**catalog.model_fields(row["name"]))
        out.append(
            ModelPreset(
                name=row["name"],
                source=row.get("source", ""),
                num_parameters=spec.num_parameters,
                published_params=row.get("published_params"),
                spec=spec,
            )
        )
    return out


@router.get(
    "/catalog/models",
    response_model=list[ModelPreset],
    tags=["catalog"],
    summary="Model presets",
    responses=AUTH_ERRORS,
)
def catalog_models(who: ReaderDep) -> list[ModelPreset]:
    return _presets()


@router.get(
    "/catalog/gpus", response_model=GPUList, tags=["catalog"], summary="The GPU catalogue", responses=AUTH_ERRORS
)
def catalog_gpus(who: ReaderDep) -> GPUList:
    return catalog.gpus()


@router.get("/me", response_model=Me, tags=["accounts"], summary="Who this request is", responses=AUTH_ERRORS)
def me(who: ReaderDep) -> Me:
    return Me(name=who.name, role=who.role, via=who.via, may_create=who.may("write"), may_delete_any=who.may("admin"))


@router.get(
    "/audit",
    response_model=AuditPage,
    tags=["accounts"],
    summary="The audit log (admin)",
    responses={422: {"model": ErrorBody}, **AUTH_ERRORS},
)
def audit(
    accounts: AccountsDep,
    who: AdminDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="Page size.")] = 100,
    offset: Annotated[int, Query(ge=0, le=10**12, description="Entries to skip.")] = 0,
) -> AuditPage:
    """Plan deletions and account changes (users, roles, passwords, tokens), newest first."""
    events, total = accounts.audit(limit, offset)
    return AuditPage(items=[AuditEntry(**vars(e)) for e in events], total=total, limit=limit, offset=offset)


@router.get(
    "/healthz",
    response_model=Health,
    tags=["service"],
    summary="Liveness and database check",
    responses={503: {"model": ErrorBody}},
)
def healthz(store: StoreDep, settings: SettingsDep) -> Health:
    try:
        store.ping()
    except SQLAlchemyError as exc:
        raise HTTPException(503, f"database unavailable: {type(exc).__name__}") from None
    return Health(
        status="ok", planner_version=__version__, renderer_version=renderer_version(), database=settings.database_kind
    )
