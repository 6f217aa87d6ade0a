"""`evaluate`: one parallel configuration → feasibility, memory per stage, step time and its breakdown, intervals."""

from __future__ import annotations

from dataclasses import dataclass

from app.planner import compute, rules, uncertainty
from app.planner.layout import StageShape, alike_stages, num_microbatches, stage_layer_kinds, stage_shapes
from app.planner.memory import memory_estimate, over
from app.planner.pipeline import pipeline_time, unpaired_share
from app.planner.results import Estimate, MemoryEstimate, TimeEstimate
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.states import stage_params
from app.planner.step import (
    StageTime,
    layer_floor,
    optimizer_times,
    stage_recompute_floor,
    stage_time,
    unpaired_ep,
)
from app.planner.traffic import dp_exposed, sharding_floor

FLOPS_DEFINITION = (
    "Model FLOPs as Megatron-LM's num_floating_point_operations: 6 x (forward FLOPs per token) x tokens, "
    "causal attention counted once (q*s), recomputation excluded, MoE counted on the top-k active experts; "
    "MFU divides by the GPU's dense tensor-core peak for the training precision (BF16 peak for FP8 training, "
    "so FP8 and BF16 MFU compare); HFU adds recomputation."
)


def time_estimate(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig) -> TimeEstimate:
    m = max(1, num_microbatches(training, par))
    timed: list[tuple[StageTime, int]] = []
    params: list[tuple[int, int]] = []
    for first, shape, dense, moe, n in alike_stages(model, training, par):  # stages shaped alike take alike
        unpaired = unpaired_share(par, first, m)  # the first of them holds the most warm-up forwards
        timed.append((stage_time(model, cluster, training, par, shape, dense, moe, unpaired), n))
        sp = stage_params(model, par, shape, dense, moe)
        params.append((sp.dense, sp.expert))
    pipe = pipeline_time([(t.total, n) for t, n in timed], par, m)
    slow = timed[pipe.busiest][0]
    dp_s = max(dp_exposed(model, cluster, training, par, t, p) for (t, _), p in zip(timed, params, strict=True))
    optimizer_s, offload_s = optimizer_times(model, cluster, training, par, params)
    step = pipe.total_s + dp_s + optimizer_s + offload_s
    tokens = training.global_batch_size * model.seq_length
    flops = compute.model_flops_per_token(model) * tokens
    hw_flops = flops + compute.recompute_flops_per_token(model, par.recompute) * tokens
    peak = cluster.gpu.peak_flops("bf16" if training.precision == "fp8" else training.precision)
    per_gpu = flops / step / par.world_size
    software = training.software
    spread = uncertainty.spread(software.name, cluster.gpu.generation, "time", software.label, model)
    step_iv = uncertainty.interval(step, spread)
    return TimeEstimate(
        step_s=step,
        tokens_per_s=tokens / step,
        tflops_per_gpu=per_gpu / 1e12,
        mfu=per_gpu / peak,
        hfu=hw_flops / step / par.world_size / peak,
        bubble_fraction=pipe.bubble_s / step,
        flops_per_step=flops,
        flops_definition=FLOPS_DEFINITION,
        breakdown=_breakdown(slow, m, pipe.bubble_s, dp_s, optimizer_s, offload_s),
        time_to_train_s=(training.train_tokens / (tokens / step)) if training.train_tokens else None,
        step_interval=step_iv,
        tokens_per_s_interval=step_iv.model_copy(update={"low": tokens / step_iv.high, "high": tokens / step_iv.low}),
        host_bound=slow.host_wait > 0.05 * slow.total,
    )


def step_lower_bound(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    recompute: bool = False,
    sharded: ParallelConfig | None = None,
) -> float:
    """A cheap bound below `time_estimate(...).step_s`: the pipeline time of the layers' compute and exposed
    TP/CP/EP communication without recomputation (cached per layer), the output layer's compute and the least
    its sharding's per-micro-batch traffic adds (`sharding_floor`), plus the stack's host time per step; no host,
    engine, data-parallel or other optimizer time, and recomputation only with `recompute`. With `sharded` (the same
    layout and micro-batch under another sharding): the bound of `sharded` from `par`'s layer costs, which a
    layer's compute and TP/CP/EP traffic do not read the sharding for (compute.py, attention.py)."""
    m = max(1, num_microbatches(training, par))
    floors = _stage_floors(model, cluster, training, par, recompute, traffic=sharded or par)
    return pipeline_time(floors, par, m).total_s + host_step(cluster, training)


def sharding_ceiling(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig) -> float:
    """The most `sharding_floor` gives on any stage of `par` at any window (none to hide behind): a bound above what
    the sharding's traffic adds to a stage's micro-batch in `step_lower_bound`, whatever the micro-batch size."""
    shapes = stage_shapes(model, training, par)
    kinds = stage_layer_kinds(model, training, par)
    seen = {(shape, *kind) for shape, kind in zip(shapes, kinds, strict=True)}
    return max((sharding_floor(model, cluster, training, par, s, d, m, 0.0) for s, d, m in seen), default=0.0)


def off_pipeline_floor(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    pairs: list[tuple[int, int]] | None = None,
) -> float:
    """The least a step of `par` spends after its pipeline, beyond the stack's host time per step that every bound
    holds (`host_step`): the optimizer step and its offload (`optimizer_times`: they read the stages' parameters and
    the sharding, not the micro-batch size or the recomputation) and the data-parallel reduce and gather at their
    least (`dp_exposed` with every overlapped collective hidden, paying its contention; on the stage with the most
    parameters, at or below the slowest stage's). Added to a bound of the same placement and sharding at any
    micro-batch size and recomputation, the bound stays below the step. `pairs`: the distinct stages' (dense,
    expert) parameters when known (`stage_param_pairs`; they do not depend on the sharding)."""
    pairs = pairs if pairs is not None else stage_param_pairs(model, training, par)
    optimizer_s, offload_s = optimizer_times(model, cluster, training, par, pairs)
    dp_s = dp_exposed(model, cluster, training, par, None, max(pairs, key=sum))
    return optimizer_s - host_step(cluster, training) + offload_s + dp_s


def stage_param_pairs(model: ModelSpec, training: TrainingSpec, par: ParallelConfig) -> list[tuple[int, int]]:
    """(dense, expert) parameters of each distinct stage of `par`."""
    params = (stage_params(model, par, shape, d, m) for _i, shape, d, m, _n in alike_stages(model, training, par))
    return [(sp.dense, sp.expert) for sp in params]


def host_step(cluster: ClusterSpec, training: TrainingSpec) -> float:
    """The stack's host time per optimizer step: part of every plan's optimizer time (`optimizer_times`)."""
    return training.software.generation(cluster.gpu.generation).host_step_s


@dataclass(frozen=True, slots=True)
class StageFloors:
    """A config's per-stage floors of one micro-batch without recomputation or sharding traffic (its layers' compute
    and exposed TP/CP/EP traffic, the loss): the stages as (floor seconds, count, shape, dense, MoE layers), the
    micro-batches per step and the stack's host time per step. `bound` adds a recomputation to them."""

    stages: tuple[tuple[float, int, StageShape, int, int], ...]
    microbatches: int
    host: float
    floors: tuple[tuple[float, int], ...]  # (floor seconds, count) of the stages: what `pipeline_time` reads

    def total(self, par: ParallelConfig) -> float:
        """The step bound of the floors alone (`step_lower_bound` without recomputation or sharding traffic)."""
        return pipeline_time(self.floors, par, self.microbatches).total_s + self.host

    def bound(self, model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig) -> float:
        """A bound below `step_lower_bound(par, recompute=True)` for `par`, a config of the same placement and
        micro-batch size with its own recomputation: each stage's floor plus the recomputation `stage_recompute_floor`
        adds (a few multiplications: the search's check that a level is worth a memory evaluation)."""
        if par.recompute == "none":
            return self.total(par)
        per_stage = [(t + _redone(model, cluster, training, par, s, d, m), n) for t, n, s, d, m in self.stages]
        return pipeline_time(per_stage, par, self.microbatches).total_s + self.host


def stage_floors(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, probes: list[ParallelConfig]
) -> list[StageFloors]:
    """`StageFloors` of configs that differ only in the micro-batch size (one placement): the stage structure is
    read once."""
    if not probes:
        return []
    stages = alike_stages(model, training, probes[0])
    costs = training.software.generation(cluster.gpu.generation)
    host = host_step(cluster, training)
    out = []
    for par in probes:
        dense_s = layer_floor(model, cluster, training, par, False)
        moe_s = layer_floor(model, cluster, training, par, True) if model.is_moe else dense_s
        loss = sum(compute.output_layer_time(model, par, training, cluster.gpu, costs)) * (1 + model.mtp_num_layers)
        m = max(1, num_microbatches(training, par))
        per_stage = []
        for first, shape, dense, moe, n in stages:
            floor = dense * dense_s + moe * moe_s + (loss if shape.loss else 0.0)
            per_stage.append((floor + _alone(model, cluster, training, par, first, moe, m), n, shape, dense, moe))
        out.append(StageFloors(tuple(per_stage), m, host, tuple((t, n) for t, n, *_ in per_stage)))
    return out


def placement_lower_bound(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, smallest_mbs: int
) -> float:
    """A bound below `step_lower_bound` at every micro-batch size from `smallest_mbs` up to `par`'s (the largest),
    from one evaluation: compute alone per sequence never grows with the micro-batch (`layer_floor`), so the busiest
    stage runs the replica's sequences at least at `par`'s per-sequence rate, and fill and drain last at least
    `(p - 1) / v` of the smallest micro-batch at that rate."""
    per_seq = [(t / par.micro_batch_size, n) for t, n in _stage_floors(model, cluster, training, par, comm=False)]
    sequences = max(1, num_microbatches(training, par)) * par.micro_batch_size
    busiest = sequences * max(t for t, _n in per_seq) + host_step(cluster, training)
    if par.pp == 1:
        return busiest
    return busiest + (par.pp - 1) * smallest_mbs * (sum(t * n for t, n in per_seq) / par.pp) / par.vpp


def _stage_floors(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    recompute: bool = False,
    comm: bool = True,
    traffic: ParallelConfig | None = None,
) -> list[tuple[float, int]]:
    """Per stage, a bound below one micro-batch's time (see `step_lower_bound`); with `traffic`, the least that
    config's sharding adds against the compute (and recomputation) alone as its window."""
    costs = training.software.generation(cluster.gpu.generation)
    dense_s = layer_floor(model, cluster, training, par, False, comm)
    moe_s = layer_floor(model, cluster, training, par, True, comm) if model.is_moe else dense_s
    if traffic is not None:  # the window: compute only (the floors above may hold exposed TP/CP/EP time)
        dense_c = layer_floor(model, cluster, training, par, False, False)
        moe_c = layer_floor(model, cluster, training, par, True, False) if model.is_moe else dense_c
    redo = recompute and par.recompute != "none"
    m = max(1, num_microbatches(training, par))
    per_stage = []
    for first, shape, dense, moe, count in alike_stages(model, training, par):
        redone = _redone(model, cluster, training, par, shape, dense, moe) if redo else 0.0
        loss = sum(compute.output_layer_time(model, par, training, cluster.gpu, costs)) if shape.loss else 0.0
        loss *= 1 + model.mtp_num_layers
        t = dense * dense_s + moe * moe_s + redone + loss
        if comm:
            t += _alone(model, cluster, training, par, first, moe, m)
        if traffic is not None:
            window = dense * dense_c + moe * moe_c + redone + loss
            t += sharding_floor(model, cluster, training, traffic, shape, dense, moe, window)
        per_stage.append((t, count))
    return per_stage


def _alone(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, first: int, moe: int, m: int
) -> float:
    """The EP all-to-all the unpaired passes of combined 1F1B expose on the stages from `first` (`stage_time` adds
    the same)."""
    return unpaired_ep(model, cluster, training, par, moe, unpaired_share(par, first, m)) if moe else 0.0


def _redone(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
) -> float:
    """The least a stage's recomputation adds to one micro-batch (`stage_recompute_floor` of its layer kinds)."""
    redone = dense * stage_recompute_floor(model, cluster, training, par, shape, False) if dense else 0.0
    return redone + (moe * stage_recompute_floor(model, cluster, training, par, shape, True) if moe else 0.0)


def _breakdown(slow: StageTime, m: int, bubble: float, dp: float, opt: float, offload: float) -> dict[str, float]:
    """Seconds per step on the critical path (the slowest stage's micro-batches), adding up to step_s."""
    return {
        "compute_s": m * slow.compute,
        "recompute_s": m * slow.recompute,
        "tp_comm_s": m * slow.tp_comm,
        "cp_comm_s": m * slow.cp_comm,
        "ep_comm_s": m * slow.ep_comm,
        "pp_comm_s": m * slow.pp_comm,
        "zero_comm_s": m * slow.zero_comm,
        "engine_s": m * slow.engine,
        "host_s": m * slow.host_wait,
        "bubble_s": bubble,
        "dp_comm_s": dp,
        "optimizer_s": opt,
        "offload_s": offload + m * slow.offload,
    }


def memory(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig) -> MemoryEstimate:
    """Memory per stage with the 80 % interval of the peak (from the stack's measured memory residuals)."""
    software = training.software
    spread = uncertainty.spread(software.name, cluster.gpu.generation, "memory", software.label)
    mem = memory_estimate(model, cluster, training, par, uncertainty.upper_factor(spread))
    runtime = cluster.gpu.efficiency.runtime_overhead_bytes
    iv = uncertainty.interval(float(mem.peak_reserved_bytes), spread)
    return mem.model_copy(
        update={"peak_interval": iv.model_copy(update={"low": iv.low + runtime, "high": iv.high + runtime})}
    )


def fits(mem: MemoryEstimate) -> list[rules.Violation]:
    out = []
    if mem.peak_upper_bytes > mem.usable_bytes:
        stage = mem.stages[mem.peak_stage]
        needed, usable = over(mem.peak_upper_bytes, mem.usable_bytes)
        out.append(
            rules.Violation(
                "out_of_memory",
                f"stage {mem.peak_stage} needs {mem.peak_bytes / 2**30:.1f} GiB per GPU "
                f"(weights {stage.weights_bytes / 2**30:.1f}, grads {stage.gradients_bytes / 2**30:.1f}, "
                f"optimizer {stage.optimizer_bytes / 2**30:.1f}, activations {stage.activations_bytes / 2**30:.1f}, "
                f"other {stage.other_bytes / 2**30:.1f}; peak in {stage.peak_phase}); at the upper end of its 80% "
                f"interval {needed} GiB > usable {usable} GiB of "
                f"{mem.capacity_bytes / 2**30:.1f} GiB",
            )
        )
    if mem.cpu_bytes_per_node > 0.9 * mem.cpu_capacity_bytes_per_node:
        out.append(
            rules.Violation(
                "cpu_out_of_memory",
                f"offloaded states need {mem.cpu_bytes_per_node / 2**30:.0f} GiB of host memory per node "
                f"> 90% of {mem.cpu_capacity_bytes_per_node / 2**30:.0f} GiB",
            )
        )
    return out


def evaluate(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    world_size: int | None = None,
    time: TimeEstimate | None = None,
) -> Estimate:
    """Rules, memory per stage and step time of one configuration (`time` when already computed)."""
    violations = rules.check(model, cluster, training, par, world_size)
    mem = memory(model, cluster, training, par)
    violations += fits(mem)
    time = time or time_estimate(model, cluster, training, par)
    return Estimate(feasible=not violations, reasons=[v.message for v in violations], memory=mem, time=time)
