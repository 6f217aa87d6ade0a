"""Short reasons for a plan's rank, and a one-line description of a layout."""

from __future__ import annotations

from app.planner.pipeline import alone_passes, pairs_none
from app.planner.results import Estimate
from app.planner.space import ep_overlap_runs
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.specs.common import HEADROOM_WITHIN

GiB = 2**30


def _recompute(par: ParallelConfig) -> str:
    if par.recompute == "selective":
        return f"recompute={'+'.join(par.recompute_modules) if par.recompute_modules else 'selective'}"
    if par.recompute == "full" and par.recompute_method == "block" and par.recompute_num_layers:
        return f"recompute=full({par.recompute_num_layers}/chunk)"
    return f"recompute={par.recompute}"


def describe(par: ParallelConfig) -> str:
    parts = [f"TP{par.tp}", f"PP{par.pp}"]
    if par.vpp > 1:
        parts.append(f"VPP{par.vpp}")
    if par.first_stage_layers is not None or par.last_stage_layers is not None:
        parts.append(f"layers {par.first_stage_layers or '='}/../{par.last_stage_layers or '='}")
    if par.account_for_embedding_in_pipeline_split or par.account_for_loss_in_pipeline_split:
        parts.append("E+L as layers")
    if par.pipeline_layout:
        parts.append(f"layout {par.pipeline_layout}")
    if par.partition_method and par.pp > 1:
        parts.append(f"partition {par.partition_method}")
    parts.append(f"DP{par.dp}")
    if par.cp > 1:
        parts.append(f"CP{par.cp}" + (f"({par.cp_comm_type})" if par.cp_comm_type != "p2p" else ""))
    if par.ep > 1:
        parts.append(f"EP{par.ep}" + (f" ETP{par.etp}" if par.etp is not None and par.etp != par.tp else ""))
    if par.zero_stage:
        parts.append(f"ZeRO-{par.zero_stage}")
    if par.distributed_optimizer:
        parts.append("dist-opt")
    if par.megatron_fsdp:
        parts.append(f"M-FSDP({par.megatron_fsdp})")
    if par.offload_optimizer != "none":
        parts.append(f"opt->{par.offload_optimizer}")
    if par.offload_param != "none":
        parts.append(f"param->{par.offload_param}")
    if par.sequence_parallel:
        parts.append("SP")
    if par.tp_comm_overlap:
        parts.append("TP-overlap")
    if par.moe_ep_overlap:
        parts.append("EP-overlap")
    if par.moe_token_dispatcher == "flex":  # its backend, DeepEP or HybridEP, follows the cluster (megatron_model.py)
        parts.append("flex-dispatch")
    if par.fp8_param_gather:
        parts.append("fp8-params")
    parts.append(f"mbs{par.micro_batch_size}")
    if par.recompute != "none":
        parts.append(_recompute(par))
    if par.cpu_offloading_num_layers:
        parts.append(f"act-offload({par.cpu_offloading_num_layers} layers)")
    return " ".join(parts)


def why(
    par: ParallelConfig,
    est: Estimate,
    best: Estimate | None,
    feasible_count: int,
    available_gpus: int | None = None,
    objective: str = "throughput",
    microbatches: int | None = None,
    pinned_nodes: int | None = None,
    precision: str = "bf16",
) -> list[str]:
    t, mem = est.time, est.memory
    b = t.breakdown
    step = t.step_s
    comm = {k[:-7].upper(): v for k, v in b.items() if k.endswith("_comm_s") and v > 0}
    if par.cp > 1 and "DP" in comm:  # the gradient sync runs over DP x CP ("DP 17.4%" on a DP-1 plan: QA)
        comm["DP x CP"] = comm.pop("DP")
    if "ZERO" in comm:  # the sharded states' gathers and scatters, named as the plan shards them, FSDP's where
        # nothing else does (llm-foundry, torchtitan, MaxText): they read "ZERO", then "dist-opt" (QA 2026-12-07)
        name = (
            "M-FSDP"
            if par.megatron_fsdp
            else f"ZeRO-{par.zero_stage}"
            if par.zero_stage
            else "dist-opt"
            if par.distributed_optimizer
            else "FSDP"
        )
        comm[name] = comm.pop("ZERO")
    exposed = sum(comm.values())
    lines = [_headline(t, best, feasible_count, objective, par.world_size, precision)]
    if t.tokens_per_s_interval is not None:
        iv = t.tokens_per_s_interval
        lines.append(f"80% interval {iv.low:,.0f}-{iv.high:,.0f} tokens/s ({iv.basis})")
    if available_gpus and par.world_size < available_gpus:
        if pinned_nodes:  # the user's node count, not the search's choice (it said "it is faster", QA 2026-12-07)
            because = f"training.pinned.num_nodes is {pinned_nodes}"
        elif objective == "min_gpus":
            # offload is searched only where nothing fits without it: fewer GPUs may fit with it (QA 2026-12-07)
            because = "the objective is the fewest GPUs, and no plan without ZeRO offload fits on fewer"
        else:
            because = "it is faster or factors where the whole cluster does not"
        lines.append(
            f"uses {par.world_size} of the {available_gpus} GPUs ({available_gpus - par.world_size} stay idle): "
            f"{because}"
        )
    if par.pp > 1:
        lines.append(
            f"pipeline bubble {100 * t.bubble_fraction:.1f}% of the step (PP{par.pp}"
            f"{f' x VPP{par.vpp}' if par.vpp > 1 else ''})"
        )
    if exposed > 0:
        detail = ", ".join(f"{k} {100 * v / step:.1f}%" for k, v in sorted(comm.items(), key=lambda kv: -kv[1]))
        lines.append(f"exposed communication {100 * exposed / step:.1f}% ({detail})")
    if par.ep > 1 and microbatches:
        passes = microbatches * par.vpp
        alone = alone_passes(par.pp, par.vpp, 0, microbatches)
        if par.moe_ep_overlap:
            lines.append(
                f"EP all-to-all hidden behind another micro-batch's compute (combined 1F1B) in {passes - alone} of "
                f"the first rank's {passes} forward passes; its {alone} warm-up forwards and as many cool-down "
                f"backwards run alone and expose it"
            )
        elif pairs_none(par.pp, par.vpp, microbatches) and ep_overlap_runs(par.ep, par.recompute, par.pp, par.vpp):
            lines.append(
                f"EP all-to-all not overlapped: with {microbatches} micro-batches combined 1F1B would pair none of "
                f"the first rank's {passes} forward passes (its warm-up holds them all), so it would only hold one "
                f"more micro-batch's activations"
            )
    if b.get("recompute_s", 0) > 0:
        lines.append(f"recomputation {100 * b['recompute_s'] / step:.1f}% of the step ({_recompute(par)})")
    if b.get("host_s", 0) > 0.02 * step:
        lines.append(f"host-bound: the GPU waits {100 * b['host_s'] / step:.0f}% of the step for the CPU to dispatch")
    if par.cpu_offloading_num_layers:
        lines.append(
            f"activations of {par.cpu_offloading_num_layers} layers go to host memory instead of being recomputed: "
            f"their copies run beside the compute ({100 * b.get('offload_s', 0) / step:.1f}% of the step exposed)"
        )
    elif b.get("offload_s", 0) > 0:
        lines.append(f"offloaded optimizer step {100 * b['offload_s'] / step:.1f}% of the step")
    if par.dp == 1 and par.zero_stage == 1:
        lines.append("ZeRO-1 on one data-parallel rank: ZeRO-2/3 would shard nothing and only add hooks")
    peak = mem.stages[mem.peak_stage]
    lines.append(
        f"memory {mem.peak_bytes / GiB:.1f} of {mem.capacity_bytes / GiB:.1f} GiB on stage {peak.stage} "
        f"(up to {mem.peak_upper_bytes / GiB:.1f} GiB at the upper end of its interval; peak in {peak.peak_phase})"
    )
    return lines


SIMPLER_WITHIN = 0.01  # throughput differences the ranking leaves to simplicity (the model's median error is 3.6 %)


def moving_parts(par: ParallelConfig) -> dict[str, int]:
    """What a layout adds to plain TP x DP with the distributed optimizer, each with its weight: sharding beyond the
    optimizer's, offloads, a pipeline and its interleaving or uneven stages, context parallelism, recomputation.
    Plans within SIMPLER_WITHIN of each other rank by it (fewer first), as an expert picks the simpler of two
    layouts the model cannot tell apart (practitioner QA 2026-12-07: activation offload 0.3 % ahead, ZeRO-3 tied
    with ZeRO-2 on one node and ranked first by its smaller peak, VPP 40 ahead of VPP 10 by 0.1 %)."""
    parts: dict[str, int] = {}
    if par.zero_stage >= 2:
        parts[f"ZeRO-{par.zero_stage}"] = par.zero_stage - 1
    if par.megatron_fsdp:
        parts[f"M-FSDP({par.megatron_fsdp})"] = 2 if par.megatron_fsdp == "optim_grads_params" else 1
    for name, where in (("optimizer offload", par.offload_optimizer), ("parameter offload", par.offload_param)):
        if where != "none":
            parts[f"{name} to {where}"] = 1
    if par.cpu_offloading_num_layers:
        parts["activation offload"] = 1
    if par.pp > 1:
        parts[f"PP{par.pp}"] = 1
    if par.vpp > 1:
        parts[f"VPP{par.vpp}"] = 1
    if par.pipeline_layout or par.first_stage_layers or par.last_stage_layers:
        parts["uneven pipeline stages"] = 1
    if par.cp > 1:
        parts[f"CP{par.cp}"] = 1
    if par.recompute != "none":
        parts[f"{par.recompute} recomputation"] = 1
    return parts


def simplicity(par: ParallelConfig) -> tuple[int, int]:
    """What ranks plans within SIMPLER_WITHIN (smaller first): the weight of their moving parts, then how many pipeline
    chunks each micro-batch passes through (PP x VPP). VPP counted once whatever its size ranked one-layer chunks
    first: Llama-3 70B on 64 nodes (512 H100) put PP2 x VPP40 0.1 % ahead of VPP20, where recipes run 2-5 layers a
    chunk (Megatron-Bridge's 70B PP4 VP5, 405B PP8 VP8) for fewer sends and launches per micro-batch and less warm-up
    memory (practitioner QA 2026-12-07). Within the 1 % the fewest chunks win, however many layers each then holds:
    the model counts the larger bubble of fewer chunks, so it is inside the 1 % too."""
    return sum(moving_parts(par).values()), par.pp * par.vpp


def fewer_words(simple: ParallelConfig, other: ParallelConfig) -> str:
    """What makes `simple` the simpler of two plans (`simplicity`): its moving parts, or with as many, its chunks."""
    mine, theirs = simplicity(simple), simplicity(other)
    return "fewer pipeline chunks" if mine[0] == theirs[0] else "fewer moving parts"


def simpler_by(simple: ParallelConfig, other: ParallelConfig) -> str:
    """What `other` has that `simple` has not, for the "why" of two plans within SIMPLER_WITHIN."""
    mine, theirs = simplicity(simple), simplicity(other)
    if mine[0] == theirs[0] and mine[1] < theirs[1]:
        return f"{theirs[1]} pipeline chunks instead of {mine[1]} (PP x VPP)"
    added = [name for name in moving_parts(other) if name not in moving_parts(simple)]
    return ", ".join(added) if added else "more moving parts"


def mfu_words(mfu: float, precision: str) -> str:
    """FP8 MFU is of the BF16 peak, so that FP8 and BF16 runs compare (estimate.FLOPS_DEFINITION): said, since it
    passes 100 % on Blackwell ("MFU 99.8%" read as a bug, QA 2026-12-07)."""
    return f"MFU {100 * mfu:.1f}%{' of the BF16 peak' if precision == 'fp8' else ''}"


def _headline(t: object, best: Estimate | None, feasible: int, objective: str, world: int, precision: str) -> str:
    tokens, mfu, step = t.tokens_per_s, t.mfu, t.step_s  # type: ignore[attr-defined]
    mfu_text = mfu_words(mfu, precision)
    numbers = f"({tokens:,.0f} tokens/s, {mfu_text})"
    if best is not None:
        if step < best.time.step_s * (1 - 5e-4):  # the objective (headroom, fewest GPUs) ranks by something else
            ratio = best.time.step_s / step
            faster = f"{ratio:.2f}x as fast as #1" if ratio >= 1.1 else f"{100 * (ratio - 1):.1f}% faster than #1"
            return f"{faster}, ranked below it by objective {objective} {numbers}"
        slower = 100 * (step / best.time.step_s - 1)
        return f"{slower:.1f}% slower than #1 {numbers}"
    if objective == "min_gpus":
        return f"fewest GPUs that fit: {world} GPUs {numbers}"
    if objective == "headroom":
        near = f"within {100 * HEADROOM_WITHIN:.0f}% of the fastest"
        return f"most memory headroom of the plans {near} ({feasible} feasible) {numbers}"
    return f"fastest of {feasible} feasible plans: {tokens:,.0f} tokens/s, {mfu_text}"


def cluster_notes(cluster: ClusterSpec) -> list[str]:
    """What the cluster description says that its GPU's nodes are not built for."""
    own = cluster.gpu.gpus_per_node
    if cluster.gpus_per_node <= own:
        return []
    return [
        f"cluster.gpus_per_node({cluster.gpus_per_node}) > the {own} GPUs a {cluster.gpu.name} node (server or "
        f"tray) holds as built: the plans and launch files ask for {cluster.gpus_per_node} a node"
    ]


def model_notes(model: ModelSpec, training: TrainingSpec) -> list[str]:
    """What the plans of this model assume about its implementation that the user may have to check."""
    costs = training.software.costs
    if not model.is_moe or costs.hf_experts is None:
        return []
    if costs.hf_experts == "grouped_mm":
        other = (
            "plan with training.stack deepspeed-hf-transformers4"
            if training.software.framework == "deepspeed"
            else "only training.stack deepspeed-hf-transformers4 (under DeepSpeed) models that"
        )
        return [
            f"{model.name}'s experts are planned as transformers 5 runs them by default (experts_implementation "
            f"grouped_mm: two grouped GEMMs, no host sync); with transformers 4, or experts_implementation eager, "
            f"they run in a loop with a host sync per expert: {other}"
        ]
    return [
        f"{model.name}'s experts are planned as transformers 4 runs them (a loop over the experts hit, a host sync "
        f"each); transformers 5's default grouped_mm is faster: plan with training.stack deepspeed-hf"
    ]
