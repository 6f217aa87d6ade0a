"""/clusters: saved cluster descriptions, reusable in requests as `{"cluster": {"saved": name}}`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Response, status
from pydantic import ValidationError

from app.api.openapi import AUTH_ERRORS, EXAMPLE_PLAN
from app.api.routing import StrictJSONRoute
from app.api.schemas import ErrorBody, SavedCluster, SavedClusterPage
from app.service.bodies import NAME_PATTERN, ClusterDescription
from app.service.clusters import (
    SavedClusterChange,
    SavedClusterIn,
    change_cluster,
    delete_cluster,
    get_cluster,
    save_cluster,
)
from app.service.deps import ClustersDep, ReaderDep, SentJson, SettingsDep, WriterDep
from app.service.errors import validation_errors
from app.store import ClusterRecord

router = APIRouter(prefix="/clusters", tags=["clusters"], route_class=StrictJSONRoute)
Name = Annotated[str, Path(pattern=NAME_PATTERN, description="The saved cluster's name.")]
ERRORS: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody}, 422: {"model": ErrorBody}, **AUTH_ERRORS}
CHANGE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    409: {"model": ErrorBody, "description": "The name is taken, or the version is not the stored one."},
    413: {"model": ErrorBody},
    415: {"model": ErrorBody},
}
EXAMPLE = {
    "name": "dgx-h100-pod",
    "description": "32 DGX H100, 8 x 400 Gb/s NDR per node",
    "cluster": EXAMPLE_PLAN["cluster"],
}


def saved_cluster(record: ClusterRecord) -> SavedCluster:
    spec, problem = None, None
    try:
        spec = ClusterDescription.model_validate(record.spec).spec()
    except ValidationError as exc:  # saved under an older planner: shown as stored, with the reason
        problem = "; ".join(str(e) for e in validation_errors(exc, prefix="cluster"))
    return SavedCluster(
        name=record.name,
        owner=record.owner,
        description=record.description,
        version=record.version,
        created_at=record.created_at,
        updated_at=record.updated_at,
        cluster=spec,
        problem=problem,
        sent=record.spec,
        num_gpus=record.num_nodes * record.gpus_per_node,
        url=f"/clusters/{record.name}",
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SavedCluster,
    responses=CHANGE_ERRORS,
    summary="Save a cluster description",
)
def post_cluster(
    body: Annotated[SavedClusterIn, Body(openapi_examples={"pod": {"summary": "A pod", "value": EXAMPLE}})],
    sent: SentJson,
    clusters: ClustersDep,
    who: WriterDep,
    response: Response,
) -> SavedCluster:
    """Nodes, GPU (a catalogue name or custom numbers), NICs, hosts, a measured profile: checked as a ClusterSpec
    and stored as sent. Names are unique (409 when taken). Use it in a plan request as `{"saved": name}`."""
    record = save_cluster(clusters, body, sent, who.name)
    response.headers["Location"] = f"/clusters/{record.name}"
    return saved_cluster(record)


@router.get("", response_model=SavedClusterPage, responses=ERRORS, summary="Saved clusters, by name")
def list_clusters(
    clusters: ClustersDep,
    settings: SettingsDep,
    who: ReaderDep,
    limit: Annotated[int | None, Query(ge=1, le=1_000_000, description="Page size.")] = None,
    offset: Annotated[int, Query(ge=0, le=10**12, description="Items to skip.")] = 0,
    owner: Annotated[
        str | None,
        Query(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$", description="Only this user's ('me': your own)."),
    ] = None,
) -> SavedClusterPage:
    size = min(limit or settings.default_page_size, settings.max_page_size)
    rows, total = clusters.page(size, offset, who.name if owner == "me" else owner)
    return SavedClusterPage(items=[saved_cluster(r) for r in rows], total=total, limit=size, offset=offset)


@router.get("/{name}", response_model=SavedCluster, responses=ERRORS, summary="One saved cluster")
def get_saved_cluster(name: Name, clusters: ClustersDep, who: ReaderDep) -> SavedCluster:
    return saved_cluster(get_cluster(clusters, name))


@router.put("/{name}", response_model=SavedCluster, responses=CHANGE_ERRORS, summary="Change a saved cluster")
def put_cluster(
    name: Name, body: SavedClusterChange, sent: SentJson, clusters: ClustersDep, who: WriterDep
) -> SavedCluster:
    """Its owner or an admin replaces the description, naming the `version` it was read at (409 when someone
    saved since: nothing is overwritten unseen). The previous description stays in the audit log; plans made
    from it keep the description they were made with."""
    return saved_cluster(change_cluster(clusters, name, body, sent, who.name, who.may("admin")))


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=CHANGE_ERRORS,
    summary="Delete a saved cluster",
)
def delete_saved_cluster(name: Name, clusters: ClustersDep, who: WriterDep) -> None:
    """Its owner or an admin; the description is kept in the audit log and in every plan made from it."""
    delete_cluster(clusters, name, who.name, who.may("admin"))
