"""Response models of the REST API (the request bodies: app/service/bodies.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.planner.gpu import GPUSpec
from app.planner.results import Plan, PlanResult
from app.planner.specs import ClusterSpec, ModelSpec


class Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class FieldErrorOut(Out):
    field: str = Field(
        description="Dotted path of the offending field (e.g. cluster.num_nodes); '' for the whole request."
    )
    message: str = Field(description="What is wrong, with the value given.")


class ErrorBody(Out):
    detail: str = Field(description="One-line summary.")
    errors: list[FieldErrorOut] = Field(default_factory=list, description="One entry per offending field.")


class ArtifactLink(Out):
    name: str = Field(description="File name (ds_config.json, megatron_args.txt, train.sh, ...).")
    rank: int = Field(description="Which ranked plan the file belongs to.")
    url: str = Field(description="Where to download it.")
    media_type: str


class PlanLinks(Out):
    self: str = Field(description="This stored plan (JSON).")
    html: str = Field(description="The result page for people (a permalink).")
    bundle: str | None = Field(description="All files of the chosen plan as one zip (null if nothing fits).")
    artifacts: list[ArtifactLink] = Field(
        description="The chosen plan's files, rendered when the plan was stored. "
        "Other ranks: GET /plans/{id}/artifacts/{name}?rank=N."
    )


class StoredPlan(Out):
    id: str
    created_at: datetime
    planner_version: str = Field(description="Version of the planner that made the result.")
    request: dict[str, Any] = Field(description="The request as it was sent.")
    chosen: Plan | None = Field(description="The rank-1 plan (null when nothing fits).")
    summary: str | None = Field(description="The chosen plan in one line (TP4 PP4 DP4 ...).")
    explanation: list[str] = Field(description="Why the chosen plan ranks first.")
    notices: list[str] = Field(description="What the service changed or could not do (time cap, rendering).")
    result: PlanResult = Field(
        description="Everything the planner returned: ranked plans, rejected candidates "
        "grouped by reason, suggestions, search statistics."
    )
    links: PlanLinks
    owner: str | None = Field(description="The user who made it (null: made before accounts existed).")
    cluster_name: str | None = Field(
        None, description="The saved cluster the request named (its description as it was is in `request`)."
    )


class PlanSummary(Out):
    id: str
    created_at: datetime
    planner_version: str
    model_name: str
    num_parameters: int
    gpu_name: str
    num_gpus: int = Field(description="GPUs the best plan uses (the cluster's when nothing fits).")
    num_plans: int = Field(description="Ranked plans returned (0: nothing fits).")
    best_summary: str | None
    best_tokens_per_s: float | None
    truncated: bool = Field(description="The search hit its time cap.")
    owner: str | None = Field(description="The user who made it.")
    cluster_name: str | None = Field(None, description="The saved cluster the request named (null: described inline).")
    url: str


class PlanPage(Out):
    items: list[PlanSummary] = Field(description="Newest first.")
    total: int
    limit: int
    offset: int
    next: str | None = Field(description="The next page, or null on the last one.")


class ModelPreset(Out):
    name: str
    source: str
    num_parameters: int = Field(description="Parameters derived from the shape by the planner.")
    published_params: float | None = Field(None, description="The size its authors published.")
    spec: ModelSpec


class Health(Out):
    status: Literal["ok"]
    planner_version: str
    renderer_version: str
    database: str = Field(description="sqlite or postgresql.")


class Me(Out):
    name: str = Field(description="The user (or 'anonymous').")
    role: Literal["admin", "user", "read-only", "anonymous"]
    via: Literal["token", "session", "anonymous"] = Field(description="How the request was authenticated.")
    may_create: bool = Field(description="Whether this principal may create plans.")
    may_delete_any: bool = Field(description="Whether this principal may delete other users' plans.")


class AuditEntry(Out):
    id: int
    at: datetime
    actor: str = Field(description="Who did it: a user, or 'cli' for the command line.")
    action: str = Field(description="plan.delete, user.create, user.disable, token.create, token.revoke, ...")
    target: str = Field(description="The plan id, user name or token id.")
    detail: dict[str, Any]


class AuditPage(Out):
    items: list[AuditEntry] = Field(description="Newest first.")
    total: int
    limit: int
    offset: int


GPUList = list[GPUSpec]


class SavedCluster(Out):
    name: str
    owner: str | None = Field(description="The user who saved it (only they, or an admin, change or delete it).")
    description: str
    version: int = Field(description="Saves so far; PUT names the version it changes.")
    created_at: datetime
    updated_at: datetime
    cluster: ClusterSpec | None = Field(
        description="The description as the planner reads it (GPU numbers resolved); null when it no longer reads "
        "as one (a newer planner), with `problem` saying why; `sent` still holds it."
    )
    problem: str | None = Field(None, description="Why `cluster` is null.")
    sent: dict[str, Any] = Field(description="The description as it was saved (what a plan request gets).")
    num_gpus: int
    url: str


class SavedClusterPage(Out):
    items: list[SavedCluster] = Field(description="By name.")
    total: int
    limit: int
    offset: int
