"""The specs' shared pieces: the literal types, the frozen base model and the checks for names that reach scripts."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from app.planner import strict
from app.planner.errors import InputError

Precision = Literal["bf16", "fp16", "fp8"]
Framework = Literal["megatron", "deepspeed", "megatron-deepspeed", "pytorch-fsdp", "jax"]
Objective = Literal["throughput", "min_gpus", "headroom"]
# The headroom objective ranks by peak memory the plans whose step is within this share of the fastest plan's: over
# every feasible plan it put 2x (8B) to 6.5x (70B on 64 H100) slower ones first (QA, 2026-12-07).
HEADROOM_WITHIN = 0.10
Recompute = Literal["none", "selective", "full"]
RecomputeMethod = Literal["uniform", "block"]
# megatron-core TransformerConfig.recompute_modules (transformer_config.py): what selective recompute re-runs.
RecomputeModule = Literal["core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts"]
OffloadDevice = Literal["none", "cpu", "nvme"]
Schedule = Literal["1f1b", "interleaved"]
CPCommType = Literal["p2p", "all_gather", "a2a", "a2a+p2p"]
MoETokenDispatcher = Literal["alltoall", "flex"]
GradReduceDtype = Literal["fp32", "bf16"]
OptimizerStates = Literal["fp32", "bf16"]
FP8Recipe = Literal["delayed", "tensorwise", "blockwise", "mxfp8"]
PartitionMethod = Literal["parameters", "uniform", "type:transformer", "type:transformer|embedding"]
MegatronFSDP = Literal["optim", "optim_grads", "optim_grads_params"]

# Names that end up in shell scripts (host names, NIC names, paths) must be plain: no quotes, no `;`,
# no `$`, no backticks, no whitespace or newlines. Everything allowed is still quoted in every script.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$")
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/\-]*$")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    _no_bool_confusion = field_validator("*", mode="before")(strict.check)


def check_safe_name(field: str, value: str) -> str:
    if not SAFE_NAME.fullmatch(value) or len(value) > 253:
        raise InputError(
            field,
            f"{value!r} is not a plain name (letters, digits, '.', '_', ':', '-'; "
            f"no spaces, quotes, ';', '$', backticks or newlines)",
        )
    return value


def check_safe_path(field: str, value: str) -> str:
    if not SAFE_PATH.fullmatch(value) or ".." in value.split("/") or len(value) > 1024:
        raise InputError(
            field,
            f"{value!r} is not a plain absolute path (letters, digits, '.', '_', '-', '/'; "
            f"no '..', spaces, quotes, ';', '$', backticks or newlines)",
        )
    return value


def default_ffn_hidden_size(hidden_size: int, swiglu: bool) -> int:
    """Megatron-LM's default: 4h, or int(8h/3/64)*64 with SwiGLU (arguments.py, validate_args)."""
    return int(8 * hidden_size / 3 / 64) * 64 if swiglu else 4 * hidden_size
