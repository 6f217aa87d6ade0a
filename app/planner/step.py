"""Step time: per-stage micro-batch time (device and host), the pipeline schedule, data-parallel sync, optimizer.

Overlap is modelled as what hides behind what (comm.exposed: the excess over the compute window is exposed and
the hidden part still costs the stack's `overlap_contention`), per stack capability:
- TP (Shoeybi et al. 2019; Korthikanti et al. 2022 sec. 4.2.2): two all-reduces per layer each way, or with
  sequence parallelism all-gathers and reduce-scatters of the same volume plus the backward re-gather of each
  column-parallel input for its weight gradient (megatron-core `LinearWithGradAccumulationAndAsyncCommunication`).
  With `--tp-comm-overlap` (Transformer Engine userbuffers) they run beside the layer's GEMMs; otherwise exposed.
  Full recompute repeats the forward ones.
- CP: ring (p2p) passes K and V around the `cp` ranks behind each chunk's attention (and dK, dV in backward);
  `a2a` (Ulysses) re-shards q, k, v and the output by heads with four all-to-alls, not overlapped; `all_gather`
  gathers K and V before attention and reduce-scatters their gradients; `a2a+p2p` does a2a inside the node and the
  ring across (megatron-core `TEDotProductAttention` cp_comm_type).
- EP: dispatch + combine all-to-all of the routed tokens per layer and pass; with
  `--overlap-moe-expert-parallel-comm` (combined 1F1B) one micro-batch's all-to-all hides behind another's compute.
- PP: one activation send forward and one gradient send backward per micro-batch and stage, each TP rank sending its
  share (Megatron scatters over TP; DeepSpeed's PipelineEngine partitions and re-gathers); hidden with interleaving.
- DP: Megatron reduces the main grads over DP x CP (all-reduce, or reduce-scatter + parameter all-gather with the
  distributed optimizer) in buckets behind the last micro-batch's backward (`--overlap-grad-reduce`) and the first
  forward (`--overlap-param-gather`); the last bucket is exposed. ZeRO-3 and FSDP gather parameters layer by layer in
  forward and backward and reduce-scatter gradients every micro-batch, prefetching one unit ahead (ZeRO paper sec. 7).
- Host: a stack whose CPU dispatches every operator (eager PyTorch, DeepSpeed's ZeRO-3 module hooks) can leave the
  GPU waiting at small micro-batches; each stage's micro-batch takes the longer of its device and host times.
- Optimizer: the Adam implementation streams its bytes per parameter of the shard through HBM (fused Adam ~30 B;
  torch's foreach AdamW ~80 B plus DeepSpeed's flatten, upcast, norm, clip and copy-back ~34 B), plus the stack's
  host time per step; offloaded Adam runs at the node's CPU Adam rate after PCIe copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.planner import comm, compute, layout
from app.planner.activations import ACT, layer_bytes, moe_imbalance, routed_tokens
from app.planner.attention import attention_shape
from app.planner.layout import StageShape
from app.planner.memory import (
    deepspeed_uses_bf16_optimizer,
    reduce_dtype,
    stage_params,
    zero_buckets,
    zero_overlap_comm,
)
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.stack import GenerationCosts

ZERO3_MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance, DeepSpeed's default (not rendered)
ZERO3_GATHERS_PER_LAYER = 4  # one all-gather per linear module (QKV, projection, fc1, fc2)
MEGATRON_BUCKET_PARAMS = 40_000_000  # DistributedDataParallelConfig.bucket_size default (max(40M, 1M x dp))
OPTIMIZER_BYTES = {"fused-adam": 30.0, "torch-adamw": 80.0, "per-tensor-adamw": 80.0}
ZERO_STEP_BYTES = 34.0  # DeepSpeed ZeRO-1/2 step: flatten (4) + upcast (6) + norm (4) + clip (8) + copy back (6) + zero
MODULES_PER_LAYER = {"hf-eager": 9, "megatron": 6, "mpt": 6}  # parameterised modules a ZeRO-3 hook fires on


@dataclass(slots=True)
class StageTime:
    """Seconds of one micro-batch (forward + backward) on one stage, by cause, and the host time it needs."""

    compute: float = 0.0
    recompute: float = 0.0
    tp_comm: float = 0.0
    cp_comm: float = 0.0
    ep_comm: float = 0.0
    pp_comm: float = 0.0
    zero_comm: float = 0.0
    engine: float = 0.0  # the framework's own per-micro-batch machinery (DeepSpeed's PipelineEngine)
    offload: float = 0.0  # activation copies to and from the host that the compute does not hide
    host_wait: float = 0.0  # device idle while the CPU dispatches (host-bound micro-batches)
    fwd: float = 0.0  # forward part, the window for overlapping parameter gathers
    bwd: float = 0.0  # backward part, the window for overlapping gradient reduction
    host: float = 0.0  # CPU time the micro-batch needs

    @property
    def device(self) -> float:
        return (
            self.compute
            + self.recompute
            + self.tp_comm
            + self.cp_comm
            + self.ep_comm
            + self.pp_comm
            + self.zero_comm
            + self.engine
            + self.offload
        )

    @property
    def total(self) -> float:
        return self.device + self.host_wait


def _tp_comm(
    model: ModelSpec, par: ParallelConfig, cluster: ClusterSpec, lt: compute.LayerTime, costs: GenerationCosts
) -> tuple[float, float]:
    """(forward, backward) exposed TP communication of one layer."""
    if par.tp == 1:
        return 0.0, 0.0
    size = ACT * model.seq_length / par.cp * par.micro_batch_size * model.hidden_size
    g = layout.tp_group(par, cluster)
    if par.sequence_parallel:
        gather = comm.collective_time("all_gather", size, g, cluster)
        scatter = comm.collective_time("reduce_scatter", size, g, cluster)
        fwd, bwd = 2 * (gather + scatter), 2 * (gather + scatter) + 2 * gather
    else:
        fwd = bwd = 2 * comm.collective_time("all_reduce", size, g, cluster)
    if par.tp_comm_overlap:
        return comm.exposed(fwd, lt.gemm_fwd, costs.overlap_contention), comm.exposed(
            bwd, 2 * lt.gemm_fwd, costs.overlap_contention
        )
    return fwd, bwd


def _cp_comm(
    model: ModelSpec, par: ParallelConfig, cluster: ClusterSpec, lt: compute.LayerTime, costs: GenerationCosts
) -> tuple[float, float]:
    """(forward, backward) exposed context-parallel communication of one layer."""
    if par.cp == 1:
        return 0.0, 0.0
    shape = attention_shape(model)
    local = model.seq_length / par.cp * par.micro_batch_size
    kv = ACT * local * (shape.k_width + shape.v_width) / par.tp
    qkvo = ACT * local * (shape.q_width + shape.k_width + shape.v_width + shape.out_in) / par.tp
    g = layout.cp_group(par, cluster)
    c = costs.overlap_contention
    if par.cp_comm_type == "a2a":
        t = comm.collective_time("all_to_all", qkvo, g, cluster, calls=4)
        return t, t
    if par.cp_comm_type == "all_gather":
        gather = comm.collective_time("all_gather", kv * par.cp, g, cluster)
        scatter = comm.collective_time("reduce_scatter", kv * par.cp, g, cluster)
        return gather, gather + scatter
    if par.cp_comm_type == "a2a+p2p" and par.hierarchical_cp_sizes:
        inner, outer = par.hierarchical_cp_sizes
        a2a = comm.collective_time("all_to_all", qkvo, comm.group(inner, par.tp, cluster), cluster, calls=4)
        ring_g = comm.group(outer, par.tp * inner, cluster)
        step = comm.collective_time("send_recv", kv * inner, ring_g, cluster)
        ring = (outer - 1) * step
        return a2a + comm.exposed(ring, lt.attention_fwd, c), a2a + comm.exposed(2 * ring, lt.attention_bwd, c)
    step = comm.collective_time("send_recv", kv, comm.Group(2, 1 if g.crosses else 2, 2 if g.crosses else 1), cluster)
    ring = (par.cp - 1) * step
    return comm.exposed(ring, lt.attention_fwd, c), comm.exposed(2 * ring, lt.attention_bwd, c)


def _ep_comm(
    model: ModelSpec,
    par: ParallelConfig,
    cluster: ClusterSpec,
    training: TrainingSpec,
    lt: compute.LayerTime,
    costs: GenerationCosts,
) -> float:
    """Dispatch + combine all-to-all of the routed tokens, every pass (forward, backward, recomputed forward)."""
    if par.ep == 1:
        return 0.0
    per_rank = ACT * routed_tokens(model, par, training) / par.expert_tp * model.hidden_size
    one = 2 * comm.collective_time("all_to_all", per_rank, layout.ep_group(par, cluster), cluster)
    passes = 3 if par.recompute == "full" else 2
    total = one * passes
    if par.moe_ep_overlap:  # combined 1F1B: one micro-batch's all-to-all behind another's attention and MLP
        return comm.exposed(total, lt.fwd + lt.bwd, costs.overlap_contention)
    return total


def _p2p(model: ModelSpec, par: ParallelConfig, cluster: ClusterSpec, training: TrainingSpec) -> float:
    """Activation send forward + gradient send backward, each TP rank sending its 1/t share; DeepSpeed's
    PipelineEngine partitions both over the TP group and all-gathers them on arrival."""
    if par.pp == 1:
        return 0.0
    full = ACT * model.seq_length / par.cp * par.micro_batch_size * model.hidden_size
    g = layout.pp_group(par, cluster)
    pair = comm.Group(2, 1 if g.crosses else 2, 2 if g.crosses else 1)
    one = comm.collective_time("send_recv", full / par.tp, pair, cluster)
    if training.software.can.pipeline == "deepspeed" and par.tp > 1:
        one += comm.collective_time("all_gather", full, layout.tp_group(par, cluster), cluster)
    if par.vpp > 1 and training.overlap_p2p_comm:  # hidden behind the next chunk; the latency stays
        return 2 * par.vpp * comm.latency("send_recv", pair, cluster)
    return 2 * one


def _layer_part(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, moe: bool, recomputed: float
) -> StageTime:
    """One layer's share of a micro-batch; `recomputed` is the fraction of such layers fully recomputed."""
    costs = training.software.generation(cluster.gpu.generation)
    lt = compute.layer_time(model, par, training, cluster.gpu, costs, moe)
    tp_f, tp_b = _tp_comm(model, par, cluster, lt, costs)
    cp_f, cp_b = _cp_comm(model, par, cluster, lt, costs)
    full = par.recompute == "full"
    repeat = recomputed if full else 0.0
    recompute = lt.recompute * (recomputed if full else 1.0)
    ep = _ep_comm(model, par, cluster, training, lt, costs) if moe else 0.0
    ops = lt.ops_fwd * (3 + (repeat if full else (1 if par.recompute == "selective" else 0)))
    hooks = 0.0
    if par.zero_stage == 3 and training.software.costs.zero3_module_hook_s:
        modules = MODULES_PER_LAYER[training.software.costs.activation_layout]
        hooks = modules * training.software.costs.zero3_module_hook_s * (2 + repeat)
    return StageTime(
        compute=lt.fwd + lt.bwd,
        recompute=recompute,
        tp_comm=tp_f * (1 + repeat) + tp_b,
        cp_comm=cp_f * (1 + repeat) + cp_b,
        ep_comm=ep,
        fwd=lt.fwd,
        bwd=lt.bwd + recompute,
        host=ops * costs.host_op_s + hooks,
    )


def layer_floor(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, moe: bool, comm: bool = True
) -> float:
    """One layer's micro-batch time that no recomputation, sharding, host or pipeline choice can remove: its compute
    and (with `comm`) its exposed TP, CP and EP communication without recomputation (cached per layer; a search
    bound). The compute alone never grows per sequence with the micro-batch: every GEMM, attention and element-wise
    term is linear in the tokens or amortises a fixed cost over them."""

    def floor() -> float:
        part = _layer_part(model, cluster, training, par, moe, 0.0)
        return part.compute + (part.tp_comm + part.cp_comm + part.ep_comm if comm else 0.0)

    return model.memo(("layer_floor", par.layer_key, moe, comm), floor, cluster, training)


def stage_recompute_floor(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, shape: StageShape, moe: bool
) -> float:
    """One layer's recomputation time on a stage (its share of fully recomputed layers, or the selective modules),
    cached per layer and share: what a plan's recomputation adds to `layer_floor`."""
    fraction = _recomputed_fraction(par, shape) if shape.layers else 0.0
    return model.memo(
        ("recompute_floor", par.layer_key, moe, fraction),
        lambda: _layer_part(model, cluster, training, par, moe, fraction).recompute,
        cluster,
        training,
    )


def stage_time(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
) -> StageTime:
    out = StageTime()
    layers = dense + moe
    recomputed = _recomputed_fraction(par, shape) if layers else 0.0
    for count, is_moe in ((dense, False), (moe, True)):
        if count:
            part = _layer_part(model, cluster, training, par, is_moe, recomputed)
            for name in ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "fwd", "bwd", "host"):
                setattr(out, name, getattr(out, name) + count * getattr(part, name))
    costs = training.software.generation(cluster.gpu.generation)
    if shape.loss:  # the main logits and each MTP layer's, through the one output layer
        fwd, bwd = compute.output_layer_time(model, par, training, cluster.gpu, costs)
        heads = 1 + model.mtp_num_layers
        out.compute, out.fwd, out.bwd = out.compute + heads * (fwd + bwd), out.fwd + heads * fwd, out.bwd + heads * bwd
        out.host += 12 * heads * costs.host_op_s
    if shape.mtp:
        fwd, bwd = compute.mtp_proj_time(model, par, training, cluster.gpu, costs)
        fwd, bwd = shape.mtp * fwd, shape.mtp * bwd
        out.compute, out.fwd, out.bwd = out.compute + fwd + bwd, out.fwd + fwd, out.bwd + bwd
    out.pp_comm = _p2p(model, par, cluster, training)
    if par.pp > 1:
        out.engine = training.software.costs.pipeline_microbatch_overhead_s
    if deepspeed_uses_bf16_optimizer(training, par):
        out.compute += _fp32_accumulation(model, cluster, training, par, shape, dense, moe)
    if per_layer_gathers(training, par) and layers:
        out.zero_comm = _gather_per_layer_exposed(model, cluster, training, par, shape, dense, moe, out)
    elif scatters_per_microbatch(par):
        out.zero_comm = _zero2_exposed(model, cluster, training, par, shape, dense, moe, out)
    if par.cpu_offloading_num_layers and layers:
        out.offload = _activation_offload_exposed(model, cluster, training, par, dense, moe, out)
    out.host_wait = max(0.0, out.host - out.device)
    return out


def _activation_offload_exposed(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    dense: int,
    moe: int,
    st: StageTime,
) -> float:
    """Activation offload: each offloaded layer's saved tensors go to the host on a side stream during the
    forward and come back, prefetched a layer ahead, during the backward (TE cpu_offload.py). Copy engines move
    them beside the compute, so only what a pass's transfers exceed its compute by is exposed."""
    layers = dense + moe
    kept = sum(n * layer_bytes(model, par, training, moe=is_moe) for n, is_moe in ((dense, False), (moe, True)) if n)
    mean = kept / layers
    transfer = min(par.cpu_offloading_num_layers or 0, layers) * mean / cluster.h2d_bw
    return max(0.0, transfer - st.fwd) + max(0.0, transfer - st.bwd)


def per_layer_gathers(training: TrainingSpec, par: ParallelConfig) -> bool:
    """Whether parameters are gathered unit by unit in every micro-batch (ZeRO-3, FSDP, Megatron-FSDP's
    optim_grads_params)."""
    return "fsdp" in training.software.can.sharding or par.zero_stage == 3 or par.megatron_fsdp == "optim_grads_params"


def scatters_per_microbatch(par: ParallelConfig) -> bool:
    """Whether gradients are reduce-scattered in every micro-batch's backward (ZeRO-2, Megatron-FSDP optim_grads)."""
    return (par.zero_stage == 2 and par.dp > 1) or (par.megatron_fsdp == "optim_grads" and par.dp * par.cp > 1)


def moves_per_microbatch(training: TrainingSpec, par: ParallelConfig) -> bool:
    """Whether the sharding moves parameters or gradients in every micro-batch (`sharding_floor` is not 0)."""
    return per_layer_gathers(training, par) or scatters_per_microbatch(par)


def _shard_group(par: ParallelConfig, cluster: ClusterSpec, training: TrainingSpec) -> comm.Group:
    """The group parameters and gradients are sharded over: DP x CP for Megatron (and Megatron-FSDP), DP else."""
    if par.megatron_fsdp:
        return railed(layout.dp_cp_group(par, cluster), training)
    return railed(layout.dp_group(par, cluster), training)


def _recomputed_fraction(par: ParallelConfig, shape: StageShape) -> float:
    """Share of a stage's layers fully recomputed (`--recompute-num-layers` per chunk with the block method)."""
    if par.recompute != "full":
        return 0.0
    if par.recompute_method == "block" and par.recompute_num_layers is not None:
        per_chunk = shape.layers / max(1, len(shape.chunks))
        return min(1.0, par.recompute_num_layers / per_chunk) if per_chunk else 0.0
    return 1.0


def _fp32_accumulation(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
) -> float:
    """BF16_Optimizer folds each micro-batch's 16-bit gradients into its fp32 buffer and clears them
    (`update_hp_grads`): read 2 + read 4 + write 4 + clear 2 bytes per parameter, every micro-batch."""
    sp = stage_params(model, par, shape, dense, moe)
    costs = training.software.generation(cluster.gpu.generation)
    return compute.stream_time(12.0 * sp.total, 2, cluster.gpu, costs)


def grad_bytes(training: TrainingSpec, par: ParallelConfig) -> int:
    """Bytes per gradient element on the wire: fp32 main grads under bf16 unless reduced in bf16
    (accumulate_allreduce_grads_in_fp32, rules.md sec. 1), as DeepSpeed's BF16_Optimizer does."""
    if training.precision == "fp16":
        return 2
    if training.software.can.sharding == ("zero",):
        return 4 if deepspeed_uses_bf16_optimizer(training, par) else 2
    return 4 if reduce_dtype(training, par) == "fp32" else 2


def _zero2_exposed(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
    st: StageTime,
) -> float:
    """ZeRO-2 (and Megatron-FSDP optim_grads) reduce-scatter the gradients in every micro-batch's backward,
    overlapped (overlap_comm; FSDP's grad-reduce pipeline)."""
    scatter = _zero2_traffic(model, cluster, training, par, shape, dense, moe)
    costs = training.software.generation(cluster.gpu.generation)
    return comm.exposed(scatter, st.bwd if zero_overlap_comm(2) else 0.0, costs.overlap_contention)


def _zero2_traffic(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
) -> float:
    def scatter() -> float:
        size = grad_bytes(training, par) * stage_params(model, par, shape, dense, moe).total
        return comm.collective_time("reduce_scatter", size, _shard_group(par, cluster, training), cluster)

    return model.memo(("zero2_traffic", par.state_key, dense, moe), scatter, cluster, training, shape)


def _gather_per_layer_exposed(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
    st: StageTime,
) -> float:
    """ZeRO-3 / FSDP: the 16-bit parameters are all-gathered unit by unit in forward and again in backward (and in
    a recomputed forward), the gradients reduce-scattered unit by unit, every micro-batch; prefetching hides each
    unit's traffic behind the previous unit's compute, the first gather is exposed. Parameter offload adds the
    PCIe fetch of each rank's partition. DeepSpeed ZeRO-3 on dense layers is timed module by module
    (`_zero3_module_exposed`); FSDP's units are whole layers, alike, so their traffic pools behind the step."""
    if par.zero_stage == 3 and not moe:
        return _zero3_module_exposed(model, cluster, training, par, shape, dense, st)
    layers = max(1, dense + moe)
    regather = zero3_regathered_fraction(model, par) if par.zero_stage == 3 else 1.0
    passes = 2 + (_recomputed_fraction(par, shape) * regather if par.recompute == "full" else 0.0)
    gather, rest = _gather_per_layer_traffic(model, cluster, training, par, shape, dense, moe)
    total = passes * gather + rest
    first = total / (layers * passes)  # the first unit's gather is not prefetched
    costs = training.software.generation(cluster.gpu.generation)
    return comm.exposed(total - first, st.compute + st.recompute, costs.overlap_contention) + first


def _zero3_module_exposed(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    st: StageTime,
) -> float:
    """DeepSpeed ZeRO-3, phase by phase and prefetch unit by prefetch unit. The coordinator prefetches parameters
    of the coming modules only until `stage3_prefetch_bucket_size` elements are in flight
    (partitioned_param_coordinator.py `fetch_sub_module`), and a linear of a large layer is bigger than that bucket,
    so a unit's gather hides only behind the compute of the unit before it, in its own phase: forward, the
    recomputed forward, backward (which also carries the reduce-scatter of the unit behind). A unit whose compute
    is shorter than its neighbour's traffic waits: `sum_i max(c_i, g_next(i))` per phase, not `max(C, G)` over
    the step, which is what the pooled form charged (it hid forward gathers behind backward compute). Compute is
    shared among the units by parameters (every GEMM's FLOPs are 2 x tokens x its parameters); the first unit's
    gather is exposed; the hidden part costs the stack's `overlap_contention`."""
    units = zero3_units(model, par)
    layers = max(1, dense)
    gather, rest = _gather_per_layer_traffic(model, cluster, training, par, shape, dense, 0)
    size = sum(u for u, _ in units)
    g, r = gather / (layers * size), rest / (layers * size)  # seconds per element, per layer
    rho = _recomputed_fraction(par, shape) if par.recompute == "full" else 0.0
    bwd = st.bwd - st.recompute
    gamma = training.software.generation(cluster.gpu.generation).overlap_contention
    # the backward gathers again what its forward released: every unit after a plain forward, the units a
    # recomputed forward released (`zero3_regathered_fraction`) after a recomputed one
    bwd_in = [(u, rho * again + (1 - rho)) for u, again in reversed(units)]
    phases = [
        ([(u, 1.0) for u, _ in units], st.fwd, False),
        ([(u, rho) for u, _ in units], st.recompute, False),
        (bwd_in, bwd, True),
    ]
    exposed = 0.0
    for order, window, scatters in phases:
        n = len(order)
        if window <= 0.0 and not scatters:
            continue
        for i, (u, _) in enumerate(order):
            ahead, share = order[(i + 1) % n]
            traffic = g * ahead * share + (r * order[i - 1][0] if scatters else 0.0)
            exposed += comm.exposed(traffic * layers, window * u / size, gamma)
    return exposed + _zero3_first_gather(model, par, gather, layers)


def _zero3_first_gather(model: ModelSpec, par: ParallelConfig, gather: float, layers: int) -> float:
    """The first prefetch unit's all-gather, which nothing before it hides (`gather`: one pass over `layers`)."""
    units = zero3_units(model, par)
    return gather * units[0][0] / (layers * sum(u for u, _ in units))


def zero3_units(model: ModelSpec, par: ParallelConfig) -> tuple[tuple[int, float], ...]:
    """A layer's ZeRO-3 prefetch units in forward order: (elements per tensor-parallel rank, 1 if a recomputed
    forward's backward gathers it again else 0). A unit is a linear module, merged with the ones after it until it
    holds `stage3_prefetch_bucket_size` elements (what one prefetch puts in flight); norms and biases are too
    small to matter and are left out."""

    def units() -> tuple[tuple[int, float], ...]:
        h, ffn = model.hidden_size, model.ffn_hidden_size or 4 * model.hidden_size
        sizes = [lin.shard(par.tp) for lin in attention_shape(model).linears]
        sizes += [h * (2 * ffn if model.swiglu else ffn) // par.tp, ffn * h // par.tp]
        again, behind = [0.0] * len(sizes), 0
        for i in reversed(range(len(sizes))):  # see zero3_regathered_fraction
            again[i] = 1.0 if 2 * behind >= ZERO3_MAX_REUSE_DISTANCE else 0.0
            behind += sizes[i]
        bucket = zero_buckets(model, 3).prefetch_bucket_size
        out: list[tuple[int, float]] = []
        held, weighted = 0, 0.0
        for s, a in zip(sizes, again, strict=True):
            held, weighted = held + s, weighted + s * a
            if held >= bucket:
                out.append((held, weighted / held))
                held, weighted = 0, 0.0
        if held:
            out.append((held, weighted / held))
        return tuple(out)

    return model.memo(("zero3_units", par.tp), units)


def zero3_regathered_fraction(model: ModelSpec, par: ParallelConfig) -> float:
    """Share of a layer's parameters DeepSpeed ZeRO-3 all-gathers a third time when the layer is recomputed. After
    a module runs, the coordinator releases its parameters unless they are used again within
    `stage3_max_reuse_distance` elements of the recorded module order (partitioned_param_coordinator.py
    `__params_to_release`; default 1e9, zero/config.py, and the rendered ds_config.json leaves it there). A
    recomputed forward runs the layer's modules in order and its backward then runs them in reverse, so module i
    comes back after twice the parameters of the modules behind it: kept when that is under the distance, gathered
    again for the backward otherwise. Small layers keep everything (no third gather); a GPT-3 175B or 530B layer
    gathers all but its last linear again. Per tensor-parallel rank (`ds_numel`; `zero3_units`)."""
    units = zero3_units(model, par)
    return sum(u * again for u, again in units) / max(1, sum(u for u, _ in units))


def _gather_per_layer_traffic(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
) -> tuple[float, float]:
    """(seconds of one pass of unit-by-unit gathers of the 16-bit parameters, seconds of the rest of a
    micro-batch's traffic: the gradients' reduce-scatter and, under parameter offload, the PCIe fetch); cached per
    stage and model-state fields (no micro-batch size, recomputation or overlap moves a byte of it)."""

    def traffic() -> tuple[float, float]:
        sp = stage_params(model, par, shape, dense, moe)
        layers = max(1, dense + moe)
        g = _shard_group(par, cluster, training)
        zero3 = par.zero_stage == 3
        calls = ZERO3_GATHERS_PER_LAYER * layers if zero3 else layers
        size = ACT * sp.total
        gather = comm.collective_time("all_gather", size, g, cluster, calls=calls)
        grad = grad_bytes(training, par) * sp.total
        buckets = math.ceil(sp.total / zero_buckets(model, 3).reduce_bucket_size) if zero3 else layers
        scatter = comm.collective_time("reduce_scatter", grad, g, cluster, calls=buckets)
        pcie = 2 * size / par.dp / cluster.h2d_bw if par.offload_param != "none" else 0.0
        return gather, scatter + pcie

    return model.memo(("gather_traffic", par.state_key, dense, moe), traffic, cluster, training, shape)


def sharding_floor(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
    window: float,
) -> float:
    """The least a stage's per-micro-batch sharding traffic (ZeRO-2/3, FSDP) adds to a micro-batch whose compute
    and recomputation take at least `window` seconds (a search bound). `stage_time` charges the window plus the
    traffic it cannot hide plus the contention of what it hides (and the first unit's gather), which only grows
    with the window, the traffic and the recomputed gather pass; so the traffic of two passes exposed against
    `window` is never more than a plan with this sharding pays, at any recomputation."""
    costs = training.software.generation(cluster.gpu.generation)
    if per_layer_gathers(training, par):
        layers = dense + moe
        if not layers:
            return 0.0
        gather, rest = _gather_per_layer_traffic(model, cluster, training, par, shape, dense, moe)
        total = 2 * gather + rest
        if par.zero_stage == 3 and not moe:
            # unit by unit, phase by phase, exposes at least the pooled traffic against the whole window, plus the
            # first unit's gather (`_zero3_module_exposed`)
            first = _zero3_first_gather(model, par, gather, layers)
            return comm.exposed(total, window, costs.overlap_contention) + first
        return comm.exposed(total - total / (2 * layers), window, costs.overlap_contention) + gather / layers
    if scatters_per_microbatch(par):  # exposed behind the backward, which is part of the window
        scatter = _zero2_traffic(model, cluster, training, par, shape, dense, moe)
        return comm.exposed(scatter, window, costs.overlap_contention)
    return 0.0


def dp_exposed(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    st: StageTime,
    sp: tuple[int, int],
) -> float:
    """Gradient reduction and parameter gathering left on the critical path after the last micro-batch."""
    if per_layer_gathers(training, par):
        return 0.0  # reduced and gathered per micro-batch (zero_comm)
    dense, expert = sp
    total = 0.0
    groups = [(dense, layout.dp_cp_group(par, cluster) if _megatron(training) else layout.dp_group(par, cluster))]
    if expert:
        groups.append((expert, layout.expert_dp_group(par, cluster)))
    for params, g in groups:
        if g.size > 1 and params:
            total += _sync_time(training, par, params, railed(g, training), cluster, st)
    if par.pp > 1 and not model.untie_embeddings_and_output_weights:  # tied embedding grads, first <-> last
        size = grad_bytes(training, par) * model.vocab_size * model.hidden_size / par.tp
        pair = layout.pp_group(par, cluster)
        total += comm.collective_time(
            "all_reduce", size, comm.Group(2, 1, 2) if pair.crosses else comm.Group(2, 2, 1), cluster
        )
    return total


def railed(g: comm.Group, training: TrainingSpec) -> comm.Group:
    """The group as the stack's collectives use the network (data/stacks.json `network_rails`)."""
    if training.software.costs.network_rails == "one" and g.crosses:
        return comm.Group(g.size, g.per_domain, g.domains, rails=1)
    return g


def _megatron(training: TrainingSpec) -> bool:
    return "distributed_optimizer" in training.software.can.sharding


def _sync_time(
    training: TrainingSpec, par: ParallelConfig, params: int, g: comm.Group, cluster: ClusterSpec, st: StageTime
) -> float:
    costs = training.software.generation(cluster.gpu.generation)
    grads = grad_bytes(training, par) * params
    sharded = par.distributed_optimizer or par.zero_stage >= 1
    if not sharded:
        reduce, gather = comm.collective_time("all_reduce", grads, g, cluster), 0.0
    else:
        # BF16_Optimizer: the engine all-reduces the fp32 gradients whole (runtime/pipe/engine.py _bf16_reduce_grads
        # and engine.py allreduce_gradients -> buffered_allreduce_fallback, no reduce-scatter); either way each rank
        # steps its partition and all-gathers the 16-bit parameters (bf16_optimizer.py step -> all_gather_dp_groups)
        op: comm.Op = "all_reduce" if deepspeed_uses_bf16_optimizer(training, par) else "reduce_scatter"
        reduce = comm.collective_time(op, grads, g, cluster)
        gather = comm.collective_time("all_gather", ACT * params, g, cluster)
    if par.zero_stage == 2 or par.megatron_fsdp == "optim_grads":
        reduce = 0.0  # reduce-scattered in every micro-batch's backward (zero_comm)
    if not (training.overlap_grad_reduce and training.software.can.overlap_grad_reduce):
        return reduce + gather
    if training.software.can.pipeline == "deepspeed" and par.pp > 1:
        return reduce + gather  # the PipelineEngine reduces after the last backward
    if par.zero_stage == 1:
        return reduce + gather  # overlap_comm is off for ZeRO-1 as rendered: reduced in blocking hooks
    bucket = min(1.0, max(MEGATRON_BUCKET_PARAMS, 1_000_000 * g.size) / max(params, 1))
    exposed_reduce = comm.exposed(reduce * (1 - bucket), st.bwd, costs.overlap_contention) + reduce * bucket
    if training.software.can.overlap_param_gather and par.distributed_optimizer:
        gather = comm.exposed(gather, st.fwd, costs.overlap_contention)
    return exposed_reduce + gather


def optimizer_times(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    stage_params_list: list[tuple[int, int]],
) -> tuple[float, float]:
    """(GPU optimizer step with the stack's host time per step, exposed offload work) for the slowest stage."""
    from app.planner.memory import megatron_optimizer_bytes, optimizer_shards

    dense_n, expert_n = optimizer_shards(par, training)
    sharded = par.distributed_optimizer or par.zero_stage >= 1 or "fsdp" in training.software.can.sharding
    costs = training.software.generation(cluster.gpu.generation)
    per_param = OPTIMIZER_BYTES[training.software.costs.optimizer]
    if training.software.can.sharding == ("zero",):
        per_param += ZERO_STEP_BYTES
    if training.optimizer_states != "fp32":  # the smaller states are read and written once each
        per_param -= 2 * (12.0 - megatron_optimizer_bytes(training, par))
    worst_gpu = worst_offload = 0.0
    local = min(cluster.gpus_per_node, par.world_size)
    hbm = cluster.gpu.hbm_bw * cluster.gpu.efficiency.hbm
    for dense, expert in stage_params_list:
        shard = (dense / dense_n + expert / expert_n) if sharded else dense + expert
        total = dense + expert
        if par.offload_optimizer == "none":
            gpu = (per_param * shard + 8.0 * total) / hbm  # + grad norm read and zeroing over the whole buffer
            worst_gpu = max(worst_gpu, gpu)
            continue
        pcie = 4 * shard / cluster.h2d_bw  # 16-bit grads down, 16-bit params up
        cpu = shard * local / cluster.cpu_adam_params_per_s
        nvme = 2 * 16 * shard * local / (cluster.nvme_GBps * 1e9) if par.offload_optimizer == "nvme" else 0.0
        worst_offload = max(worst_offload, pcie + cpu + nvme)
    return worst_gpu + costs.host_step_s, worst_offload


__all__ = [
    "StageTime",
    "dp_exposed",
    "grad_bytes",
    "moe_imbalance",
    "moves_per_microbatch",
    "optimizer_times",
    "sharding_floor",
    "stage_time",
]
