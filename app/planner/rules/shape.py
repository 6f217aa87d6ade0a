"""Rules on the shape of a configuration: the world against the cluster, TP against the heads and the NVLink domain,
the pipeline's layer split and layout string, the batch, interleaving, sequence, context and expert parallelism
(Megatron-LM's validate_args, megatron-core's ModelParallelConfig/TransformerConfig `__post_init__`, DeepSpeed's
pipeline engine)."""

from __future__ import annotations

from functools import partial

from app.planner.attention import a2a_splits, heads_per_rank
from app.planner.layout import layout_vpp, num_microbatches, parse_layout, parse_layout_text
from app.planner.rules.base import Ctx, Violation
from app.planner.space import sequence_parallel_fits
from app.planner.specs import ModelSpec, ParallelConfig


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
    domain = c.cluster.job_nvlink_domain(c.par.world_size)  # the job's own NVLink segments (a plan on fewer nodes)
    if c.training.allow_tp_across_nodes:
        return None
    if c.par.tp > domain:
        # without NVLink (L40S, a PCIe H100 beyond its bridged pair) the group may sit inside one node and still
        # leave the fabric: "across nodes" named the wrong thing (practitioner review 2026-12-07)
        where = "over PCIe or the network" if domain < c.cluster.gpus_per_node else "across nodes"
        return Violation(
            "tp_within_nvlink_domain",
            f"tp({c.par.tp}) > GPUs sharing NVLink({domain}): its all-reduces would run {where}; set "
            "training.allow_tp_across_nodes to force it",
        )
    if domain % c.par.tp and c.par.world_size > domain:
        # TP groups are runs of consecutive ranks: with 6 GPUs a node, TP 4 puts ranks 4-7 on two nodes (a pinned
        # TP 4 was planned with TP-overlap across them, QA 2026-12-07)
        return Violation(
            "tp_within_nvlink_domain",
            f"tp({c.par.tp}) does not divide the GPUs sharing NVLink({domain}): some TP groups would span two "
            "domains; set training.allow_tp_across_nodes to force it",
        )
    return None


def pipeline_layers(c: Ctx) -> Violation | None:
    """validate_args / TransformerConfig pipeline checks: even split, uneven first/last stages (each and every
    middle stage divisible by VPP), account-for-embedding/loss (`(L + accounted) % (PP x VPP) == 0`), or a layout
    string (stages a multiple of PP, VPP = stages / PP, E first and L last, `t` count = num_layers). DeepSpeed's
    PipelineModule balances any layer count itself. Once per split and stack: the search asks it of every
    placement, and placements share their splits."""
    p = c.par
    key = (
        "rule.pipeline_layers",
        p.pp,
        p.vpp,
        p.pipeline_layout,
        p.first_stage_layers,
        p.last_stage_layers,
        p.account_for_embedding_in_pipeline_split,
        p.account_for_loss_in_pipeline_split,
    )
    return c.model.memo(key, partial(_pipeline_layers, c), c.training)


def _pipeline_layers(c: Ctx) -> Violation | None:
    """`pipeline_layers`, worked out: it reads the split's fields in its key, the model's layers (and MTP layers)
    and the stack's pipeline capabilities."""
    p, L = c.par, c.model.num_layers
    if p.pp > L:
        return Violation("layers_divisible_by_pp", f"pp({p.pp}) > num_layers({L})")
    if p.pipeline_layout is not None:
        others = [
            name
            for name, value in (
                ("first_stage_layers", p.first_stage_layers),
                ("last_stage_layers", p.last_stage_layers),
                ("account_for_embedding_in_pipeline_split", p.account_for_embedding_in_pipeline_split or None),
                ("account_for_loss_in_pipeline_split", p.account_for_loss_in_pipeline_split or None),
            )
            if value is not None
        ]
        if others:  # TransformerConfig.__post_init__ (transformer_config.py L1306-1318 at core_v0.16.1)
            return Violation(
                "pipeline_layout", f"pipeline_layout cannot be set with other pipeline layout arguments: {others}"
            )
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
    p = c.par
    if p.pp == 1:
        return Violation("uneven_stages_need_pp", "first/last stage layers are set but pp is 1")
    bad = uneven_split_violation(c.model, p)
    if bad is not None:
        return bad
    fixed = [x for x in (p.first_stage_layers, p.last_stage_layers) if x is not None]
    middle_stages, rest = p.pp - len(fixed), c.model.num_layers - sum(fixed)
    # in stage order and named ("stage layers [18, 14, 48]" read as three stages of 80 layers in that order, QA)
    stages = [(f"first stage {p.first_stage_layers}", p.first_stage_layers)] if p.first_stage_layers is not None else []
    if middle_stages:
        share = rest // middle_stages
        kind = "middle" if len(fixed) == 2 else "other"
        many = f"{middle_stages} {kind} stages {share} each" if middle_stages > 1 else f"1 {kind} stage {share}"
        stages.append((many, share))
    if p.last_stage_layers is not None:
        stages.append((f"last stage {p.last_stage_layers}", p.last_stage_layers))
    if any(n % p.vpp for _said, n in stages):
        listed = ", ".join(said for said, _n in stages)
        return Violation("layers_divisible_by_vpp", f"layers per stage ({listed}) not divisible by vpp({p.vpp})")
    return None


def uneven_split_violation(model: ModelSpec, p: ParallelConfig) -> Violation | None:
    """First/last stage layers that, with the middle stages' even share, do not place the model's `num_layers`
    (Megatron's validate_args): without them, no stage has a shape to size or time."""
    fixed = [x for x in (p.first_stage_layers, p.last_stage_layers) if x is not None]
    L = model.num_layers
    middle_stages, rest = p.pp - len(fixed), L - sum(fixed)
    if middle_stages == 0 and rest != 0:
        named = " + ".join(f"{n}({x})" for n, x in zip(("first", "last"), fixed, strict=True))
        return Violation("uneven_stages", f"{named} = {sum(fixed)} layers on pp({p.pp}), num_layers is {L}")
    if rest < 0 or (middle_stages and (rest % middle_stages or rest == 0)):
        return Violation(
            "uneven_stages",
            f"num_layers({L}) - first/last({sum(fixed)}) = {rest} does not split "
            f"evenly over the {middle_stages} middle stages",
        )
    return None


def layout_violation(model: ModelSpec, p: ParallelConfig) -> Violation | None:
    """The layout string itself: it parses for `p.pp` (stages a multiple of PP, E first and L last) and places the
    model's `num_layers` decoder layers. Without both, no stage has a shape to size or time."""
    assert p.pipeline_layout is not None
    try:
        shapes = parse_layout(p.pipeline_layout, p.pp)
    except ValueError as exc:
        return Violation("pipeline_layout", str(exc))
    layers = sum(s.layers for s in shapes)
    if layers != model.num_layers:
        return Violation("pipeline_layout", f"pipeline_layout places {layers} layers, num_layers is {model.num_layers}")
    return None


def _layout_rule(c: Ctx) -> Violation | None:
    p = c.par
    assert p.pipeline_layout is not None
    if not c.training.software.can.uneven_stages:
        return Violation("framework_support", f"{c.training.software.label} takes no pipeline layout string")
    bad = layout_violation(c.model, p)
    if bad is not None:
        return bad
    v = layout_vpp(p.pipeline_layout, p.pp)
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
    """Sequence parallelism splits each CP rank's sequence over the TP ranks: it needs TP, and that sequence a
    multiple of it (space.sequence_parallel_fits, which the search's placements also read)."""
    p = c.par
    if p.sequence_parallel and not c.training.software.can.sequence_parallel:
        return Violation(
            "framework_support",
            f"{c.training.software.label} has no Megatron sequence parallelism (its stack's source)",
        )
    if p.sequence_parallel and p.tp == 1:
        return Violation("sequence_parallel_needs_tp", "sequence_parallel needs tp > 1 (ModelParallelConfig)")
    can = c.training.software.can
    if c.model.is_moe and p.tp > 1 and not p.sequence_parallel and can.moe and can.sequence_parallel:
        # megatron-core's MoELayer raises in the first training forward, past every config check (moe_layer.py
        # L379 at core_v0.16.1: "During training, performance may degrade if MoE and tensor parallelism are
        # enabled without also enabling sequence parallelism"; QA 2026-12-07: rendered, and it crashed there)
        return Violation("sequence_parallel_needs_tp", f"an MoE model at tp({p.tp}) needs sequence_parallel")
    if p.sequence_parallel and not sequence_parallel_fits(c.model, p.tp, p.cp):
        return Violation(
            "sequence_parallel_needs_tp",
            f"sequence_parallel splits the sequence over TP: seq_length({c.model.seq_length}) / cp({p.cp}) = "
            f"{c.model.seq_length // p.cp} is not a multiple of tp({p.tp})",
        )
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
    if c.model.sliding_window is not None and p.cp_comm_type in ("p2p", "a2a+p2p"):
        # TransformerEngine dot_product_attention/utils.py get_attention_backend: FusedAttention is disabled for
        # context parallelism with a sliding window unless cp_comm_type is all_gather or a2a
        return Violation(
            "cp_sliding_window",
            f"sliding_window({c.model.sliding_window}) with cp({p.cp}): Transformer Engine runs windowed attention "
            f"under context parallelism with cp_comm_type all_gather or a2a, not {p.cp_comm_type}",
        )
    if p.cp_comm_type in ("a2a", "a2a+p2p"):
        inner = p.hierarchical_cp_sizes[0] if p.hierarchical_cp_sizes else p.cp
        if not a2a_splits(c.model, p.tp, inner):
            q, kv = heads_per_rank(c.model, p.tp)
            return Violation(
                "cp_heads",
                f"a2a context parallelism splits the heads of Q, K and V: query heads per TP rank({q}) and key/value "
                f"heads per TP rank({kv}) must both be divisible by the a2a size({inner}) (Transformer Engine)",
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


def enough_microbatches(c: Ctx) -> Violation | None:
    m = c.training.global_batch_size // (c.par.micro_batch_size * c.par.dp)
    if m < 1:
        return Violation(
            "global_batch_divisible",
            f"global_batch_size({c.training.global_batch_size}) < "
            f"micro_batch_size({c.par.micro_batch_size}) * dp({c.par.dp})",
        )
    return None
