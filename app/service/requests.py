"""From a validated body (app/service/bodies.py) to the planner's own requests: presets and config.json imports
become a ModelSpec, a saved cluster its stored description, and the sizes the service refuses before any work are
checked. The API gets the body from FastAPI; the form and the CLI hand in the JSON they built or read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from app.planner import EstimateRequest, PlanRequest, catalog
from app.planner.errors import FieldError, field_errors, value_error
from app.planner.hf_import import from_hf_config
from app.planner.specs import ClusterSpec, ModelSpec, TrainingSpec
from app.render import RenderOptions
from app.service.bodies import (
    ClusterDescription,
    EstimateBody,
    HFConfigModel,
    PlanBody,
    PresetModel,
    SavedClusterRef,
)
from app.service.bounds import layout_errors, model_size_errors, pin_errors
from app.service.errors import Refused, validation_errors


@dataclass(frozen=True)
class SavedSpec:
    """What a saved cluster contributes to a request: its description as it was sent, and who saved it."""

    name: str
    spec: dict[str, Any]
    version: int
    owner: str | None


# name -> the saved cluster, or None; the service passes the cluster store's lookup, the CLI its database's
ClusterLookup = Callable[[str], SavedSpec | None]


@dataclass(frozen=True)
class Parsed:
    """A plan request ready for the planner, its render options, what the service says about how it read it, and
    the request to store: as sent, except that a saved cluster is written out as it was at the time."""

    request: PlanRequest
    options: RenderOptions | None
    stored: dict[str, Any]
    notices: list[str] = field(default_factory=list)
    cluster_name: str | None = None  # the saved cluster it named (the plan list filters by it)


@dataclass(frozen=True)
class ClusterRead:
    """A body's cluster: its spec; for a saved cluster, its name and the description to store; what was said."""

    spec: ClusterSpec
    written: dict[str, Any] | None = None
    notices: list[str] = field(default_factory=list)
    saved_name: str | None = None


def _unreadable_model(exc: Exception) -> FieldError:
    """A model (a config.json, mostly) with a value of a type the importer did not expect."""
    return FieldError("model", f"cannot read the model: {type(exc).__name__}: {exc}")


def _changed_preset(preset: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """A preset's fields with the overrides. Unless the overrides name it, a model whose shape changed says how
    ("llama-2-7b (num_layers 7)"): under the preset's own name a 1.68B model was listed, filtered and titled as
    llama-2-7b (QA, 2026-12-06). The training sequence length is not the model's shape: it keeps the name."""
    fields = catalog.model_fields(preset)
    changed = [
        f"{k} {v}" if isinstance(v, int | float) and not isinstance(v, bool) else k
        for k, v in overrides.items()
        if k in ModelSpec.model_fields and k not in _NOT_SHAPE and fields.get(k) != v
    ]
    named = {"name": f"{preset} ({', '.join(changed)})"[:100]} if changed and "name" not in overrides else {}
    return {**fields, **overrides, **named}


_NOT_SHAPE = frozenset({"name", "source", "seq_length"})


def model_spec(model: object) -> ModelSpec:
    """The ModelSpec a body's `model` names (Refused, naming model.<field>, when it does not validate)."""
    if isinstance(model, ModelSpec):
        return model
    try:
        if isinstance(model, str):
            fields = catalog.model_fields(model)
        elif isinstance(model, PresetModel):
            fields = _changed_preset(model.preset, model.model_extra or {})
        elif isinstance(model, HFConfigModel):
            overrides = {"seq_length": model.seq_length, **(model.model_extra or {})}
            # a window that covers the training sequence is no window (QA 2026-12-07)
            fields = {**from_hf_config(model.hf_config, seq_length=model.seq_length), **overrides}
        else:
            raise TypeError(f"not a model: {type(model).__name__}")
        return ModelSpec.model_validate(fields)
    except ValidationError as exc:
        raise Refused(field_errors(exc, prefix="model")) from None
    except ValueError as exc:  # the importer's refusals (an unknown model_type, sliding-window attention, ...)
        raise Refused(value_error(exc, field="model")) from None
    except (TypeError, KeyError, AttributeError, OverflowError) as exc:  # a config.json value of an odd type
        raise Refused([_unreadable_model(exc)]) from None


def cluster_spec(cluster: object, lookup: ClusterLookup | None) -> ClusterRead:
    """The ClusterSpec of a body's `cluster`; for a saved cluster also its name, the description to store and a
    notice."""
    if isinstance(cluster, ClusterDescription):
        return ClusterRead(cluster.spec())
    if not isinstance(cluster, SavedClusterRef):
        raise TypeError(f"not a cluster: {type(cluster).__name__}")
    saved = lookup(cluster.saved) if lookup is not None else None
    if saved is None:
        where = (
            "saved clusters are kept by the service (POST /clusters)" if lookup is None else "GET /clusters lists them"
        )
        raise Refused([FieldError("cluster.saved", f"no saved cluster named {cluster.saved!r}: {where}")])
    overrides = dict(cluster.model_extra or {})
    written = saved_written(saved.spec, overrides)
    notices: list[str] = []
    hosts = saved.spec.get("hosts") or []
    if "hosts" not in overrides and (written.get("hosts") or []) != hosts:  # cut to the overridden node count
        notices.append(f"cluster.hosts: the saved cluster names {hosts_kept(hosts, overrides['num_nodes'])}")
    try:
        spec = ClusterDescription.model_validate(written).spec()
    except ValidationError as exc:
        raise Refused(validation_errors(exc, prefix="cluster")) from None
    changed = f", with {', '.join(sorted(overrides))} changed" if overrides else ""
    notice = f"cluster: the saved cluster {saved.name!r} (version {saved.version}, saved by {saved.owner}){changed}"
    # made on the saved cluster unless its GPU was swapped (other GPUs are other hardware; node counts and hosts are
    # the usual overrides): the plan list filters by the name
    name = saved.name if "gpu" not in overrides else None
    return ClusterRead(spec, written, [notice, *notices], name)


def saved_written(spec: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The description stored for a saved cluster named with `overrides`: its own with the overrides on top, its
    host list cut to an overridden node count (it was refused on a field not sent: "cluster.hosts: lists 4 hosts but
    num_nodes is 2", QA 2026-12-07)."""
    written = {**spec, **overrides}
    hosts, nodes = spec.get("hosts") or [], overrides.get("num_nodes")
    if hosts and "hosts" not in overrides and isinstance(nodes, int) and 0 < nodes != len(hosts):
        written["hosts"] = hosts_for_nodes(list(hosts), nodes)
    return written


def hosts_for_nodes(hosts: list[str], nodes: int) -> list[str]:
    """A host list (one per node, the head node first) for a node count: on as many or fewer nodes the first hosts;
    on more none, since the added nodes have no names."""
    return hosts[:nodes] if nodes <= len(hosts) else []


def hosts_kept(hosts: list[str], nodes: int) -> str:
    """What `hosts_for_nodes` keeps of `hosts` on `nodes` nodes, for a notice ("4 hosts for 1 node: the first of its
    4 hosts kept", not "for 1 nodes: the first 1 of", review 2026-12-07)."""
    first = f"the first {nodes}" if nodes > 1 else "the first"
    kept = f"{first} of its {len(hosts)} hosts kept" if hosts_for_nodes(hosts, nodes) else "none kept"
    return f"{_count(len(hosts), 'host')} for {_count(nodes, 'node')}: {kept}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def plan_body(raw: Mapping[str, Any]) -> PlanBody:
    """A JSON object as a PlanBody (what FastAPI does for POST /plans), for the form and the CLI."""
    try:
        return PlanBody.model_validate(dict(raw))
    except ValidationError as exc:
        raise Refused(validation_errors(exc)) from None


def _specs(
    model_in: object, cluster_in: object, training: TrainingSpec, lookup: ClusterLookup | None
) -> tuple[PlanRequest, ClusterRead]:
    """The planner's request from a body's three parts, every error of the model and the cluster at once."""
    errors: list[FieldError] = []
    model = cluster = None
    try:
        model = model_spec(model_in)
    except Refused as exc:
        errors += exc.errors
    try:
        cluster = cluster_spec(cluster_in, lookup)
    except Refused as exc:
        errors += exc.errors
    if model is None or cluster is None:
        raise Refused(errors)
    try:
        request = PlanRequest(model=model, cluster=cluster.spec, training=training)
    except ValidationError as exc:  # what holds of the parts together (train_tokens against a step's tokens)
        raise Refused(validation_errors(exc)) from None
    errors += model_size_errors(request.model) + pin_errors(request)
    if errors:
        raise Refused(errors)
    return request, cluster


def plan_request(body: PlanBody, sent: Mapping[str, Any], lookup: ClusterLookup | None = None) -> Parsed:
    """The planner's request for a validated body; `sent` is the JSON as it came (what is stored)."""
    request, cluster = _specs(body.model, body.cluster, body.training, lookup)
    stored = dict(sent) if cluster.written is None else {**sent, "cluster": cluster.written}
    notices = [*cluster.notices, *_context_notices(body.model, request.model.seq_length)]
    return Parsed(request, body.render, stored, notices, cluster.saved_name)


def _context_notices(model: object, seq_length: int) -> list[str]:
    """A config.json model trained at a longer sequence than its config says it supports: planned as asked, but not
    without a word (it was silent, QA 2026-12-07)."""
    if not isinstance(model, HFConfigModel):
        return []
    config = model.hf_config
    key = (
        "n_positions"
        if "n_positions" in config and "max_position_embeddings" not in config
        else "max_position_embeddings"
    )
    longest = config.get(key)
    if isinstance(longest, bool) or not isinstance(longest, int | float) or seq_length <= longest:
        return []
    scaled = " (before its rope_scaling)" if config.get("rope_scaling") else ""
    return [
        f"model.seq_length: {seq_length:,} is longer than config.json's {key} ({longest:,g}){scaled}, the longest "
        "context the model supports: planned as asked; training at it extends the model's context"
    ]


def parse_plan_request(raw: Mapping[str, Any], lookup: ClusterLookup | None = None) -> Parsed:
    return plan_request(plan_body(raw), raw, lookup)


def estimate_request(body: EstimateBody, lookup: ClusterLookup | None = None) -> EstimateRequest:
    """A fixed layout; refused before any work when it is larger than the model it splits."""
    base, _cluster = _specs(body.model, body.cluster, body.training, lookup)
    request = EstimateRequest(model=base.model, cluster=base.cluster, training=base.training, parallel=body.parallel)
    errors = layout_errors(request)
    if errors:
        raise Refused(errors)
    return request


def parse_estimate_request(raw: Mapping[str, Any], lookup: ClusterLookup | None = None) -> EstimateRequest:
    try:
        body = EstimateBody.model_validate(dict(raw))
    except ValidationError as exc:
        raise Refused(validation_errors(exc)) from None
    return estimate_request(body, lookup)
