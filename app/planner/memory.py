"""Peak memory per GPU and per pipeline stage: what each stack allocates, in two phases, and what the caching
allocator reserves for it.

Phases: activations live through forward and backward; the step's temporaries live after them. The peak is the
larger phase, not their sum. Allocated bytes become reserved bytes through the stack's caching-allocator
fragmentation and slack; the CUDA context and workspaces sit outside the allocator.
Model states: states.py. Activations: activations.py. Pipeline in-flight counts: pipeline.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.planner import activations as act
from app.planner import dispatch
from app.planner.layout import StageShape, alike_stages, num_microbatches, stage_layer_kinds, stage_shapes
from app.planner.pipeline import in_flight, peak_live
from app.planner.results import MemoryEstimate, StageMemory
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.states import ZERO3_NVME_SUB_GROUP_SIZE, States, stage_states
from app.planner.traffic import recomputed_layers


def over(needed: float, limit: float) -> tuple[str, str]:
    """`needed` > `limit` bytes as GiB, each with one decimal, or as many more (up to three) as it takes for the two to
    read apart: a miss by a few MiB read "79.6 GiB > usable 79.6 GiB" (QA 2026-12-07)."""
    for decimals in (1, 2, 3):
        a, b = f"{needed / 2**30:.{decimals}f}", f"{limit / 2**30:.{decimals}f}"
        if a != b:
            break
    return a, b


def static_bytes(model: ModelSpec, training: TrainingSpec, par: ParallelConfig, stage: int) -> float:
    """Reserved bytes a stage needs for its model states alone (no activations, no step temporaries)."""
    shapes = stage_shapes(model, training, par)
    kinds = stage_layer_kinds(model, training, par)
    s = stage_states(model, training, par, shapes[stage], *kinds[stage])
    return s.weights + s.grads + s.optimizer + s.buffers


def _stage_activations(
    model: ModelSpec,
    par: ParallelConfig,
    training: TrainingSpec,
    shape: StageShape,
    dense: int,
    moe: int,
    stage: int,
    microbatches: int,
) -> float:
    """Activations a stage holds at its peak: what each in-flight forward of each of its chunks keeps (chunks differ
    when the embedding or the loss is a pipeline unit, or under a layout string: pipeline.live_chunks), plus the
    working set of the layer being recomputed, the first stage's token ids and the last stage's logits."""
    per_dense, per_moe = _per_layer(model, par, training, moe)
    layers = dense + moe
    kept = dense * per_dense + moe * per_moe
    chunks = shape.chunks or (0,)
    mean_layer = kept / layers if layers else 0.0
    working = 0.0
    if par.recompute == "full" and layers:
        ckpt = act.checkpoint_bytes(model, par)
        if par.recompute_method == "uniform" and par.recompute_num_layers:
            per_chunk = [n / par.recompute_num_layers * ckpt for n in chunks]
            working = par.recompute_num_layers * max(per_dense if dense else 0.0, per_moe)
        else:
            recomputed = [recomputed_layers(par, n) for n in chunks]
            per_chunk = [r * ckpt + (n - r) * mean_layer for n, r in zip(chunks, recomputed, strict=True)]
            working = max(per_dense if dense else 0.0, per_moe)
    elif par.cpu_offloading_num_layers and layers:
        # TE's offload handler copies an offloaded layer's saved tensors to the host after its forward and waits
        # for that copy at the end of the next layer's, so one offloaded layer is on the GPU besides the kept ones
        # (transformer_engine/pytorch/cpu_offload.py; PP 1, one micro-batch in flight)
        offloaded = min(par.cpu_offloading_num_layers, layers)
        per_chunk = [n * mean_layer * (layers - offloaded + 1) / layers for n in chunks]
    else:
        per_chunk = [n * mean_layer for n in chunks]
        if layers:  # op-level selective recomputation: the layer whose dropped tensors backward recomputes
            working = act.recompute_working_bytes(model, par, training, moe=False)
    if shape.embedding:  # the first chunk's
        per_chunk[0] += act.embedding_stage_bytes(model, par)
    if shape.mtp:  # the last chunk's: each MTP layer's embedding of the shifted tokens, its two norms, eh_proj's input
        per_chunk[-1] += shape.mtp * act.mtp_input_bytes(model, par)
    total = peak_live(par, stage, microbatches, per_chunk) + working
    if shape.loss:  # the main logits and every MTP layer's (GPTModel._postprocess computes them all before backward)
        total += act.output_stage_bytes(model, par, training) * (1 + model.mtp_num_layers)
    return total


@dataclass(frozen=True, slots=True)
class StageParts:
    """Bytes of one GPU of one stage (floats; StageMemory is built from these only for results)."""

    params: int
    weights: float
    grads: float
    optimizer: float
    activations: float
    other: float  # buffers, step temporaries beyond activations, fragmentation, runtime
    allocated: float
    reserved: float
    total: float  # reserved + CUDA context and workspaces
    phase: str
    cpu: float
    nvme: float
    in_flight: float


def _stage_bytes(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
    stage: int,
) -> tuple[States, float, float, float, float, float, float, float, float]:
    """(states, micro-batches in flight, the activations and the gradients autograd made that are live at the
    backward peak, backward peak, step peak, allocated, reserved, runtime) of one stage: `stage_parts` in numbers
    (the search's memory check reads only the total and the host bytes)."""
    states = stage_states(model, training, par, shape, dense, moe)
    microbatches = max(1, num_microbatches(training, par))
    flight = in_flight(par, stage, microbatches)
    acts = _stage_activations(model, par, training, shape, dense, moe, stage, microbatches)
    static = states.weights + states.grads + states.optimizer + states.buffers
    if par.tp_comm_overlap:  # Transformer Engine userbuffers: a [tokens, h] 16-bit buffer per overlapped GEMM
        static += 4 * 2.0 * model.seq_length // par.cp * par.micro_batch_size * model.hidden_size
    if microbatches > 1 and states.grads_persist:
        # DeepSpeed ZeRO-1 keeps every 16-bit gradient in param.grad, ZeRO-2 its partition buffer, from the first
        # micro-batch's backward to the step: the later micro-batches' activations come on top of them (stage 1
        # registers no reducing hook without overlap_comm; stage_1_and_2.py process_gradients / reduce_gradients)
        lazy_live, acts_live = states.lazy_grads, acts
    elif states.lazy_grads > acts:  # one micro-batch (or one module's gradient): made as activations are freed
        lazy_live, acts_live = states.lazy_grads, 0.0
    else:
        lazy_live, acts_live = 0.0, acts
    backward = static + lazy_live + acts_live
    step = static + states.step_peak
    allocated = max(backward, step)
    costs = training.software.generation(cluster.gpu.generation)
    reserved = allocated * (1 + costs.allocator_fragmentation) + costs.allocator_slack_bytes
    runtime = float(cluster.gpu.efficiency.runtime_overhead_bytes)
    if moe and par.moe_token_dispatcher == "flex":
        runtime += dispatch.flex_buffer_bytes(model, par.ep, par.expert_tp)
    return states, flight, acts_live, lazy_live, backward, step, allocated, reserved, runtime


def stage_parts(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
    stage: int,
) -> StageParts:
    states, flight, acts, lazy_live, backward, step, allocated, reserved, runtime = _stage_bytes(
        model, cluster, training, par, shape, dense, moe, stage
    )
    in_backward = backward >= step
    # the activations and the gradients autograd made that are live at the stage's peak (none in the step: there
    # the optimizer's own gradient copies are in "other"); ZeRO-1 showed "grads 0" under 15 GiB of them (QA)
    at_peak = acts if in_backward else 0.0
    grads = states.grads + (lazy_live if in_backward else 0.0)
    total = reserved + runtime
    return StageParts(
        params=states.params,
        weights=states.weights,
        grads=grads,
        optimizer=states.optimizer,
        activations=at_peak,
        # everything else of the total, so that the parts add up to it (the TP-overlap userbuffers were in the total
        # and in no part: 0.1-0.25 GiB short per stage)
        other=total - states.weights - grads - states.optimizer - at_peak,
        allocated=allocated,
        reserved=reserved,
        total=total,
        phase="backward" if backward >= step else "optimizer step",
        cpu=states.cpu + offloaded_activations(model, par, training, dense, moe),
        nvme=states.nvme,
        in_flight=flight,
    )


def offloaded_activations(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, dense: int, moe: int) -> float:
    """Host bytes of one GPU's offloaded layers (`--cpu-offloading-num-layers`): Transformer Engine's offload handler
    copies their saved tensors into pinned host memory (cpu_offload.py), one micro-batch in flight (PP 1). They were
    not counted, so 8 offloaded Llama-3 8B layers at 128K (146 GB a node) were planned on a 64 GiB host (QA,
    2026-12-07). Layers are taken at the stage's mean, as `_stage_activations` keeps them."""
    layers = dense + moe
    if not (par.cpu_offloading_num_layers and layers):
        return 0.0
    per_dense, per_moe = _per_layer(model, par, training, moe)
    return min(par.cpu_offloading_num_layers, layers) * (dense * per_dense + moe * per_moe) / layers


def _per_layer(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, moe: int) -> tuple[float, float]:
    """What one dense and one MoE layer keep per micro-batch (0 for MoE on a stage without MoE layers)."""
    per_moe = act.layer_bytes(model, par, training, moe=True) if moe else 0.0
    return act.layer_bytes(model, par, training, moe=False), per_moe


def _to_stage_memory(stage: int, layers: int, p: StageParts) -> StageMemory:
    return StageMemory(
        stage=stage,
        layers=layers,
        params=p.params,
        weights_bytes=int(p.weights),
        gradients_bytes=int(p.grads),
        optimizer_bytes=int(p.optimizer),
        activations_bytes=int(p.activations),
        other_bytes=int(p.other),
        total_bytes=int(p.total),
        allocated_bytes=int(p.allocated),
        reserved_bytes=int(p.reserved),
        peak_phase=p.phase,
        microbatches_in_flight=math.ceil(p.in_flight),
    )


def _stages(model: ModelSpec, training: TrainingSpec, par: ParallelConfig) -> list[tuple[int, StageShape, int, int]]:
    shapes = stage_shapes(model, training, par)
    kinds = stage_layer_kinds(model, training, par)
    return [(i, shapes[i], kinds[i][0], kinds[i][1]) for i in range(len(shapes))]


def peak_memory(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig
) -> tuple[float, int, float]:
    """(peak bytes per GPU, its stage, host bytes per node). In-flight micro-batches only fall along the pipeline,
    so a stage shaped like an earlier one is never higher and is skipped (the loss is on one stage only)."""
    peak, peak_stage, cpu = -1.0, 0, 0.0
    for stage, shape, dense, moe, _n in alike_stages(model, training, par):
        states, *_, reserved, runtime = _stage_bytes(model, cluster, training, par, shape, dense, moe, stage)
        if reserved + runtime > peak:
            peak, peak_stage = reserved + runtime, stage
        cpu = max(cpu, states.cpu + offloaded_activations(model, par, training, dense, moe))
    local = min(cluster.gpus_per_node, par.world_size)
    return peak, peak_stage, cpu * local + _offload_buffers(par) * local


def memory_estimate(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, upper_factor: float = 1.0
) -> MemoryEstimate:
    stages: list[StageMemory] = []
    cpu_per_gpu = nvme_per_gpu = 0.0
    for stage, shape, dense, moe in _stages(model, training, par):
        parts = stage_parts(model, cluster, training, par, shape, dense, moe, stage)
        # the stage's decoder layers, as the layout counts them (its MTP layers are in the memory, not the count)
        stages.append(_to_stage_memory(stage, dense + moe - shape.mtp, parts))
        cpu_per_gpu, nvme_per_gpu = max(cpu_per_gpu, parts.cpu), max(nvme_per_gpu, parts.nvme)
    peak = max(stages, key=lambda s: s.total_bytes)
    capacity = cluster.gpu.memory_bytes
    local = min(cluster.gpus_per_node, par.world_size)
    runtime = float(cluster.gpu.efficiency.runtime_overhead_bytes)
    return MemoryEstimate(
        peak_bytes=peak.total_bytes,
        peak_stage=peak.stage,
        peak_allocated_bytes=peak.allocated_bytes,
        peak_reserved_bytes=peak.reserved_bytes,
        peak_upper_bytes=int(peak.reserved_bytes * upper_factor + runtime),
        capacity_bytes=capacity,
        usable_bytes=int(capacity * (1 - training.memory_headroom)),
        headroom_fraction=1 - peak.total_bytes / capacity,
        stages=stages,
        cpu_bytes_per_node=int(cpu_per_gpu * local + _offload_buffers(par) * local),
        cpu_capacity_bytes_per_node=int(cluster.cpu_memory_GiB * 2**30),
        nvme_bytes_per_node=int(nvme_per_gpu * local),
    )


def _offload_buffers(par: ParallelConfig) -> float:
    """Pinned staging buffers per GPU for NVMe offload (offload_config.py defaults: optimizer 4 buffers of a
    sub-group, params 5 x 1e8 elements) — CPU offload works in place on the fp32 partition."""
    total = 0.0
    if par.offload_optimizer == "nvme":
        total += 4 * ZERO3_NVME_SUB_GROUP_SIZE * 4
    if par.offload_param == "nvme":
        total += 5 * 1e8 * 2
    return total
