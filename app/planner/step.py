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
- EP: dispatch + combine all-to-all of the routed tokens per layer and pass (dispatch.py: one copy per expert with
  `alltoall`, one per GPU and per node with DeepEP/HybridEP `flex`); with
  `--overlap-moe-expert-parallel-comm` (combined 1F1B) one micro-batch's all-to-all hides behind another's compute.
- PP: one activation send forward and one gradient send backward per micro-batch and stage, each TP rank sending its
  share (Megatron scatters over TP; DeepSpeed's PipelineEngine partitions and re-gathers); hidden with interleaving.
- DP and sharded states (traffic.py): the gradient reduce and parameter gather of Megatron's DDP and distributed
  optimizer, Megatron-FSDP, ZeRO and FSDP, per micro-batch and per step.
- Host: a stack whose CPU dispatches every operator (eager PyTorch, DeepSpeed's ZeRO-3 module hooks) can leave the
  GPU waiting at small micro-batches; each stage's micro-batch takes the longer of its device and host times.
- Optimizer: the Adam implementation streams its bytes per parameter of the shard through HBM (fused Adam ~30 B;
  torch's foreach AdamW ~80 B plus DeepSpeed's flatten, upcast, norm, clip and copy-back ~34 B), plus the stack's
  host time per step; offloaded Adam runs at the node's CPU Adam rate after PCIe copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner import comm, compute, dispatch, layout
from app.planner.activations import ACT, layer_bytes, routed_tokens
from app.planner.attention import attention_shape
from app.planner.layout import StageShape
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.stack import GenerationCosts
from app.planner.states import (
    accumulates_on_host,
    deepspeed_uses_bf16_optimizer,
    megatron_optimizer_bytes,
    optimizer_shards,
)
from app.planner.traffic import (
    fp32_accumulation,
    gather_per_layer_exposed,
    per_layer_gathers,
    recomputed_fraction,
    scatters_per_microbatch,
    zero2_exposed,
)

OPTIMIZER_BYTES = {"fused-adam": 30.0, "torch-adamw": 80.0, "per-tensor-adamw": 80.0}
ZERO_STEP_BYTES = 34.0  # DeepSpeed ZeRO-1/2 step: flatten (4) + upcast (6) + norm (4) + clip (8) + copy back (6) + zero
MODULES_PER_LAYER = {"hf-eager": 9, "megatron": 6, "mpt": 6}  # parameterised modules a ZeRO-3 hook fires on
MLP_MODULES = {"hf-eager": 3, "megatron": 2, "mpt": 2}  # of which the MLP's linears


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
    fwd: float = 0.0  # forward compute, the window for overlapping parameter gathers
    bwd: float = 0.0  # backward compute (and recomputation), the window for overlapping gradient reduction
    host: float = 0.0  # CPU time the micro-batch needs
    # exposed TP / CP / EP communication of each pass whose group stays inside the NVLink domain: a collective over
    # the NICs runs beside it on another link
    fwd_side: float = 0.0
    bwd_side: float = 0.0

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

    def window(self, backward: bool, over_nics: bool) -> float:
        """The wall time of the micro-batch's backward (or forward) pass that a data-parallel collective runs beside:
        its compute, its share of the host waits (the GPU idles on the CPU), and, for a collective over the NICs,
        the pass's exposed communication inside the NVLink domain (another link). Not the exposed communication
        that shares the collective's link: the two would split its bandwidth. More compute or faster links never
        shrink one pass's wall time by more than they shrink the step, so no overlap can make a faster GPU slower."""
        compute = self.bwd if backward else self.fwd
        side = (self.bwd_side if backward else self.fwd_side) if over_nics else 0.0
        both = self.fwd + self.bwd
        return compute + side + (self.host_wait * compute / both if both > 0 else 0.0)


def _tp_comm(
    model: ModelSpec, par: ParallelConfig, cluster: ClusterSpec, lt: compute.LayerTime, costs: GenerationCosts
) -> tuple[tuple[float, float], float]:
    """((forward, backward) exposed TP communication of one layer, what of it userbuffers hide behind the layer's
    GEMMs in both passes)."""
    if par.tp == 1:
        return (0.0, 0.0), 0.0
    size = ACT * model.seq_length / par.cp * par.micro_batch_size * model.hidden_size
    g = layout.tp_group(par, cluster)
    if par.sequence_parallel:
        gather = comm.collective_time("all_gather", size, g, cluster)
        scatter = comm.collective_time("reduce_scatter", size, g, cluster)
        fwd, bwd = 2 * (gather + scatter), 2 * (gather + scatter) + 2 * gather
    else:
        fwd = bwd = 2 * comm.collective_time("all_reduce", size, g, cluster)
    if par.tp_comm_overlap:
        c = costs.overlap_contention
        hidden = min(fwd, lt.gemm_fwd) + min(bwd, 2 * lt.gemm_fwd)
        return (comm.exposed(fwd, lt.gemm_fwd, c), comm.exposed(bwd, 2 * lt.gemm_fwd, c)), hidden
    return (fwd, bwd), 0.0


def _cp_comm(
    model: ModelSpec,
    par: ParallelConfig,
    cluster: ClusterSpec,
    lt: compute.LayerTime,
    costs: GenerationCosts,
    impl: str = "te",
) -> tuple[float, float]:
    """(forward, backward) exposed context-parallel communication of one layer; `impl`: the stack's context
    parallelism (data/stacks.json `context_parallel`)."""
    if par.cp == 1:
        return 0.0, 0.0
    shape = attention_shape(model)
    local = model.seq_length / par.cp * par.micro_batch_size
    kv = ACT * local * (shape.k_width + shape.v_width) / par.tp
    qkvo = ACT * local * (shape.q_width + shape.k_width + shape.v_width + shape.out_in) / par.tp
    g = layout.cp_group(par, cluster)
    c = costs.overlap_contention
    if impl == "torch-ring":
        # PyTorch's context_parallel with torchtitan's rotate method "allgather": K and V, repeated to the query
        # heads (models/llama/model.py repeat_kv runs before SDPA), gathered whole before the first block's SDPA
        # call, in the forward and again in the backward; the fp32 dK/dV passed round the ring after every block
        # (`dkv_rotater`, single-peer all_to_all: cp sends). Under torch.compile each collective is waited on as
        # it is issued (_functional_collectives `wait_tensor` when tracing) and Inductor reorders no communication
        # by default: none of it overlaps the attention
        repeated = kv * shape.q_width / shape.k_width
        gather = comm.collective_time("all_gather", repeated * par.cp, g, cluster)
        pair = comm.Group(2, 1 if g.crosses else 2, 2 if g.crosses else 1)
        sends = par.cp * comm.collective_time("send_recv", 2 * repeated, pair, cluster)  # fp32: twice the bytes
        return gather, gather + sends
    if par.cp_comm_type == "a2a":
        t = comm.collective_time("all_to_all", qkvo, g, cluster, calls=4)
        return t, t
    if par.cp_comm_type == "all_gather":
        gather = comm.collective_time("all_gather", kv * par.cp, g, cluster)
        scatter = comm.collective_time("reduce_scatter", kv * par.cp, g, cluster)
        return gather, gather + scatter
    if par.cp_comm_type == "a2a+p2p" and par.hierarchical_cp_sizes:
        inner, outer = par.hierarchical_cp_sizes
        a2a_g = comm.group(inner, par.tp, cluster, par.world_size)
        a2a = comm.collective_time("all_to_all", qkvo, a2a_g, cluster, calls=4)
        ring_g = comm.group(outer, par.tp * inner, cluster, par.world_size)
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
    window: float | None = None,
) -> tuple[float, float]:
    """Dispatch + combine all-to-all of the routed tokens, every pass (forward, backward, recomputed forward): (what
    a pass exposes, what hides behind the other micro-batch's compute in a pass that has one to pair with, which
    combined 1F1B's warm-up forwards and cool-down backwards do not: `pipeline.unpaired_share`). `window`: the time
    it can hide behind in a paired pass (default: the layer's compute)."""
    if par.ep == 1:
        return 0.0, 0.0
    entering = routed_tokens(model, par, training) / (model.moe_router_topk or 1)
    token_bytes = ACT * model.hidden_size / par.expert_tp
    group = layout.ep_group(par, cluster)
    one = 2 * dispatch.all_to_all_time(model, par.moe_token_dispatcher, entering, token_bytes, group, cluster)
    passes = 3 if par.recompute == "full" else 2
    total = one * passes
    if par.moe_ep_overlap:  # combined 1F1B: one micro-batch's all-to-all behind another's attention and MLP
        paired = comm.exposed(total, lt.fwd + lt.bwd if window is None else window, costs.overlap_contention)
        return paired, total - paired
    return total, 0.0


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


@dataclass(frozen=True, slots=True)
class _LayerTraffic:
    """What one layer's share of a micro-batch reads besides the recomputed share, cached per layer: its times, its
    exposed TP and CP traffic per pass and EP traffic over every pass, and which of those groups stay inside the
    NVLink domain (`StageTime.fwd_side`)."""

    lt: compute.LayerTime
    tp: tuple[float, float]
    cp: tuple[float, float]
    ep: float
    ep_hidden: float  # of the EP traffic, what a paired pass of combined 1F1B hides (an unpaired one exposes it)
    inside: tuple[bool, bool, bool]  # TP, CP, EP groups inside the NVLink domain


def _layer_traffic(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, moe: bool
) -> _LayerTraffic:
    def traffic() -> _LayerTraffic:
        costs = training.software.generation(cluster.gpu.generation)
        lt = compute.layer_time(model, par, training, cluster.gpu, costs, moe)
        tp, tp_hidden = _tp_comm(model, par, cluster, lt, costs)
        tp_inside = par.tp > 1 and not layout.tp_group(par, cluster).crosses
        ep_inside = moe and par.ep > 1 and not layout.ep_group(par, cluster).crosses
        window = lt.fwd + lt.bwd  # what the combined-1F1B all-to-all hides behind: the other micro-batch's layer
        if tp_inside and ep_inside:  # on the NVLink with the TP traffic: only what that leaves of the compute
            window -= tp_hidden
        elif tp_inside:  # over the NICs: also while that layer waits for its exposed TP traffic (StageTime.window)
            window += tp[0] + tp[1]
        ep, ep_hidden = _ep_comm(model, par, cluster, training, lt, costs, window) if moe else (0.0, 0.0)
        inside = (tp_inside, par.cp > 1 and not layout.cp_group(par, cluster).crosses, bool(ep) and ep_inside)
        return _LayerTraffic(
            lt,
            tp,
            _cp_comm(model, par, cluster, lt, costs, training.software.costs.context_parallel),
            ep,
            ep_hidden,
            inside,
        )

    return model.memo(("layer_traffic", par.layer_key, moe), traffic, cluster, training)


def _layer_part(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, moe: bool, recomputed: float
) -> StageTime:
    """One layer's share of a micro-batch; `recomputed` is the fraction of such layers fully recomputed."""
    costs = training.software.generation(cluster.gpu.generation)
    t = _layer_traffic(model, cluster, training, par, moe)
    lt, (tp_f, tp_b), (cp_f, cp_b), ep = t.lt, t.tp, t.cp, t.ep
    full = par.recompute == "full"
    repeat = recomputed if full else 0.0
    recompute = lt.recompute * (recomputed if full else 1.0)
    side_f, side_b = _side_comm(par, t.inside, (tp_f * (1 + repeat), tp_b), (cp_f * (1 + repeat), cp_b), ep)
    ops = lt.ops_fwd * (3 + (repeat if full else (1 if par.recompute == "selective" else 0)))
    hooks = 0.0
    if par.zero_stage == 3 and training.software.costs.zero3_module_hook_s:
        modules = MODULES_PER_LAYER[training.software.costs.activation_layout]
        if moe:  # the MLP's modules give way to the sparse block, one ZeRO-3 leaf module (states.stage_params)
            modules -= MLP_MODULES[training.software.costs.activation_layout] - 1
        if model.qk_layernorm:  # q_norm and k_norm: two more parameterised modules
            modules += 2
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
        fwd_side=side_f,
        bwd_side=side_b,
    )


def _side_comm(
    par: ParallelConfig,
    inside: tuple[bool, bool, bool],
    tp: tuple[float, float],
    cp: tuple[float, float],
    ep: float,
) -> tuple[float, float]:
    """(forward, backward) exposed TP, CP and EP communication of one layer whose groups stay inside the NVLink
    domain (`StageTime.fwd_side`): the EP all-to-all runs once per pass, a recomputed forward being one more."""
    fwd = bwd = 0.0
    if inside[0]:
        fwd, bwd = fwd + tp[0], bwd + tp[1]
    if inside[1]:
        fwd, bwd = fwd + cp[0], bwd + cp[1]
    if inside[2]:
        backward = ep / (3 if par.recompute == "full" else 2)
        fwd, bwd = fwd + ep - backward, bwd + backward
    return fwd, bwd


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


def layer_cost_line(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, moe: bool
) -> tuple[tuple[float, float], tuple[float, float]]:
    """One layer's micro-batch time as a line in the share of such layers fully recomputed (or constant under `par`'s
    selective modules): ((device time at share 0, at share 1), (host time at share 0, at share 1)). Device time is its
    compute, recomputation and exposed TP, CP and EP traffic; every term is linear in the share (`_layer_part`). The
    search tries recomputation levels by it (space.recompute_options gives them unordered)."""
    none, every = (
        _layer_part(model, cluster, training, par, moe, 0.0),
        _layer_part(model, cluster, training, par, moe, 1.0),
    )
    return (none.device, every.device), (none.host, every.host)


def stage_recompute_floor(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, shape: StageShape, moe: bool
) -> float:
    """One layer's recomputation time on a stage (its share of fully recomputed layers, or the selective modules):
    what a plan's recomputation adds to `layer_floor` (`_layer_part`'s recompute, from the layer's cached time)."""
    recompute = _layer_traffic(model, cluster, training, par, moe).lt.recompute
    if par.recompute != "full":
        return recompute
    return recompute * recomputed_fraction(par, shape) if shape.layers else 0.0


def unpaired_ep(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, moe: int, unpaired: float
) -> float:
    """What `moe` MoE layers' all-to-all adds to a micro-batch, on average, when `unpaired` of the passes run alone
    under combined 1F1B (`pipeline.unpaired_share`): the part a paired pass hides, exposed."""
    if not (unpaired and moe and par.moe_ep_overlap):
        return 0.0
    return unpaired * moe * _layer_traffic(model, cluster, training, par, True).ep_hidden


def stage_time(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
    unpaired: float = 0.0,
) -> StageTime:
    """One micro-batch (forward + backward) on a stage of `shape` with `dense` and `moe` layers. `unpaired`: the share
    of the stage's passes that combined 1F1B runs alone (`pipeline.unpaired_share`), whose EP all-to-all has no
    other micro-batch's compute to hide behind."""
    out = StageTime()
    layers = dense + moe
    recomputed = recomputed_fraction(par, shape) if layers else 0.0
    for count, is_moe in ((dense, False), (moe, True)):
        if count:
            part = _layer_part(model, cluster, training, par, is_moe, recomputed)
            for name in (
                "compute",
                "recompute",
                "tp_comm",
                "cp_comm",
                "ep_comm",
                "fwd",
                "bwd",
                "host",
                "fwd_side",
                "bwd_side",
            ):
                setattr(out, name, getattr(out, name) + count * getattr(part, name))
    alone = unpaired_ep(model, cluster, training, par, moe, unpaired)
    if alone:
        out.ep_comm += alone
        if _layer_traffic(model, cluster, training, par, True).inside[2]:  # beside a collective over the NICs
            backward = alone / (3 if par.recompute == "full" else 2)
            out.fwd_side, out.bwd_side = out.fwd_side + alone - backward, out.bwd_side + backward
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
        out.compute += fp32_accumulation(model, cluster, training, par, shape, dense, moe)
    if per_layer_gathers(training, par) and layers:
        out.zero_comm = gather_per_layer_exposed(model, cluster, training, par, shape, dense, moe, out)
    elif scatters_per_microbatch(par) or (par.zero_stage == 2 and accumulates_on_host(training, par)):
        out.host_wait = max(0.0, out.host - out.device)  # what the reduce-scatter's window holds of the host waits
        out.zero_comm = zero2_exposed(model, cluster, training, par, shape, dense, moe, out)
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


def optimizer_times(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    stage_params_list: list[tuple[int, int]],
) -> tuple[float, float]:
    """(GPU optimizer step with the stack's host time per step, exposed offload work) for the slowest stage."""
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
    # the gradient norm reads, and zeroing writes, the gradients this GPU holds: every one of its stage under
    # Megatron's main-grad buffer and ZeRO-1, its partition where they are sharded (ZeRO-2/3, FSDP, Megatron-FSDP
    # with optim_grads*); it charged the whole stage's everywhere (QA, 2026-12-06)
    grads_sharded = (
        par.zero_stage >= 2
        or "fsdp" in training.software.can.sharding
        or par.megatron_fsdp in ("optim_grads", "optim_grads_params")
    )
    for dense, expert in stage_params_list:
        shard = (dense / dense_n + expert / expert_n) if sharded else dense + expert
        held = shard if grads_sharded else dense + expert
        if par.offload_optimizer == "none":
            gpu = (per_param * shard + 8.0 * held) / hbm  # + grad norm read and zeroing over the gradients held
            worst_gpu = max(worst_gpu, gpu)
            continue
        # the fp32 gradient partition to the host (cast on the GPU at ZeRO-1/2: `async_inplace_copy_grad_to_fp32_
        # buffer_from_gpu`, `_offload_grad_partition_at_boundary` at ZeRO-3) and the 16-bit parameters back (cast on
        # the host: the pinned `param_buffer_of_bit16_for_cpu_offload_groups`, stage3's fp32 -> 16-bit `copy_`);
        # ZeRO-1 accumulating on the host brings each gradient back, adds and copies it out once, at the boundary
        pcie = (4 + 2 + (4 if par.zero_stage == 1 and accumulates_on_host(training, par) else 0)) * shard
        pcie /= cluster.h2d_bw
        cpu = shard * local / cluster.cpu_adam_params_per_s
        nvme = 2 * 16 * shard * local / (cluster.nvme_GBps * 1e9) if par.offload_optimizer == "nvme" else 0.0
        worst_offload = max(worst_offload, pcie + cpu + nvme)
    return worst_gpu + costs.host_step_s, worst_offload


__all__ = ["StageTime", "optimizer_times", "stage_time"]
