"""Saved cluster descriptions (name, nodes, GPU from the catalogue or custom numbers, NICs, hosts, a measured
profile): checked as a ClusterSpec at every save, stored as sent, named in requests as `{"saved": name}`.

Names are unique, so a request means one cluster. Anyone who may read plans may read and use them; users save
them; only the owner (or an admin) changes or deletes one, and an edit names the version it changes, so nobody
overwrites a save they have not seen. Every change keeps what was there before in the audit log, and a plan made
from a saved cluster stores the description as it was then.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from app.planner.errors import FieldError
from app.planner.specs import ClusterSpec
from app.service.bodies import Body, ClusterDescription, ClusterName
from app.service.errors import NotFound, Refused
from app.service.requests import ClusterLookup, SavedSpec
from app.store import ClusterExists, ClusterRecord, ClusterStore, ClusterSummary, VersionConflict

Description = Annotated[
    str,
    Field(
        max_length=500,
        pattern=r"^[^\x00-\x1f\x7f]*$",
        description="What the cluster is, for people (one line, at most 500 characters).",
    ),
]


class SavedClusterIn(Body):
    """POST /clusters: a name and a cluster description."""

    name: ClusterName
    description: Description = ""
    cluster: ClusterDescription


class SavedClusterChange(Body):
    """PUT /clusters/{name}: the new description and the version it replaces (from GET /clusters/{name})."""

    version: int = Field(ge=1, le=2**31 - 1, description="The version this change was made on.")
    description: Description = ""
    cluster: ClusterDescription


def summary(spec: ClusterSpec) -> ClusterSummary:
    return ClusterSummary(gpu_name=spec.gpu.name, num_nodes=spec.num_nodes, gpus_per_node=spec.gpus_per_node)


def _sent_cluster(sent: dict[str, Any]) -> dict[str, Any]:
    cluster = sent.get("cluster")
    return dict(cluster) if isinstance(cluster, dict) else {}


def save_cluster(store: ClusterStore, body: SavedClusterIn, sent: dict[str, Any], owner: str) -> ClusterRecord:
    """Store a new saved cluster (409 naming `name` when the name is taken: nothing is replaced)."""
    try:
        return store.add(body.name, _sent_cluster(sent), summary(body.cluster.spec()), body.description, owner)
    except ClusterExists as exc:
        raise Refused([FieldError("name", str(exc))], status_code=409) from None


def get_cluster(store: ClusterStore, name: str) -> ClusterRecord:
    record = store.get(name)
    if record is None:
        raise NotFound(f"no saved cluster named {name!r}", "name")
    return record


def change_cluster(
    store: ClusterStore, name: str, body: SavedClusterChange, sent: dict[str, Any], actor: str, admin: bool
) -> ClusterRecord:
    """Replace a saved description: the owner's or an admin's, on the version stored (409 naming `version`)."""
    try:
        record = store.update(
            name,
            _sent_cluster(sent),
            summary(body.cluster.spec()),
            body.description,
            body.version,
            actor,
            only_owner=None if admin else actor,
        )
    except VersionConflict as exc:
        raise Refused([FieldError("version", str(exc))], status_code=409) from None
    if record is None:
        raise NotFound(f"no saved cluster named {name!r}", "name")
    return record


def delete_cluster(store: ClusterStore, name: str, actor: str, admin: bool) -> None:
    try:
        found = store.delete(name, actor, only_owner=None if admin else actor)
    except VersionConflict as exc:
        raise Refused([FieldError("name", str(exc))], status_code=409) from None
    if not found:
        raise NotFound(f"no saved cluster named {name!r}", "name")


def lookup(store: ClusterStore) -> ClusterLookup:
    """Saved clusters by name, for requests that name one."""

    def find(name: str) -> SavedSpec | None:
        record = store.get(name)
        if record is None:
            return None
        return SavedSpec(record.name, record.spec, record.version, record.owner)

    return find
