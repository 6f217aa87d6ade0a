"""Peak memory per GPU and per pipeline stage.

Model states per parameter (mixed precision with Adam):
- Megatron-LM: `docs/user-guide/features/dist_optimizer.md` — bf16 params with fp32 grads: 2 + 4 + 12 (18),
  distributed optimizer 2 + 4 + 12/d; fp16: 2 + 2 + 16 (20), distributed 2 + 2 + 16/d.
- DeepSpeed ZeRO (`stage_1_and_2.py`, `stage3.py`, rules.md sec. 4): stage 1 keeps 16-bit params and full
  16-bit grads plus fp32 master, Adam m, v and the fp32 grad partition: 2 + 2 + 16/N; stage 2: 2 + 2/N + 16/N
  (DeepSpeed's own estimator: 2 + 18/N); stage 3: (2 + 2 + 16)/N plus the live gathered parameters.
  Megatron-DeepSpeed with fp32 grad accumulation uses `BF16_Optimizer`: 2 + 4 + 12/N (full fp32 grads).
- ZeRO paper (Rajbhandari et al. 2020, Fig. 1): 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N for fp16 with K = 12.
Activations: see activations.py. Pipeline in-flight counts: layout.microbatches_in_flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.planner import activations as act
from app.planner import params as pc
from app.planner.layout import microbatches_in_flight, num_microbatches, stage_groups, stage_layer_kinds
from app.planner.results import MemoryEstimate, StageMemory
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Bytes per parameter of one GPU's share, by where they live."""

    weights: float
    grads: float
    optimizer: float
    cpu: float = 0.0
    nvme: float = 0.0


@dataclass(frozen=True, slots=True)
class ZeroBuckets:
    """DeepSpeed bucket sizes in elements; the renderer writes exactly these into ds_config.json."""

    reduce_bucket_size: int
    allgather_bucket_size: int
    prefetch_bucket_size: int
    param_persistence_threshold: int
    max_live_parameters: int


def zero_buckets(model: ModelSpec, zero_stage: int) -> ZeroBuckets:
    """Stage 3: Hugging Face's `auto` rule (reduce = h², prefetch = 0.9·h², persistence = 10·h), which scales
    with the layer size; stages 1-2: 2e8 elements, as in DeepSpeed's ZeRO tutorial configs."""
    h = model.hidden_size
    if zero_stage == 3:
        return ZeroBuckets(h * h, h * h, int(0.9 * h * h), 10 * h, 1_000_000_000)
    return ZeroBuckets(200_000_000, 200_000_000, 0, 0, 0)


def zero_overlap_comm(zero_stage: int) -> bool:
    """DeepSpeed's `overlap_comm` as rendered: on for ZeRO-2/3 (DeepSpeed's own default turns it on for stage 3),
    off for stage 1, where it would double the IPG buckets for little gain. The memory model counts its buckets."""
    return zero_stage >= 2


def deepspeed_uses_bf16_optimizer(training: TrainingSpec, par: ParallelConfig) -> bool:
    """Megatron-DeepSpeed runs with fp32 gradient accumulation (`data_types.grad_accum_dtype = fp32`), which
    with ZeRO-1 and bf16 selects DeepSpeed's BF16_Optimizer (engine.py `_do_optimizer_sanity_check`)."""
    return training.framework == "megatron-deepspeed" and par.zero_stage <= 1 and training.precision != "fp16"


def state_bytes(training: TrainingSpec, par: ParallelConfig, shard: int) -> StateBytes:
    """Per-parameter model-state bytes when the optimizer is sharded over `shard` ranks."""
    if training.framework == "megatron":
        grads = 2.0 if training.precision == "fp16" else 4.0
        opt = 16.0 if training.precision == "fp16" else 12.0
        return StateBytes(2.0, grads, opt / shard if par.distributed_optimizer else opt)
    if deepspeed_uses_bf16_optimizer(training, par):
        return StateBytes(2.0, 4.0, 12.0 / max(shard, 1) if par.zero_stage else 12.0)
    stage, n = par.zero_stage, max(shard, 1)
    weights = 2.0 / n if stage == 3 else 2.0
    grads = 2.0 / n if stage >= 2 else 2.0
    fp32 = 16.0 / n if stage >= 1 else 16.0
    cpu = nvme = 0.0
    if par.offload_optimizer == "cpu":
        cpu, fp32 = fp32, 0.0
    elif par.offload_optimizer == "nvme":
        nvme, fp32 = fp32, 0.0
    if stage == 3 and par.offload_param == "cpu":
        cpu, weights = cpu + weights, 0.0
    elif stage == 3 and par.offload_param == "nvme":
        nvme, weights = nvme + weights, 0.0
    return StateBytes(weights, grads, fp32, cpu, nvme)


def optimizer_shards(par: ParallelConfig, framework: str) -> tuple[int, int]:
    """Ranks sharing (dense, expert) optimizer states: Megatron shards over DP x CP and, for experts, over
    the expert-data-parallel group `tp*cp*dp / (etp*ep)`; DeepSpeed's ZeRO over its data-parallel group."""
    if framework == "megatron":
        dense = par.dp * par.cp
        return dense, max(1, par.tp * par.cp * par.dp // (par.expert_tp * par.ep))
    return par.dp, par.dp


@dataclass(frozen=True, slots=True)
class StageParams:
    dense: int
    expert: int
    largest_module: int  # for ZeRO-3's gathered working set


def stage_params(model: ModelSpec, par: ParallelConfig, stage: int, dense: int, moe: int) -> StageParams:
    d_shard = pc.layer_shard(model, par.tp, par.ep, par.expert_tp, moe=False)
    m_shard = pc.layer_shard(model, par.tp, par.ep, par.expert_tp, moe=True) if moe else None
    total_dense = dense * d_shard.dense + (moe * m_shard.dense if m_shard else 0)
    total_expert = moe * m_shard.expert if m_shard else 0
    if stage == 0:
        total_dense += pc.embedding_shard(model, par.tp)
    if stage == par.pp - 1:
        total_dense += pc.output_shard(model, par.tp, par.pp)
    assert model.ffn_hidden_size is not None
    fc1 = model.hidden_size * model.ffn_hidden_size * (2 if model.swiglu else 1) // par.tp
    vocab = model.vocab_size * model.hidden_size // par.tp
    return StageParams(total_dense, total_expert, max(fc1, vocab))


def _stage_activation_bytes(
    model: ModelSpec,
    par: ParallelConfig,
    training: TrainingSpec,
    stage: int,
    dense: int,
    moe: int,
    in_flight: float,
) -> float:
    per_dense = act.layer_bytes(model, par, training, moe=False)
    per_moe = act.layer_bytes(model, par, training, moe=True) if moe else 0.0
    if par.recompute == "full":
        kept = (dense + moe) * act.checkpoint_bytes(model, par) * in_flight
        kept += max(per_dense if dense else 0.0, per_moe)  # the layer being recomputed in backward
    else:
        kept = (dense * per_dense + moe * per_moe) * in_flight
    if stage == 0:
        kept += act.embedding_stage_bytes(model, par) * in_flight
    if stage == par.pp - 1:
        kept += act.output_stage_bytes(model, par)
    return kept


FP8_AMAX_HISTORY = 1024  # --fp8-amax-history-len as rendered


def _fp8_bytes(sp: StageParams, layers: int) -> float:
    """Transformer Engine keeps an FP8 copy of each weight and its transpose (1 byte each) and an fp32 amax
    history for the input, weight and gradient of each of a layer's four GEMMs."""
    return 2.0 * (sp.dense + sp.expert) + layers * 4 * 3 * FP8_AMAX_HISTORY * 4


def _other_bytes(
    model: ModelSpec, training: TrainingSpec, par: ParallelConfig, sp: StageParams, fp8_extra: float
) -> float:
    """Buckets and gathered parameters the allocator holds besides states and activations."""
    if training.framework == "megatron":
        return fp8_extra  # Megatron's grad/param buffers are the states themselves
    buckets = zero_buckets(model, par.zero_stage)
    overlap = 2 if zero_overlap_comm(par.zero_stage) else 1  # overlap_comm doubles the IPG buckets
    other = 2.0 * buckets.reduce_bucket_size * overlap + fp8_extra
    if par.zero_stage in (1, 2):
        other += 2.0 * buckets.allgather_bucket_size
    if par.zero_stage == 3:
        live = min(buckets.max_live_parameters, buckets.prefetch_bucket_size + sp.largest_module)
        other += 2.0 * live + 2.0 * sp.largest_module  # gathered 16-bit params + a module's full gradient
    return other


@dataclass(frozen=True, slots=True)
class StageParts:
    """Bytes of one GPU of one stage (floats; StageMemory is built from these only for results)."""

    params: int
    weights: float
    grads: float
    optimizer: float
    activations: float
    other: float
    total: float
    cpu: float
    nvme: float
    in_flight: float


def stage_parts(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    stage: int,
    dense: int,
    moe: int,
) -> StageParts:
    states = _stage_states(model, training, par, stage, dense, moe)
    in_flight = microbatches_in_flight(par, stage, max(1, num_microbatches(training, par)))
    acts = _stage_activation_bytes(model, par, training, stage, dense, moe, in_flight)
    eff = cluster.gpu.efficiency
    allocated = states.weights + states.grads + states.optimizer + acts + states.other
    fragmentation = allocated * eff.allocator_fragmentation
    return StageParts(
        params=states.params,
        weights=states.weights,
        grads=states.grads,
        optimizer=states.optimizer,
        activations=acts,
        other=states.other + fragmentation + eff.runtime_overhead_bytes,
        total=allocated + fragmentation + eff.runtime_overhead_bytes,
        cpu=states.cpu,
        nvme=states.nvme,
        in_flight=in_flight,
    )


@dataclass(frozen=True, slots=True)
class _States:
    params: int
    weights: float
    grads: float
    optimizer: float
    other: float  # buckets, gathered ZeRO-3 parameters, FP8 copies
    cpu: float
    nvme: float


def _stage_states(
    model: ModelSpec, training: TrainingSpec, par: ParallelConfig, stage: int, dense: int, moe: int
) -> _States:
    """Everything on a stage but activations: the same for every micro-batch size and recomputation, so it is
    computed once per placement and sharding (cached on the model spec)."""
    key = ("states", par.tp, par.pp, par.dp, par.cp, par.ep, par.expert_tp, par.zero_stage, par.distributed_optimizer,
           par.offload_optimizer, par.offload_param, stage == 0, stage == par.pp - 1, dense, moe)
    return model.memo(key, lambda: _compute_states(model, training, par, stage, dense, moe), training)


def _compute_states(
    model: ModelSpec, training: TrainingSpec, par: ParallelConfig, stage: int, dense: int, moe: int
) -> _States:
    dense_shard, expert_shard = optimizer_shards(par, training.framework)
    sp = stage_params(model, par, stage, dense, moe)
    sd, se = state_bytes(training, par, dense_shard), state_bytes(training, par, expert_shard)
    fp8_extra = _fp8_bytes(sp, dense + moe) if training.precision == "fp8" else 0.0
    return _States(
        params=sp.dense + sp.expert,
        weights=sp.dense * sd.weights + sp.expert * se.weights,
        grads=sp.dense * sd.grads + sp.expert * se.grads,
        optimizer=sp.dense * sd.optimizer + sp.expert * se.optimizer,
        other=_other_bytes(model, training, par, sp, fp8_extra),
        cpu=sp.dense * sd.cpu + sp.expert * se.cpu,
        nvme=sp.dense * sd.nvme + sp.expert * se.nvme,
    )


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
        microbatches_in_flight=math.ceil(p.in_flight),
    )


def peak_memory(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig
) -> tuple[float, int, float]:
    """(peak bytes per GPU, its stage, host bytes per node) from one stage per group of identical stages:
    in-flight micro-batches only fall along the pipeline, so a group's first stage is its peak."""
    peak, peak_stage, cpu = -1.0, 0, 0.0
    groups = stage_groups(stage_layer_kinds(model, par), par.pp)
    for first, _count, dense, moe in groups:
        if 0 < first < par.pp - 1 and (dense, moe) == groups[0][2:]:
            continue  # same layers as stage 0 but fewer micro-batches in flight and no embedding: never higher
        parts = stage_parts(model, cluster, training, par, first, dense, moe)
        if parts.total > peak:
            peak, peak_stage = parts.total, first
        cpu = max(cpu, parts.cpu)
    local = min(cluster.gpus_per_node, par.world_size)
    return peak, peak_stage, cpu * local + _offload_buffers(par) * local


def memory_estimate(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig
) -> MemoryEstimate:
    stages: list[StageMemory] = []
    cpu_per_gpu = nvme_per_gpu = 0.0
    for stage, (dense, moe) in enumerate(stage_layer_kinds(model, par)):
        parts = stage_parts(model, cluster, training, par, stage, dense, moe)
        stages.append(_to_stage_memory(stage, dense + moe, parts))
        cpu_per_gpu, nvme_per_gpu = max(cpu_per_gpu, parts.cpu), max(nvme_per_gpu, parts.nvme)
    peak = max(stages, key=lambda s: s.total_bytes)
    capacity = cluster.gpu.memory_bytes
    local = min(cluster.gpus_per_node, par.world_size)
    return MemoryEstimate(
        peak_bytes=peak.total_bytes,
        peak_stage=peak.stage,
        capacity_bytes=capacity,
        usable_bytes=int(capacity * (1 - training.memory_headroom)),
        headroom_fraction=1 - peak.total_bytes / capacity,
        stages=stages,
        cpu_bytes_per_node=int(cpu_per_gpu * local + _offload_buffers(par) * local),
        cpu_capacity_bytes_per_node=int(cluster.cpu_memory_GiB * 2**30),
        nvme_bytes_per_node=int(nvme_per_gpu * local),
    )


def _offload_buffers(par: ParallelConfig) -> float:
    """Pinned staging buffers per GPU for NVMe offload (offload_config.py defaults: optimizer 4 buffers,
    params 5 x 1e8 elements) — CPU offload works in place on the fp32 partition."""
    total = 0.0
    if par.offload_optimizer == "nvme":
        total += 4 * 1e8 * 4
    if par.offload_param == "nvme":
        total += 5 * 1e8 * 2
    return total
