"""The rules Megatron-LM, megatron-core and DeepSpeed enforce, as named predicates, and what each stack can run.

Each rule returns None when satisfied, or a `Violation(code, message)` whose message carries the numbers.
Sources are the checks listed in shared/docs/rules.md (validate_args, ModelParallelConfig/TransformerConfig
`__post_init__`, DeepSpeed's config and pipeline engine); the code names the check it mirrors. What a stack can run
is read from its capabilities (data/stacks.json), never from the framework's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.planner.layout import layout_vpp, num_microbatches, parse_layout, parse_layout_text
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
    domain = c.cluster.nvlink_domain
    if c.par.tp > domain and not c.training.allow_tp_across_nodes:
        return Violation(
            "tp_within_nvlink_domain",
            f"tp({c.par.tp}) > GPUs sharing NVLink({domain}); set training.allow_tp_across_nodes to force it",
        )
    return None


def pipeline_layers(c: Ctx) -> Violation | None:
    """validate_args / TransformerConfig pipeline checks: even split, uneven first/last stages (each and every
    middle stage divisible by VPP), account-for-embedding/loss (`(L + accounted) % (PP x VPP) == 0`), or a layout
    string (stages a multiple of PP, VPP = stages / PP, E first and L last, `t` count = num_layers). DeepSpeed's
    PipelineModule balances any layer count itself."""
    p, L = c.par, c.model.num_layers
    if p.pp > L:
        return Violation("layers_divisible_by_pp", f"pp({p.pp}) > num_layers({L})")
    if p.pipeline_layout is not None:
        return _layout_rule(c)
    if c.training.software.can.pipeline == "deepspeed":
        return None if p.vpp == 1 else Violation("framework_support", "DeepSpeed's PipelineEngine has no interleaving")
    uneven = p.first_stage_layers is not None or p.last_stage_layers is not None
    accounted = int(p.account_for_embedding_in_pipeline_split) + int(p.account_for_loss_in_pipeline_split)
    if uneven and accounted:
        return Violation(
            "uneven_stages", "first/last stage layers cannot be combined with account_for_embedding/loss (Megatron)"
        )
    if uneven:
        return _uneven_rule(c)
    n = L + accounted
    if n % p.pp:
        what = f"num_layers({L})" + (f" + accounted({accounted})" if accounted else "")
        return Violation("layers_divisible_by_pp", f"{what} % pp({p.pp}) != 0")
    if (n // p.pp) % p.vpp:
        return Violation("layers_divisible_by_vpp", f"layers per stage({n // p.pp}) % vpp({p.vpp}) != 0")
    return None


def _uneven_rule(c: Ctx) -> Violation | None:
    p, L = c.par, c.model.num_layers
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
    counts = [*fixed, *([rest // middle_stages] if middle_stages else [])]
    if any(n % p.vpp for n in counts):
        return Violation("layers_divisible_by_vpp", f"stage layers {counts} not divisible by vpp({p.vpp})")
    return None


def _layout_rule(c: Ctx) -> Violation | None:
    p, L = c.par, c.model.num_layers
    assert p.pipeline_layout is not None
    if not c.training.software.can.uneven_stages:
        return Violation("framework_support", f"{c.training.software.label} takes no pipeline layout string")
    try:
        shapes = parse_layout(p.pipeline_layout, p.pp)
        v = layout_vpp(p.pipeline_layout, p.pp)
    except ValueError as exc:
        return Violation("pipeline_layout", str(exc))
    layers = sum(s.layers for s in shapes)
    if layers != L:
        return Violation("pipeline_layout", f"pipeline_layout places {layers} layers, num_layers is {L}")
    if v != p.vpp:
        return Violation("pipeline_layout", f"pipeline_layout has {v} virtual stages per rank, vpp is {p.vpp}")
    return _layout_mtp_rule(c, p.pipeline_layout)


def _layout_mtp_rule(c: Ctx, layout: str) -> Violation | None:
    """PipelineParallelLayerLayout.validate_layer_layout: as many `m` as mtp_num_layers, after every decoder layer,
    all in one virtual stage, which is its rank's last."""
    want = c.model.mtp_num_layers
    text = parse_layout_text(layout)
    stages = text.split("|")
    have = text.count("m")
    if have != want:
        return Violation("pipeline_layout", f"pipeline_layout has {have} MTP layers ('m'), mtp_num_layers is {want}")
    if not want:
        return None
    if "t" in text[text.index("m") :]:
        return Violation("pipeline_layout", "pipeline_layout: every decoder layer ('t') must come before the MTP ('m')")
    holding = [i for i, s in enumerate(stages) if "m" in s]  # virtual stage i: rank i % pp, chunk i // pp
    pp = c.par.pp
    if len(holding) != 1 or holding[0] // pp != len(stages) // pp - 1:
        return Violation(
            "pipeline_layout",
            "pipeline_layout: the MTP layers must all be in one virtual stage, the last one of its pipeline rank "
            "(megatron-core pipeline_parallel_layer_layout.py)",
        )
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
    if not c.training.software.can.interleaving:
        return Violation("framework_support", f"vpp({p.vpp}): {c.training.software.label} has no interleaving")
    m = num_microbatches(c.training, p)
    if m % p.pp:
        return Violation("interleaving_microbatches", f"num_microbatches({m}) % pp({p.pp}) != 0 (interleaved schedule)")
    return None


def sequence_parallel_needs_tp(c: Ctx) -> Violation | None:
    if c.par.sequence_parallel and c.par.tp == 1:
        return Violation("sequence_parallel_needs_tp", "sequence_parallel needs tp > 1 (ModelParallelConfig)")
    return None


def context_parallel(c: Ctx) -> Violation | None:
    p, s = c.par, c.model.seq_length
    if p.cp == 1:
        return None
    can = c.training.software.can.context_parallel
    if p.cp_comm_type not in can:
        what = f"cp_comm_type {p.cp_comm_type}" if can else "context parallelism"
        return Violation("framework_support", f"cp({p.cp}): {c.training.software.label} has no {what}")
    if s % (2 * p.cp):
        return Violation("seq_divisible_by_2cp", f"seq_length({s}) % (2 * cp({p.cp})) != 0")
    if not c.training.flash_attention:
        return Violation("cp_needs_flash_attention", "context parallelism runs on fused (flash) attention only")
    if p.cp_comm_type in ("a2a", "a2a+p2p"):
        heads = c.model.num_attention_heads // p.tp
        inner = p.hierarchical_cp_sizes[0] if p.hierarchical_cp_sizes else p.cp
        if heads % inner:
            return Violation(
                "cp_heads", f"a2a context parallelism: heads per TP rank({heads}) % a2a size({inner}) != 0"
            )
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


def sharding_supported(c: Ctx) -> Violation | None:
    """The stack shards as it can: Megatron's distributed optimizer (not ZeRO stages or ZeRO offload), DeepSpeed's
    ZeRO stages (not the distributed optimizer), FSDP's full shard."""
    p, s = c.par, c.training.software
    can = s.can
    if (p.zero_stage or p.offload_optimizer != "none" or p.offload_param != "none") and "zero" not in can.sharding:
        return Violation(
            "framework_support",
            f"{s.label} shards with {', '.join(can.sharding)}, not ZeRO stages or ZeRO offload "
            f"(choose framework deepspeed or megatron-deepspeed)",
        )
    if "zero" in can.sharding and p.zero_stage not in can.zero_stages:
        if p.zero_stage == 0 and c.training.precision == "bf16":
            return Violation(
                "framework_support",
                "DeepSpeed bf16 without ZeRO keeps bf16 optimizer states (DDP_BFLOAT16); use zero_stage >= 1",
            )
        return Violation("framework_support", f"zero_stage({p.zero_stage}): {s.label} runs {list(can.zero_stages)}")
    if "zero" in can.sharding and p.zero_stage == 0 and c.training.precision == "bf16":
        return Violation(
            "framework_support",
            "DeepSpeed bf16 without ZeRO keeps bf16 optimizer states (DDP_BFLOAT16); use zero_stage >= 1",
        )
    if p.distributed_optimizer and "distributed_optimizer" not in can.sharding:
        return Violation("framework_support", f"{s.label} shards with ZeRO/FSDP, not Megatron's distributed optimizer")
    if p.megatron_fsdp is not None:
        return _megatron_fsdp_rule(c)
    if p.offload_optimizer != "none" and not can.offload:
        return Violation("framework_support", f"{s.label}: no optimizer offload")
    return None


def _megatron_fsdp_rule(c: Ctx) -> Violation | None:
    """Megatron-FSDP (Megatron-LM docs/discussions/megatron-fsdp-user-guide: --use-megatron-fsdp needs
    --use-distributed-optimizer, --ckpt-format fsdp_dtensor and CUDA_DEVICE_MAX_CONNECTIONS unset, which the renderer
    writes; validate_args asserts the last two). Sharding the compute weights (optim_grads_params) gathers every
    FSDP unit again for each micro-batch of each pipeline stage: planned with PP 1 only, as NVIDIA's FSDP recipes
    run."""
    p, s = c.par, c.training.software
    if "megatron_fsdp" not in s.can.sharding:
        return Violation("framework_support", f"{s.label} has no Megatron-FSDP")
    if not p.distributed_optimizer:
        return Violation("megatron_fsdp", "megatron_fsdp needs distributed_optimizer (--use-distributed-optimizer)")
    if p.dp * p.cp == 1:
        return Violation("megatron_fsdp", "megatron_fsdp over one data-parallel rank shards nothing")
    if p.megatron_fsdp == "optim_grads_params" and p.pp > 1:
        return Violation("megatron_fsdp", f"megatron_fsdp optim_grads_params with pp({p.pp}) > 1 is not planned")
    if c.training.precision == "fp16":
        return Violation("megatron_fsdp", "Megatron-FSDP is planned for bf16/fp8 training, not fp16")
    return None


def parallelism_supported(c: Ctx) -> Violation | None:
    p, s = c.par, c.training.software
    if (p.tp > 1 or p.sequence_parallel) and not s.can.tensor_parallel:
        return Violation("framework_support", f"{s.label} has no tensor parallelism here")
    if p.ep > 1 and not s.can.expert_parallel:
        return Violation("framework_support", f"{s.label}: expert parallelism is planned for Megatron-LM only")
    if p.pp > 1 and s.can.pipeline is None:
        return Violation(
            "framework_support",
            f"pp({p.pp}): {s.label} runs no pipeline here (use megatron-deepspeed for pipeline parallelism)",
        )
    return None


def overlap_supported(c: Ctx) -> Violation | None:
    p, s = c.par, c.training.software
    if p.tp_comm_overlap and not (s.can.tp_comm_overlap and p.sequence_parallel and p.tp > 1):
        return Violation("tp_comm_overlap", "tp_comm_overlap needs sequence parallelism, TP > 1 and Megatron-core")
    if p.moe_ep_overlap and not (s.can.ep_overlap and p.ep > 1 and p.recompute != "full"):
        return Violation("moe_ep_overlap", "EP overlap needs EP > 1, Megatron-core and no full recompute")
    if p.moe_ep_overlap and p.pp > 1 and p.vpp == 1:
        return Violation("moe_ep_overlap", "EP overlap with pipeline parallelism needs interleaving (vpp > 1)")
    if p.moe_token_dispatcher == "flex" and not (s.can.flex_dispatcher and p.ep > 1):
        return Violation(
            "moe_token_dispatcher",
            f"the flex dispatcher (DeepEP/HybridEP) needs expert parallelism (ep {p.ep}) and megatron-core "
            f"(MoEFlexTokenDispatcher; {s.label} has no such dispatcher)",
        )
    mtp = c.model.mtp_num_layers
    if p.moe_ep_overlap and mtp and (mtp > 1 or p.pp == 1):  # TransformerConfig.__post_init__
        return Violation(
            "moe_ep_overlap",
            f"EP overlap with multi-token prediction needs mtp_num_layers 1 (not {mtp}) and pp > 1 (pp {p.pp})",
        )
    return None


def precision_supported(c: Ctx) -> Violation | None:
    p, s, t = c.par, c.training.software, c.training
    if t.precision == "fp8" and not s.can.fp8:
        return Violation("fp8_framework", "FP8 (Transformer Engine) is planned for Megatron-LM only")
    if p.fp8_param_gather and not (t.precision == "fp8" and s.can.fp8_param_gather and p.distributed_optimizer):
        return Violation("fp8_param_gather", "fp8_param_gather needs FP8 training and the distributed optimizer")
    if t.optimizer_states == "bf16" and not p.distributed_optimizer:
        # OptimizerConfig.__post_init__: '--use-precision-aware-optimizer only supported with distributed optimizer'
        return Violation("optimizer_states", "bf16 optimizer states need the distributed optimizer")
    if p.fp8_recipe == "mxfp8" and c.cluster.gpu.generation != "blackwell":
        return Violation("fp8_recipe", f"fp8_recipe mxfp8 needs Blackwell, not {c.cluster.gpu.name}")
    return None


def recompute_supported(c: Ctx) -> Violation | None:
    """TransformerConfig: full recompute takes a method and a layer count (1..layers per stage); selective takes
    modules and no layer count; moe/moe_act/shared_experts need an MoE model, mla_up_proj MLA."""
    p, s, m = c.par, c.training.software, c.model
    if p.recompute == "selective":
        if p.recompute_num_layers is not None or p.recompute_method is not None:
            return Violation("recompute", "selective recompute takes no recompute_method/num_layers")
        unknown = [x for x in (p.recompute_modules or ()) if x not in s.can.recompute_modules]
        if unknown:
            return Violation("recompute", f"{s.label} cannot recompute modules {unknown}")
        for mod in p.recompute_modules or ():
            if mod in ("moe", "moe_act", "shared_experts") and not m.is_moe:
                return Violation("recompute", f"recompute module {mod} needs an MoE model")
            if mod == "mla_up_proj" and not m.multi_latent_attention:
                return Violation("recompute", "recompute module mla_up_proj needs multi-latent attention")
        return None
    if p.recompute_modules:
        return Violation("recompute", "recompute_modules is for selective recompute")
    if p.recompute_num_layers is not None or p.recompute_method is not None:
        if p.recompute != "full" or not s.can.partial_recompute:
            return Violation("recompute", f"recompute_method/num_layers: full recompute with {s.label} only")
        per_stage = m.num_layers // p.pp
        if p.recompute_num_layers is not None and not 1 <= p.recompute_num_layers <= per_stage:
            return Violation(
                "recompute",
                f"recompute_num_layers({p.recompute_num_layers}) must be in 1..layers per stage({per_stage})",
            )
    return None


def activation_offload_supported(c: Ctx) -> Violation | None:
    """TransformerConfig.__post_init__: CPU offloading needs fewer layers than the model has, PP 1 and no
    recomputation (megatron-core transformer_config.py, the cpu_offloading checks)."""
    p, s, m = c.par, c.training.software, c.model
    n = p.cpu_offloading_num_layers
    if not n:
        return None
    if not s.can.activation_offload:
        return Violation("activation_offload", f"activation offload (cpu_offloading_num_layers): not with {s.label}")
    if n >= m.num_layers:
        return Violation("activation_offload", f"cpu_offloading_num_layers({n}) must be < num_layers({m.num_layers})")
    if p.pp > 1:
        return Violation("activation_offload", f"activation offload needs pp 1, not {p.pp} (megatron-core)")
    if p.recompute != "none":
        return Violation("activation_offload", f"activation offload does not run with recompute {p.recompute}")
    return None


def model_fits_framework(c: Ctx) -> Violation | None:
    """What each stack can run (and the renderer writes): MoE and MLA with Megatron-core only; ALiBi only where the
    stack implements it (BigScience's Megatron-DeepSpeed fork, Hugging Face, llm-foundry)."""
    m, s = c.model, c.training.software
    if (m.is_moe and not s.can.moe) or (m.multi_latent_attention and not s.can.mla):
        what = "experts" if m.is_moe else "multi-latent attention"
        return Violation(
            "framework_support", f"{m.name} has {what}: planned and rendered for Megatron-LM only, not {s.label}"
        )
    if m.mtp_num_layers and m.position_embedding_type not in ("rope", "none"):  # arguments.py validate_args
        return Violation(
            "framework_support",
            f"multi-token prediction runs with rope or no position embedding, not {m.position_embedding_type}",
        )
    if m.mtp_num_layers and not s.can.mtp:
        return Violation(
            "framework_support",
            f"{m.name} has {m.mtp_num_layers} multi-token prediction layer(s): megatron-core builds them "
            f"(--mtp-num-layers), {s.label} does not; set mtp_num_layers 0 to plan without them",
        )
    if m.position_embedding_type == "alibi" and not s.can.alibi:
        return Violation(
            "framework_support",
            f"{m.name} uses ALiBi, which {s.label} does not implement (BigScience's Megatron-DeepSpeed fork, Hugging "
            f"Face and llm-foundry do); for a same-size plan set position_embedding_type to rope",
        )
    return None


def zero_with_pipeline(c: Ctx) -> Violation | None:
    """deepspeed/runtime/pipe/engine.py: ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism."""
    if c.training.software.can.pipeline == "deepspeed" and c.par.pp > 1 and c.par.zero_stage >= 2:
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
