"""The rules Megatron-LM, megatron-core and DeepSpeed enforce, as named predicates.

Each rule returns None when satisfied, or a `Violation(code, message)` whose message carries the numbers.
Sources are the checks listed in shared/docs/rules.md (validate_args, ModelParallelConfig/TransformerConfig
`__post_init__`, DeepSpeed's config and pipeline engine); the code names the check it mirrors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.planner.layout import num_microbatches, stage_layers
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


@dataclass(frozen=True, slots=True)
class Violation:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Ctx:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    par: ParallelConfig
    world_size: int


Rule = Callable[[Ctx], Violation | None]


def world_fits_cluster(c: Ctx) -> Violation | None:
    """The job uses at most the GPUs available, in whole nodes (or part of a single node)."""
    p, g = c.par, c.cluster.gpus_per_node
    w = p.world_size
    if w > c.world_size:
        return Violation(
            "world_size", f"tp({p.tp}) * pp({p.pp}) * cp({p.cp}) * dp({p.dp}) = {w} > GPUs available({c.world_size})"
        )
    if w > g and w % g:
        return Violation("whole_nodes", f"world size {w} is not a whole number of nodes of {g} GPUs")
    return None


def heads_divisible_by_tp(c: Ctx) -> Violation | None:
    heads = c.model.num_attention_heads
    if heads % c.par.tp:
        return Violation("heads_divisible_by_tp", f"num_attention_heads({heads}) % tp({c.par.tp}) != 0")
    return None


def query_groups_fit_tp(c: Ctx) -> Violation | None:
    """TransformerConfig: num_query_groups must be a multiple or a divisor of TP."""
    g, t = c.model.num_query_groups or c.model.num_attention_heads, c.par.tp
    if g % t and t % g:
        return Violation("query_groups_fit_tp", f"num_query_groups({g}) is neither a multiple nor a divisor of tp({t})")
    return None


def tp_within_nvlink_domain(c: Ctx) -> Violation | None:
    domain = min(c.cluster.gpus_per_node, c.cluster.nvlink_domain)
    if c.par.tp > domain and not c.training.allow_tp_across_nodes:
        return Violation(
            "tp_within_nvlink_domain",
            f"tp({c.par.tp}) > GPUs sharing NVLink({domain}); set training.allow_tp_across_nodes to force it",
        )
    return None


def pipeline_layers(c: Ctx) -> Violation | None:
    """validate_args / TransformerConfig: layers split evenly over PP (and VPP), or uneven first/last stages
    with the rest even over the middle stages, each divisible by VPP."""
    p, L = c.par, c.model.num_layers
    if p.pp > L:
        return Violation("layers_divisible_by_pp", f"pp({p.pp}) > num_layers({L})")
    if p.first_stage_layers is None and p.last_stage_layers is None:
        if L % p.pp and c.training.framework != "megatron":
            return None  # DeepSpeed's PipelineModule balances layers over stages (partition_method)
        if L % p.pp:
            return Violation("layers_divisible_by_pp", f"num_layers({L}) % pp({p.pp}) != 0")
        if (L // p.pp) % p.vpp:
            return Violation("layers_divisible_by_vpp", f"layers per stage({L // p.pp}) % vpp({p.vpp}) != 0")
        return None
    if p.pp == 1:
        return Violation("uneven_stages_need_pp", "first/last stage layers are set but pp is 1")
    fixed = [x for x in (p.first_stage_layers, p.last_stage_layers) if x is not None]
    middle_stages, rest = p.pp - len(fixed), L - sum(fixed)
    if rest < 0 or (middle_stages == 0 and rest != 0) or (middle_stages and (rest % middle_stages or rest == 0)):
        return Violation(
            "uneven_stages",
            f"num_layers({L}) - first/last({sum(fixed)}) = {rest} does not split "
            f"evenly over the {middle_stages} middle stages",
        )
    if any(n % p.vpp for n in stage_layers(L, p)):
        return Violation("layers_divisible_by_vpp", f"stage layers {stage_layers(L, p)} not divisible by vpp({p.vpp})")
    return None


def batch_divisible(c: Ctx) -> Violation | None:
    """num_microbatches_calculator: global_batch_size % (micro_batch_size * dp) == 0."""
    gbs, mbs, dp = c.training.global_batch_size, c.par.micro_batch_size, c.par.dp
    if gbs % (mbs * dp):
        return Violation(
            "global_batch_divisible", f"global_batch_size({gbs}) % (micro_batch_size({mbs}) * dp({dp})) != 0"
        )
    return None


def interleaving_allowed(c: Ctx) -> Violation | None:
    """Interleaved 1F1B needs PP > 1 and (with the default group size PP) micro-batches a multiple of PP."""
    p = c.par
    if p.vpp == 1:
        return None
    if p.pp == 1:
        return Violation("vpp_needs_pp", f"vpp({p.vpp}) needs pp > 1")
    m = num_microbatches(c.training, p)
    if m % p.pp:
        return Violation("interleaving_microbatches", f"num_microbatches({m}) % pp({p.pp}) != 0 (interleaved schedule)")
    if c.training.framework != "megatron":
        return Violation("framework_support", f"vpp({p.vpp}): DeepSpeed's pipeline engine has no interleaving")
    return None


def sequence_parallel_needs_tp(c: Ctx) -> Violation | None:
    if c.par.sequence_parallel and c.par.tp == 1:
        return Violation("sequence_parallel_needs_tp", "sequence_parallel needs tp > 1 (ModelParallelConfig)")
    return None


def context_parallel(c: Ctx) -> Violation | None:
    cp, s = c.par.cp, c.model.seq_length
    if cp == 1:
        return None
    if s % (2 * cp):
        return Violation("seq_divisible_by_2cp", f"seq_length({s}) % (2 * cp({cp})) != 0")
    if not c.training.flash_attention:
        return Violation("cp_needs_flash_attention", "context parallelism runs on fused (flash) attention only")
    return None


def expert_parallel(c: Ctx) -> Violation | None:
    """validate_args: num_experts % EP == 0; parallel_state: TP*CP*DP must factor as ETP*EP*EDP."""
    p, m = c.par, c.model
    if p.ep == 1 and (p.etp is None or p.etp == p.tp):
        return None
    if not m.is_moe:
        return Violation("ep_needs_moe", f"ep({p.ep}) > 1 but the model has no experts")
    if (m.num_experts or 0) % p.ep:
        return Violation("experts_divisible_by_ep", f"num_experts({m.num_experts}) % ep({p.ep}) != 0")
    plane = p.tp * p.cp * p.dp
    if plane % (p.expert_tp * p.ep):
        return Violation("expert_grid", f"tp*cp*dp({plane}) % (etp({p.expert_tp}) * ep({p.ep})) != 0")
    return None


def framework_support(c: Ctx) -> Violation | None:
    p, fw = c.par, c.training.framework
    if fw == "megatron":
        if p.zero_stage or p.offload_optimizer != "none" or p.offload_param != "none":
            return Violation(
                "framework_support",
                "Megatron-LM shards with the distributed optimizer, "
                "not ZeRO stages or ZeRO offload (choose framework deepspeed or megatron-deepspeed)",
            )
        return None
    if p.distributed_optimizer:
        return Violation("framework_support", f"{fw} shards with ZeRO, not Megatron's distributed optimizer")
    if p.cp > 1 or p.ep > 1:
        return Violation("framework_support", f"{fw}: context/expert parallelism are planned for Megatron-LM only")
    if fw == "deepspeed" and (p.tp > 1 or p.sequence_parallel):
        return Violation("framework_support", "deepspeed (without Megatron) has no tensor parallelism here")
    if p.zero_stage == 0 and c.training.precision == "bf16":
        return Violation(
            "framework_support",
            "DeepSpeed bf16 without ZeRO keeps bf16 optimizer states (DDP_BFLOAT16); use zero_stage >= 1",
        )
    if c.training.precision == "fp8":
        return Violation("fp8_framework", "FP8 (Transformer Engine) is planned for Megatron-LM only")
    return None


def model_fits_framework(c: Ctx) -> Violation | None:
    """What each framework path can run (and the renderer writes): MoE and MLA with Megatron-LM only; no ALiBi
    (no flag in Megatron-LM or deepspeedai/Megatron-DeepSpeed); no pipeline in the plain DeepSpeed engine."""
    m, fw = c.model, c.training.framework
    if (m.is_moe or m.multi_latent_attention) and fw != "megatron":
        what = "experts" if m.is_moe else "multi-latent attention"
        return Violation(
            "framework_support", f"{m.name} has {what}: planned and rendered for Megatron-LM only, not {fw}"
        )
    if m.position_embedding_type == "alibi":
        return Violation(
            "framework_support",
            f"{m.name} uses ALiBi, which neither Megatron-LM nor upstream Megatron-DeepSpeed implements (only "
            f"BigScience's fork); for a same-size plan set position_embedding_type to rope",
        )
    if fw == "deepspeed" and c.par.pp > 1:
        return Violation(
            "framework_support",
            f"pp({c.par.pp}): the plain DeepSpeed engine runs no pipeline here (use megatron-deepspeed for "
            f"pipeline parallelism)",
        )
    return None


def zero_with_pipeline(c: Ctx) -> Violation | None:
    """deepspeed/runtime/pipe/engine.py: ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism."""
    if c.training.framework != "megatron" and c.par.pp > 1 and c.par.zero_stage >= 2:
        return Violation(
            "zero_with_pipeline",
            f"zero_stage({c.par.zero_stage}) with pp({c.par.pp}) > 1: DeepSpeed's pipeline engine allows ZeRO 0-1 only",
        )
    return None


def offload_rules(c: Ctx) -> Violation | None:
    p = c.par
    if p.offload_param != "none" and p.zero_stage != 3:
        return Violation("offload_needs_zero", f"offload_param needs zero_stage 3, not {p.zero_stage}")
    if p.offload_optimizer != "none" and p.zero_stage == 0:
        return Violation("offload_needs_zero", "offload_optimizer needs zero_stage >= 1")
    if p.offload_optimizer == "nvme" and p.zero_stage != 3:
        return Violation("offload_needs_zero", "NVMe optimizer offload needs zero_stage 3 (ZeRO-Infinity)")
    if "nvme" in (p.offload_optimizer, p.offload_param) and not c.cluster.nvme_path:
        return Violation("nvme_needs_path", "NVMe offload needs cluster.nvme_path")
    return None


def fp8_supported(c: Ctx) -> Violation | None:
    if c.training.precision == "fp8" and c.cluster.gpu.fp8_TFLOPs is None:
        return Violation("fp8_unsupported", f"{c.cluster.gpu.name} has no FP8 tensor cores")
    return None


def enough_microbatches(c: Ctx) -> Violation | None:
    m = c.training.global_batch_size // (c.par.micro_batch_size * c.par.dp)
    if m < 1:
        return Violation(
            "global_batch_divisible",
            f"global_batch_size({c.training.global_batch_size}) < "
            f"micro_batch_size({c.par.micro_batch_size}) * dp({c.par.dp})",
        )
    return None


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
)
# ... and those that also read the micro-batch size, sharding, offload or sequence parallelism.
CANDIDATE_RULES: tuple[Rule, ...] = (
    enough_microbatches,
    batch_divisible,
    interleaving_allowed,
    sequence_parallel_needs_tp,
    framework_support,
    zero_with_pipeline,
    offload_rules,
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
