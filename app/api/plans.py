"""/plans: create (search + store), read, list, delete, artifacts, bundle.zip."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Path, Query, Request, Response, status

from app.api.openapi import AUTH_ERRORS, EXAMPLES
from app.api.routing import StrictJSONRoute
from app.api.schemas import ArtifactLink, ErrorBody, PlanLinks, PlanPage, PlanSummary, StoredPlan
from app.planner.explain import describe
from app.service import artifacts as arts
from app.service.artifacts import artifact_url
from app.service.bodies import PlanBody
from app.service.deps import (
    CacheDep,
    ClusterLookupDep,
    IdempotencyKeyHeader,
    PlanId,
    Rank,
    ReaderDep,
    SentJson,
    SettingsDep,
    StoreDep,
    WorkDep,
    WriterDep,
)
from app.service.planning import NotFound, create_plan, get_plan, plan_artifacts, why_unrendered
from app.service.requests import plan_request
from app.store import PlanFilters, PlanRecord

router = APIRouter(prefix="/plans", tags=["plans"], route_class=StrictJSONRoute)
# The schema lists the names; an unknown one is still a 404 that lists them (not a bare 422).
ArtifactName = Annotated[
    str,
    Path(
        description="One of: " + ", ".join(arts.ARTIFACT_NAMES), json_schema_extra={"enum": list(arts.ARTIFACT_NAMES)}
    ),
]
ERRORS: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody}, 422: {"model": ErrorBody}, **AUTH_ERRORS}
CREATE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    413: {"model": ErrorBody},
    415: {"model": ErrorBody},
    503: {"model": ErrorBody, "description": "Every planner process stayed busy; retry after `Retry-After`."},
}
FILE_TYPES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    200: {"content": {"text/plain": {}, "application/json": {}, "application/yaml": {}, "text/x-shellscript": {}}},
}
ZIP_TYPE: dict[int | str, dict[str, Any]] = {**ERRORS, 200: {"content": {"application/zip": {}}}}


def links(record: PlanRecord, files: list[str]) -> PlanLinks:
    has_plans = bool(record.result.plans)
    return PlanLinks(
        self=f"/plans/{record.id}",
        html=f"/p/{record.id}",
        bundle=f"/plans/{record.id}/bundle.zip" if has_plans else None,
        artifacts=[
            ArtifactLink(name=n, rank=1, url=artifact_url(record.id, n, 1), media_type=arts.media_type(n))
            for n in files
        ],
    )


def stored_plan(record: PlanRecord, files: list[str]) -> StoredPlan:
    chosen = record.result.best
    return StoredPlan(
        id=record.id,
        created_at=record.created_at,
        planner_version=record.planner_version,
        request=record.request,
        chosen=chosen,
        summary=describe(chosen.parallel) if chosen else None,
        explanation=list(chosen.why) if chosen else list(record.result.suggestions),
        notices=record.notices,
        result=record.result,
        links=links(record, files),
        owner=record.owner,
        cluster_name=record.cluster_name,
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=StoredPlan,
    responses=CREATE_ERRORS,
    summary="Search plans for a request and store them",
)
def post_plan(
    body: Annotated[PlanBody, Body(openapi_examples=EXAMPLES)],
    sent: SentJson,
    clusters: ClusterLookupDep,
    store: StoreDep,
    work: WorkDep,
    cache: CacheDep,
    who: WriterDep,
    request: Request,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response:
    """Search parallel layouts for the request, store the ranked result with the chosen plan's files; `201`
    with `Location`. A request that fits nowhere is still stored: `chosen` is null and `explanation` says
    what would fit. Needs the user or admin role; the plan records its owner. A saved cluster
    (`{"saved": name}`) is stored as the description it was at the time."""
    created = create_plan(
        store, sent, lambda: plan_request(body, sent, clusters), work, cache, who.name, idempotency_key
    )
    record = created.record
    headers = {
        "Location": str(request.url_for("get_plan_by_id", plan_id=record.id).path),
        # a replay searched nothing: it is the plan the key made the first time
        "X-Trainplan-Search": "replayed" if created.replayed else "cached" if created.cache_hit else "searched",
    }
    if created.replayed:
        headers["Idempotent-Replayed"] = "true"
    # serialised once, as the StoredPlan it is (`response_model` documents it): FastAPI would validate the returned
    # model again, dump it to Python objects and then to JSON, about 1 ms of the request for a 70 KB result
    content = stored_plan(record, created.files).model_dump_json(by_alias=True)
    return Response(content, status_code=status.HTTP_201_CREATED, media_type="application/json", headers=headers)


@router.get("", response_model=PlanPage, responses=ERRORS, summary="Stored plans, newest first")
def list_plans(
    store: StoreDep,
    settings: SettingsDep,
    who: ReaderDep,
    limit: Annotated[
        int | None, Query(ge=1, le=1_000_000, description="Page size (default, maximum: settings).")
    ] = None,
    offset: Annotated[int, Query(ge=0, le=10**12, description="Items to skip.")] = 0,
    owner: Annotated[
        str | None,
        Query(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$", description="Only this user's plans ('me': your own)."),
    ] = None,
    q: Annotated[
        str,
        Query(
            max_length=100,
            description="Words that must all appear in the id, model, GPU, layout, owner or saved cluster (the first 8 "
            "distinct ones).",
        ),
    ] = "",
    model: Annotated[str, Query(max_length=200, description="Only plans of this model (its name).")] = "",
    gpu: Annotated[str, Query(max_length=200, description="Only plans on this GPU (its name).")] = "",
    cluster: Annotated[
        str, Query(max_length=64, description="Only plans made on this saved cluster (its name, GET /clusters).")
    ] = "",
) -> PlanPage:
    size = min(limit or settings.default_page_size, settings.max_page_size)
    who_owns = who.name if owner == "me" else owner
    rows, total = store.page(size, offset, who_owns, PlanFilters(q=q, model=model, gpu=gpu, cluster=cluster))
    items = [PlanSummary(**vars(r), url=f"/plans/{r.id}") for r in rows]
    given = (("owner", owner), ("q", q), ("model", model), ("gpu", gpu), ("cluster", cluster))
    extra = urlencode({k: v for k, v in given if v})
    nxt = (
        f"/plans?limit={size}&offset={offset + size}" + (f"&{extra}" if extra else "")
        if offset + size < total
        else None
    )
    return PlanPage(items=items, total=total, limit=size, offset=offset, next=nxt)


@router.get("/{plan_id}", response_model=StoredPlan, responses=ERRORS, summary="One stored plan")
def get_plan_by_id(plan_id: PlanId, store: StoreDep, who: ReaderDep) -> StoredPlan:
    record = get_plan(store, plan_id)
    return stored_plan(record, store.artifact_names(plan_id, 1))


@router.delete(
    "/{plan_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=ERRORS,
    summary="Delete a stored plan and its files",
)
def delete_plan(plan_id: PlanId, store: StoreDep, who: WriterDep) -> None:
    """A user deletes their own plans, an admin any; every deletion is in the audit log (GET /audit)."""
    if not store.delete(plan_id, actor=who.name, only_owner=None if who.may("admin") else who.name):
        raise NotFound(f"no stored plan with id {plan_id!r}", "id")


@router.get("/{plan_id}/artifacts/{name}", response_class=Response, summary="One rendered file", responses=FILE_TYPES)
def get_artifact(plan_id: PlanId, name: ArtifactName, store: StoreDep, who: ReaderDep, rank: Rank = 1) -> Response:
    """A file of the chosen plan (or of `rank`), as rendered the first time it was asked for and kept since."""
    if name not in arts.ARTIFACT_NAMES:
        raise NotFound(f"unknown artifact {name!r}; known: {', '.join(arts.ARTIFACT_NAMES)}", "name")
    record = get_plan(store, plan_id)
    files = plan_artifacts(store, record, rank)
    if not files:  # it said "...; it has: " (QA, 2026-12-07)
        raise NotFound(f"rank {rank} of plan {plan_id} has no rendered files: {why_unrendered(record, rank)}", "name")
    if name not in files:
        raise NotFound(
            f"{name} does not apply to rank {rank} of plan {plan_id}; it has: {', '.join(sorted(files))}", "name"
        )
    return Response(
        files[name], media_type=arts.media_type(name), headers={"Content-Disposition": f'inline; filename="{name}"'}
    )


@router.get(
    "/{plan_id}/bundle.zip",
    response_class=Response,
    summary="All files of one ranked plan as a zip",
    responses=ZIP_TYPE,
)
def get_bundle(plan_id: PlanId, store: StoreDep, who: ReaderDep, rank: Rank = 1) -> Response:
    record = get_plan(store, plan_id)
    files = plan_artifacts(store, record, rank)
    data = arts.bundle_zip(plan_id, rank, files, record.request, record.result)
    filename = f"trainplan-{plan_id}-rank{rank}.zip"
    return Response(
        data, media_type="application/zip", headers={"Content-Disposition": f'attachment; filename="{filename}"'}
    )
