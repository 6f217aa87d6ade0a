"""The rules Megatron-LM, megatron-core and DeepSpeed enforce, as named predicates, and what each stack can run.

Each rule returns None when satisfied, or a `Violation(code, message)` whose message carries the numbers.
Sources are the checks listed in shared/docs/rules.md (validate_args, ModelParallelConfig/TransformerConfig
`__post_init__`, DeepSpeed's config and pipeline engine); the code names the check it mirrors. What a stack can run
is read from its capabilities (data/stacks.json), never from the framework's name.
"""

from __future__ import annotations

from app.planner.rules.base import Ctx, Rule, Violation
from app.planner.rules.shape import (
    batch_divisible,
    context_parallel,
    enough_microbatches,
    expert_parallel,
    heads_divisible_by_tp,
    interleaving_allowed,
    pipeline_layers,
    query_groups_fit_tp,
    sequence_parallel_needs_tp,
    tp_within_nvlink_domain,
    world_fits_cluster,
)
from app.planner.rules.stack import (
    activation_offload_supported,
    fp8_supported,
    model_fits_framework,
    offload_rules,
    overlap_supported,
    parallelism_supported,
    precision_supported,
    recompute_supported,
    sharding_supported,
    zero_with_pipeline,
)
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec

__all__ = [
    "CANDIDATE_RULES",
    "PLACEMENT_RULES",
    "RULES",
    "Ctx",
    "Rule",
    "Violation",
    "activation_offload_supported",
    "batch_divisible",
    "check",
    "context_parallel",
    "enough_microbatches",
    "expert_parallel",
    "fp8_supported",
    "heads_divisible_by_tp",
    "interleaving_allowed",
    "model_fits_framework",
    "offload_rules",
    "overlap_supported",
    "parallelism_supported",
    "pipeline_layers",
    "precision_supported",
    "query_groups_fit_tp",
    "recompute_supported",
    "sequence_parallel_needs_tp",
    "sharding_supported",
    "tp_within_nvlink_domain",
    "world_fits_cluster",
    "zero_with_pipeline",
]

# Rules that read only the placement (TP, CP, PP and its layer split, DP, EP, VPP) and the specs ...
PLACEMENT_RULES: tuple[Rule, ...] = (
    world_fits_cluster,
    heads_divisible_by_tp,
    query_groups_fit_tp,
    tp_within_nvlink_domain,
    pipeline_layers,
    context_parallel,
    expert_parallel,
    fp8_supported,
    model_fits_framework,
    parallelism_supported,
)
# ... and those that also read the micro-batch size, sharding, offload, recomputation or precision options.
CANDIDATE_RULES: tuple[Rule, ...] = (
    enough_microbatches,
    batch_divisible,
    interleaving_allowed,
    sequence_parallel_needs_tp,
    sharding_supported,
    zero_with_pipeline,
    offload_rules,
    precision_supported,
    recompute_supported,
    activation_offload_supported,
    overlap_supported,
)
RULES = PLACEMENT_RULES + CANDIDATE_RULES


def check(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    world_size: int | None = None,
    only: tuple[Rule, ...] = RULES,
) -> list[Violation]:
    """Every rule (of `only`) the configuration breaks (empty: valid)."""
    ctx = Ctx(model, cluster, training, par, world_size if world_size is not None else cluster.world_size)
    return [v for rule in only if (v := rule(ctx)) is not None]
