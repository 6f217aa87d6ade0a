"""Step time: per-stage micro-batch time, the pipeline schedule, data-parallel sync, optimizer and offload.

- Pipeline (Narayanan et al. 2021, sec. 2.2): with m micro-batches, p stages and v model chunks per rank,
  `T = m * t_max + (p - 1) * t_avg / v` where t_r is one micro-batch's forward + backward on stage r; for equal
  stages the bubble is `(p - 1) / v` micro-batch times, i.e. `(p-1)/(v*m)` of the ideal time.
- TP: two all-reduces per layer in forward and two in backward (Shoeybi et al. 2019); with sequence
  parallelism each becomes an all-gather plus a reduce-scatter of the same volume (Korthikanti et al. 2022,
  sec. 4.2.2); full recompute repeats the forward ones. Not overlapped with compute.
- PP: one activation send forward and one gradient send backward per micro-batch and stage, scattered over
  TP (Megatron's scatter/gather optimisation); interleaving overlaps them (`overlap_p2p_comm`).
- DP: Megatron all-reduces gradients (fp32 under bf16, rules.md sec. 1) or, with the distributed optimizer,
  reduce-scatters them and all-gathers parameters; with `overlap_grad_reduce` only what outlasts the last
  micro-batch's backward is exposed. ZeRO-3 moves 3 x the 16-bit parameters per micro-batch (ZeRO paper sec. 7),
  overlapped with compute by prefetching.
- Optimizer: fused Adam streams ~30 bytes per parameter of its shard through HBM, plus the gradient norm and
  zeroing over the whole gradient buffer; offloaded Adam runs at the node's CPU Adam rate after PCIe copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.planner import catalog, comm, compute, layout
from app.planner.activations import moe_imbalance
from app.planner.attention import attention_shape
from app.planner.memory import deepspeed_uses_bf16_optimizer, optimizer_shards, stage_params, zero_buckets
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec

ACT = 2
ZERO3_GATHERS_PER_LAYER = 4  # one all-gather per linear module (QKV, projection, fc1, fc2)


@dataclass(slots=True)
class StageTime:
    """Seconds of one micro-batch (forward + backward) on one stage, by cause."""

    compute: float = 0.0
    recompute: float = 0.0
    tp_comm: float = 0.0
    cp_comm: float = 0.0
    ep_comm: float = 0.0
    pp_comm: float = 0.0
    zero_comm: float = 0.0
    engine: float = 0.0  # the framework's own per-micro-batch machinery (DeepSpeed's PipelineEngine)
    fwd: float = 0.0  # forward part, the window for overlapping parameter gathers
    bwd: float = 0.0  # backward part, the window for overlapping gradient reduction

    @property
    def total(self) -> float:
        return (
            self.compute + self.recompute + self.tp_comm + self.cp_comm + self.ep_comm + self.pp_comm + self.zero_comm
            + self.engine
        )


def _tp_comm_per_layer(model: ModelSpec, par: ParallelConfig, cluster: ClusterSpec) -> tuple[float, float]:
    """(forward, backward) TP communication of one layer: two all-reduces each way; with sequence parallelism
    2 x (all-gather + reduce-scatter) each way plus, in backward, the all-gather that re-forms the
    sequence-parallel input of each column-parallel GEMM for its weight gradient (megatron-core
    `LinearWithGradAccumulationAndAsyncCommunication`)."""
    if par.tp == 1:
        return 0.0, 0.0
    size = ACT * model.seq_length / par.cp * par.micro_batch_size * model.hidden_size
    cross = layout.tp_crosses_nodes(par, cluster)
    if par.sequence_parallel:
        gather = comm.collective_time("all_gather", size, par.tp, cluster, cross)
        scatter = comm.collective_time("reduce_scatter", size, par.tp, cluster, cross)
        return 2 * (gather + scatter), 2 * (gather + scatter) + 2 * gather
    reduce = 2 * comm.collective_time("all_reduce", size, par.tp, cluster, cross)
    return reduce, reduce


def _cp_comm_per_layer(model: ModelSpec, par: ParallelConfig, cluster: ClusterSpec) -> float:
    """Ring attention: each of the cp-1 steps passes the local K and V chunk to the next rank."""
    if par.cp == 1:
        return 0.0
    shape = attention_shape(model)
    kv_bytes = ACT * model.seq_length / par.cp * par.micro_batch_size * (shape.k_width + shape.v_width) / par.tp
    step = comm.collective_time("send_recv", kv_bytes, 2, cluster, layout.cp_crosses_nodes(par, cluster))
    return (par.cp - 1) * step


def _ep_comm_per_layer(model: ModelSpec, par: ParallelConfig, cluster: ClusterSpec, imbalance: float) -> float:
    """Forward dispatch + combine all-to-all of the routed tokens."""
    if par.ep == 1:
        return 0.0
    sp = par.tp if par.sequence_parallel and par.tp > 1 else 1
    size = ACT * model.seq_length / par.cp * par.micro_batch_size / sp * model.moe_router_topk * model.hidden_size
    cross = layout.ep_crosses_nodes(par, cluster)
    return 2 * imbalance * comm.collective_time("all_to_all", size, par.ep, cluster, cross)


def _p2p_per_microbatch(model: ModelSpec, par: ParallelConfig, cluster: ClusterSpec, training: TrainingSpec) -> float:
    """Activation send forward + gradient send backward, each TP rank sending its 1/t share: Megatron sends the
    sequence-parallel shard (or scatters and re-gathers, scatter_gather_tensors_in_pipeline); DeepSpeed's
    PipelineEngine partitions both over the TP group and all-gathers them on arrival (pipe_partitioned and
    grad_partitioned, on by default), which adds an intra-node all-gather each way."""
    if par.pp == 1:
        return 0.0
    full = ACT * model.seq_length / par.cp * par.micro_batch_size * model.hidden_size
    cross = layout.pp_crosses_nodes(par, cluster)
    one = comm.collective_time("send_recv", full / par.tp, 2, cluster, cross)
    if training.framework != "megatron" and par.tp > 1:
        one += comm.collective_time("all_gather", full, par.tp, cluster, layout.tp_crosses_nodes(par, cluster))
    if par.vpp > 1 and training.overlap_p2p_comm:  # hidden behind the next chunk; the latency stays
        return 2 * par.vpp * comm.latency(cluster, cross)
    return 2 * one


def _layer_part(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, moe: bool
) -> StageTime:
    lt = compute.layer_time(model, par, training, cluster.gpu, moe)
    imbalance = moe_imbalance(model, training)
    full = par.recompute == "full"
    passes = 3 if full else 2  # forward, backward (+ the recomputed forward)
    tp_fwd, tp_bwd = _tp_comm_per_layer(model, par, cluster)
    tp = tp_fwd * (2 if full else 1) + tp_bwd
    cp_fwd = _cp_comm_per_layer(model, par, cluster)
    cp = max(0.0, cp_fwd - lt.attention_fwd) * (2 if full else 1) + max(0.0, 2 * cp_fwd - 2.5 * lt.attention_fwd)
    ep = _ep_comm_per_layer(model, par, cluster, imbalance) * passes if moe else 0.0
    return StageTime(
        compute=lt.fwd + lt.bwd,
        recompute=lt.recompute,
        tp_comm=tp,
        cp_comm=cp,
        ep_comm=ep,
        fwd=lt.fwd,
        bwd=lt.bwd + lt.recompute,
    )


def stage_time(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    stage: int,
    dense: int,
    moe: int,
) -> StageTime:
    out = StageTime()
    for count, is_moe in ((dense, False), (moe, True)):
        if count:
            part = _layer_part(model, cluster, training, par, is_moe)
            for name in ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "fwd", "bwd"):
                setattr(out, name, getattr(out, name) + count * getattr(part, name))
    if stage == par.pp - 1:
        fwd, bwd = compute.output_layer_time(model, par, training, cluster.gpu)
        out.compute, out.fwd, out.bwd = out.compute + fwd + bwd, out.fwd + fwd, out.bwd + bwd
    out.pp_comm = _p2p_per_microbatch(model, par, cluster, training)
    if training.framework != "megatron" and par.pp > 1:
        out.engine = catalog.framework_constant("deepspeed_pipeline_engine", "microbatch_overhead_s")
    if deepspeed_uses_bf16_optimizer(training, par):
        out.compute += _fp32_accumulation(model, cluster, par, stage, dense, moe)
    if par.zero_stage == 3:
        out.zero_comm = _zero3_exposed(model, cluster, par, stage, dense, moe, out)
    elif par.zero_stage == 2 and par.dp > 1:
        out.zero_comm = _zero2_exposed(model, cluster, training, par, stage, dense, moe, out)
    return out


def _fp32_accumulation(
    model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig, stage: int, dense: int, moe: int
) -> float:
    """BF16_Optimizer folds each micro-batch's 16-bit gradients into its fp32 buffer and clears them
    (`update_hp_grads`): read 2 + read 4 + write 4 + clear 2 bytes per parameter, every micro-batch."""
    sp = stage_params(model, par, stage, dense, moe)
    return compute.stream_time(12.0 * (sp.dense + sp.expert), 2, cluster.gpu)


def _zero2_exposed(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    stage: int,
    dense: int,
    moe: int,
    st: StageTime,
) -> float:
    """ZeRO-2 reduce-scatters the gradients in every micro-batch's backward, overlapped (overlap_comm)."""
    sp = stage_params(model, par, stage, dense, moe)
    size = grad_bytes(training, par) * (sp.dense + sp.expert)
    scatter = comm.collective_time("reduce_scatter", size, par.dp, cluster, layout.dp_crosses_nodes(par, cluster))
    return max(0.0, scatter - st.bwd)


def _zero3_exposed(
    model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig, stage: int, dense: int, moe: int, st: StageTime
) -> float:
    """ZeRO-3 gathers the 16-bit parameters module by module in forward and again in backward and
    reduce-scatters the gradients in buckets, every micro-batch; prefetching overlaps them with compute
    (parameter offload adds the PCIe fetch of each rank's partition)."""
    sp = stage_params(model, par, stage, dense, moe)
    size = ACT * (sp.dense + sp.expert)
    cross = layout.dp_crosses_nodes(par, cluster)
    layers = max(1, dense + moe)
    gathers = 2 * comm.collective_time(
        "all_gather", size, par.dp, cluster, cross, calls=ZERO3_GATHERS_PER_LAYER * layers
    )
    buckets = math.ceil((sp.dense + sp.expert) / zero_buckets(model, 3).reduce_bucket_size)
    scatter = comm.collective_time("reduce_scatter", size, par.dp, cluster, cross, calls=buckets)
    pcie = 2 * size / par.dp / cluster.h2d_bw if par.offload_param != "none" else 0.0
    total = gathers + scatter + pcie
    first_layer = total / layers  # the first gather is not prefetched
    return comm.overlapped(total - first_layer, st.compute + st.recompute, cluster) + first_layer


def pipeline_time(
    groups: list[tuple[StageTime, int]], par: ParallelConfig, microbatches: int
) -> tuple[float, float, StageTime]:
    """(pipeline seconds, bubble seconds, the bottleneck stage) from (stage time, number of such stages)."""
    slow = max(groups, key=lambda g: g[0].total)[0]
    avg = sum(t.total * n for t, n in groups) / par.pp
    bubble = (par.pp - 1) * avg / par.vpp if par.pp > 1 else 0.0
    return microbatches * slow.total + bubble, bubble, slow


def _dp_exposed(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    first: StageTime,
    stage0_params: tuple[int, int],
) -> float:
    """Gradient reduction and parameter gathering left on the critical path after the last micro-batch."""
    dense, expert = stage0_params
    dense_n, expert_n = optimizer_shards(par, training.framework)
    cross = layout.dp_crosses_nodes(par, cluster)
    total = 0.0
    for params, n in ((dense, dense_n), (expert, expert_n)):
        if n <= 1 or params == 0:
            continue
        total += _sync_time(training, par, params, n, cluster, cross, first)
    if par.pp > 1 and not model.untie_embeddings_and_output_weights:  # tied embedding grads, first <-> last
        size = 4 * model.vocab_size * model.hidden_size / par.tp
        total += comm.collective_time("all_reduce", size, 2, cluster, layout.pp_crosses_nodes(par, cluster))
    return total


def grad_bytes(training: TrainingSpec, par: ParallelConfig) -> int:
    """Bytes per gradient element on the wire: Megatron reduces fp32 main grads under bf16
    (accumulate_allreduce_grads_in_fp32, rules.md sec. 1), as does DeepSpeed's BF16_Optimizer."""
    if training.precision == "fp16":
        return 2
    if training.framework == "megatron" or deepspeed_uses_bf16_optimizer(training, par):
        return 4
    return 2


def _sync_time(
    training: TrainingSpec,
    par: ParallelConfig,
    params: int,
    n: int,
    cluster: ClusterSpec,
    cross: bool,
    first: StageTime,
) -> float:
    if par.zero_stage == 3:
        return 0.0  # reduced and gathered per micro-batch (zero_comm)
    megatron = training.framework == "megatron"
    grads = grad_bytes(training, par) * params
    if megatron and not par.distributed_optimizer:
        reduce, gather = comm.collective_time("all_reduce", grads, n, cluster, cross), 0.0
    else:
        reduce = comm.collective_time("reduce_scatter", grads, n, cluster, cross)
        gather = comm.collective_time("all_gather", ACT * params, n, cluster, cross)
    if par.zero_stage == 2:
        reduce = 0.0  # reduce-scattered in every micro-batch's backward (zero_comm)
    overlapped = training.overlap_grad_reduce and (megatron or par.pp == 1)
    if overlapped:
        reduce = max(0.0, reduce - first.bwd)
        if megatron:  # --overlap-param-gather hides the gather behind the next forward
            gather = max(0.0, gather - first.fwd)
    return reduce + gather
