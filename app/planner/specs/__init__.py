"""Typed, frozen, validated inputs of the planner.

Every spec validates on construction; errors are ``ValueError``s that name the field and the numbers, so
that the CLI and the API can show them as they are. Field descriptions are the one source of help text for
the OpenAPI schema and the web form.
"""

from __future__ import annotations

from pydantic import field_validator, model_validator

from app.planner import catalog
from app.planner.errors import InputError
from app.planner.hf_import import from_hf_config
from app.planner.specs.cluster import ClusterSpec
from app.planner.specs.common import (
    SAFE_NAME,
    SAFE_PATH,
    CPCommType,
    FP8Recipe,
    Framework,
    Frozen,
    GradReduceDtype,
    MegatronFSDP,
    MoETokenDispatcher,
    Objective,
    OffloadDevice,
    OptimizerStates,
    PartitionMethod,
    Precision,
    Recompute,
    RecomputeMethod,
    RecomputeModule,
    Schedule,
    check_safe_name,
    check_safe_path,
    default_ffn_hidden_size,
)
from app.planner.specs.model import ModelSpec
from app.planner.specs.parallel import PARALLEL_DEFAULTS, ParallelConfig
from app.planner.specs.training import ParallelPins, TrainingSpec


def train_tokens_problem(model: ModelSpec, training: TrainingSpec) -> str | None:
    """Time to train counts whole steps: fewer tokens than one global batch priced a run at nanoseconds (the
    deadline search's days 0.0 at 5e-324 tokens, QA 2026-12-07)."""
    tokens, step = training.train_tokens, training.global_batch_size * model.seq_length
    if tokens is None or tokens >= step:
        return None
    return (
        f"{tokens:g} is less than one step's {step:,} tokens (global_batch_size {training.global_batch_size} x "
        f"seq_length {model.seq_length})"
    )


class PlanRequest(Frozen):
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec

    @field_validator("model", mode="before")
    @classmethod
    def _resolve_model(cls, model: object) -> object:
        """`model` may be a preset name, {"preset": name, ...overrides}, {"hf_config": {...config.json...},
        ...overrides} or the ModelSpec fields."""
        if isinstance(model, str):
            return catalog.model_fields(model)
        if isinstance(model, dict) and "preset" in model:
            overrides = {k: v for k, v in model.items() if k != "preset"}
            return {**catalog.model_fields(str(model["preset"])), **overrides}
        if isinstance(model, dict) and "hf_config" in model:
            overrides = {k: v for k, v in model.items() if k != "hf_config"}
            seq = model.get("seq_length")  # a window that covers the training sequence is no window (QA)
            seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
            return {**from_hf_config(model["hf_config"], seq_length=seq), **overrides}
        return model

    @model_validator(mode="after")
    def _a_step_of_tokens(self) -> PlanRequest:
        problem = train_tokens_problem(self.model, self.training)
        if problem:
            raise InputError("training.train_tokens", problem)
        return self


class EstimateRequest(PlanRequest):
    parallel: ParallelConfig


__all__ = [
    "PARALLEL_DEFAULTS",
    "SAFE_NAME",
    "SAFE_PATH",
    "CPCommType",
    "ClusterSpec",
    "EstimateRequest",
    "FP8Recipe",
    "Framework",
    "Frozen",
    "GradReduceDtype",
    "MegatronFSDP",
    "MoETokenDispatcher",
    "ModelSpec",
    "Objective",
    "OffloadDevice",
    "OptimizerStates",
    "ParallelConfig",
    "ParallelPins",
    "PartitionMethod",
    "PlanRequest",
    "Precision",
    "Recompute",
    "RecomputeMethod",
    "RecomputeModule",
    "Schedule",
    "TrainingSpec",
    "check_safe_name",
    "check_safe_path",
    "default_ffn_hidden_size",
    "train_tokens_problem",
]
