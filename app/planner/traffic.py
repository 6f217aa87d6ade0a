"""Data-parallel and sharded-state traffic of a step: what Megatron's DDP and distributed optimizer, Megatron-FSDP,
DeepSpeed ZeRO-1/2/3 and PyTorch FSDP move per micro-batch and per optimizer step, and how much of it is exposed.

- DP: Megatron reduces the main grads over DP x CP (all-reduce, or reduce-scatter + parameter all-gather with the
  distributed optimizer) in buckets behind the last micro-batch's backward (`--overlap-grad-reduce`) and the first
  forward (`--overlap-param-gather`); the last bucket is exposed (`dp_exposed`).
- ZeRO-2 and Megatron-FSDP `optim_grads` reduce-scatter the gradients in every micro-batch's backward
  (`zero2_exposed`); ZeRO-3, FSDP and Megatron-FSDP `optim_grads_params` gather parameters unit by unit in forward
  and backward as well, prefetching one unit ahead (ZeRO paper sec. 7; `gather_per_layer_exposed`).
- `sharding_floor` is the least that traffic adds to a stage's micro-batch: the search's bound.
Overlap is what hides behind what (comm.exposed), as in step.py, which adds these terms to each stage's time.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from app.planner import comm, compute, layout
from app.planner.activations import ACT
from app.planner.attention import attention_shape
from app.planner.layout import StageShape, num_microbatches
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.states import (
    StageParams,
    accumulates_on_host,
    deepspeed_uses_bf16_optimizer,
    reduce_dtype,
    stage_params,
    zero_buckets,
    zero_overlap_comm,
)

if TYPE_CHECKING:
    from app.planner.step import StageTime

ZERO3_MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance, DeepSpeed's default (not rendered)
ZERO3_GATHERS_PER_LAYER = 4  # one all-gather per linear module (QKV, projection, fc1, fc2)
MEGATRON_BUCKET_PARAMS = 40_000_000  # DistributedDataParallelConfig.bucket_size default (max(40M, 1M x dp))


def per_layer_gathers(training: TrainingSpec, par: ParallelConfig) -> bool:
    """Whether parameters are gathered unit by unit in every micro-batch (ZeRO-3, FSDP, Megatron-FSDP's
    optim_grads_params)."""
    fsdp = "fsdp" in training.software.can.sharding and par.pp == 1  # under pipelining: once per step (dp_exposed)
    return fsdp or par.zero_stage == 3 or par.megatron_fsdp == "optim_grads_params"


def _fsdp_pipelined(training: TrainingSpec, par: ParallelConfig) -> bool:
    """PyTorch FSDP under torch.distributed.pipelining: each stage gathers its units once at its first forward and
    reduce-scatters its accumulated gradients once after its last backward (states._fsdp_states)."""
    return "fsdp" in training.software.can.sharding and par.pp > 1


def gathered_bytes(training: TrainingSpec, par: ParallelConfig) -> float:
    """Bytes per parameter a sharded gather moves: 16-bit weights, or FP8 under torchao's FSDP float8 all-gather."""
    fsdp_fp8 = "fsdp" in training.software.can.sharding and training.precision == "fp8" and par.fp8_param_gather
    return 1.0 if fsdp_fp8 else float(ACT)


def scatters_per_microbatch(par: ParallelConfig) -> bool:
    """Whether gradients are reduce-scattered in every micro-batch's backward (ZeRO-2, Megatron-FSDP optim_grads)."""
    return (par.zero_stage == 2 and par.dp > 1) or (par.megatron_fsdp == "optim_grads" and par.dp * par.cp > 1)


def moves_per_microbatch(training: TrainingSpec, par: ParallelConfig) -> bool:
    """Whether the sharding moves parameters or gradients in every micro-batch (`sharding_floor` is not 0)."""
    return per_layer_gathers(training, par) or scatters_per_microbatch(par)


def _shard_group(par: ParallelConfig, cluster: ClusterSpec, training: TrainingSpec) -> comm.Group:
    """The group parameters and gradients are sharded over: DP x CP for Megatron-FSDP and PyTorch FSDP (torchtitan's
    dp_shard_cp mesh), DP else."""
    if par.megatron_fsdp or "fsdp" in training.software.can.sharding:
        return railed(layout.dp_cp_group(par, cluster), training)
    return railed(layout.dp_group(par, cluster), training)


def _shard_groups(
    par: ParallelConfig, cluster: ClusterSpec, training: TrainingSpec, sp: StageParams
) -> list[tuple[int, comm.Group]]:
    """(parameters, the group they are sharded over) of a stage. Megatron-FSDP shards expert parameters over the
    expert-data-parallel group, a mesh of its own (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py
    `expt_dp_group = get_expert_data_parallel_group()`; param_and_grad_buffer.py `get_fsdp_group(
    is_expert_parallel=True)` for `is_expert_param`): with EP 8 in a node that is one rank per node, one NIC, where
    DP x CP had all eight (review 2026-12-07: DeepSeek-V3 M-FSDP on 1024 H100 charged 2.6 s where ~14 s move)."""
    if par.megatron_fsdp and sp.expert and par.ep * par.expert_tp > 1:
        expert = railed(layout.expert_dp_group(par, cluster), training)
        return [(sp.dense, _shard_group(par, cluster, training)), (sp.expert, expert)]
    return [(sp.total, _shard_group(par, cluster, training))]


def recomputed_layers(par: ParallelConfig, chunk_layers: int) -> int:
    """Layers of one chunk a full recomputation recomputes: with the block method the first
    `--recompute-num-layers` (all of a chunk shorter than that), else all."""
    if par.recompute_method == "block" and par.recompute_num_layers is not None:
        return min(par.recompute_num_layers, chunk_layers)
    return chunk_layers


def recomputed_fraction(par: ParallelConfig, shape: StageShape) -> float:
    """Share of a stage's layers fully recomputed, chunk by chunk (`recomputed_layers`)."""
    return recomputed_share(par.recompute, par.recompute_method, par.recompute_num_layers, shape.chunks)


def recomputed_share(recompute: str, method: str | None, num_layers: int | None, chunks: tuple[int, ...]) -> float:
    """`recomputed_fraction` from the recomputation fields and the stage's chunk lengths."""
    if recompute != "full":
        return 0.0
    if method != "block" or num_layers is None:
        return 1.0
    layers = sum(chunks)
    return sum(min(num_layers, n) for n in chunks) / layers if layers else 0.0


def fp32_accumulation(
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


def zero2_exposed(
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
    overlapped (overlap_comm; FSDP's grad-reduce pipeline) with the backward's wall time (`StageTime.window`)."""
    scatter = _zero2_traffic(model, cluster, training, par, shape, dense, moe)
    costs = training.software.generation(cluster.gpu.generation)
    groups = _shard_groups(par, cluster, training, stage_params(model, par, shape, dense, moe))
    window = st.window(True, any(g.crosses for _, g in groups)) if zero_overlap_comm(2) else 0.0
    return comm.exposed(scatter, window, costs.overlap_contention)


def _zero2_traffic(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    shape: StageShape,
    dense: int,
    moe: int,
) -> float:
    """Seconds of a micro-batch's gradient traffic on ZeRO-2's reduction stream: the reduce-scatter (with more than
    one rank to shard over) and, accumulating on the host, the gradient round trip (`host_accumulation_bytes`)."""

    def scatter() -> float:
        sp = stage_params(model, par, shape, dense, moe)
        return sum(
            comm.collective_time("reduce_scatter", grad_bytes(training, par) * n, g, cluster)
            for n, g in _shard_groups(par, cluster, training, sp)
            if n
        )

    reduce = model.memo(("zero2_traffic", par.state_key, dense, moe), scatter, cluster, training, shape)
    if not accumulates_on_host(training, par):
        return reduce
    shard = stage_params(model, par, shape, dense, moe).total / par.dp
    return reduce + host_accumulation_bytes(training, par) * shard / cluster.h2d_bw


def host_accumulation_bytes(training: TrainingSpec, par: ParallelConfig) -> float:
    """Bytes per sharded parameter a micro-batch moves over PCIe to keep the gradients on the host, averaged over the
    step's micro-batches. ZeRO-3 with the optimizer offloaded keeps its 16-bit gradient partition on the host: the
    first micro-batch copies it out and back (`partition_grads`: copy to the host buffer, then `.to(device)` "to
    speed up the next few operations"), every later one brings it back, adds and copies it out (4 B each). ZeRO-2
    accumulating on the host (`accumulates_on_host`) copies out in the first micro-batch (2 B) and back and out in
    every later one (4 B). The fp32 copy at the last micro-batch is the optimizer step's (step.optimizer_times)."""
    if par.zero_stage == 3 and par.offload_optimizer != "none":
        return 4.0
    if par.zero_stage == 2 and accumulates_on_host(training, par):
        m = num_microbatches(training, par)
        return 4.0 - 2.0 / m
    return 0.0


def gather_per_layer_exposed(
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
    passes = 2 + (recomputed_fraction(par, shape) * regather if par.recompute == "full" else 0.0)
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
    rho = recomputed_fraction(par, shape) if par.recompute == "full" else 0.0
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
        zero3 = par.zero_stage == 3
        calls = ZERO3_GATHERS_PER_LAYER * layers if zero3 else layers
        per_param, grad = gathered_bytes(training, par), grad_bytes(training, par)
        size = per_param * sp.total
        buckets = math.ceil(sp.total / zero_buckets(model, 3).reduce_bucket_size) if zero3 else layers
        gather = scatter = 0.0
        for n, g in _shard_groups(par, cluster, training, sp):
            if n:
                gather += comm.collective_time("all_gather", per_param * n, g, cluster, calls=calls)
                scatter += comm.collective_time("reduce_scatter", grad * n, g, cluster, calls=buckets)
        pcie = 2 * size / par.dp / cluster.h2d_bw if par.offload_param != "none" else 0.0
        # the gradient partition's round trip to the host under optimizer offload, on the reduce stream
        pcie += host_accumulation_bytes(training, par) * sp.total / par.dp / cluster.h2d_bw
        nvme = 0.0
        if par.offload_param == "nvme":
            # ZeRO-Infinity swaps each GPU's 16-bit partition in from the node's NVMe for the forward and again for
            # the backward (partitioned_param_swapper; the coordinator's __prefetch_nvme_param_partitions): the
            # node's GPUs share its drives (it was timed as host copies only, QA 2026-12-06)
            local = min(cluster.gpus_per_node, par.world_size)
            nvme = 2 * size / par.dp * local / (cluster.nvme_GBps * 1e9)
        return gather, scatter + pcie + nvme

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
    st: StageTime | None,
    sp: tuple[int, int],
) -> float:
    """Gradient reduction and parameter gathering left on the critical path after the last micro-batch. With no
    stage time (`st` None): the least it can be at any micro-batch size and recomputation, every overlapped
    collective hidden behind an endless window and paying only its contention (a search bound)."""
    if per_layer_gathers(training, par):
        return 0.0  # reduced and gathered per micro-batch (zero_comm)
    dense, expert = sp
    total = 0.0
    dp_cp = _megatron(training) or _fsdp_pipelined(training, par)
    groups = [(dense, layout.dp_cp_group(par, cluster) if dp_cp else layout.dp_group(par, cluster))]
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
    training: TrainingSpec, par: ParallelConfig, params: int, g: comm.Group, cluster: ClusterSpec, st: StageTime | None
) -> float:
    costs = training.software.generation(cluster.gpu.generation)
    grads = grad_bytes(training, par) * params
    pipelined = _fsdp_pipelined(training, par)
    if not (par.distributed_optimizer or par.zero_stage >= 1 or pipelined):
        reduce, gather = comm.collective_time("all_reduce", grads, g, cluster), 0.0
    else:
        # BF16_Optimizer: the engine all-reduces the fp32 gradients whole (runtime/pipe/engine.py _bf16_reduce_grads
        # and engine.py allreduce_gradients -> buffered_allreduce_fallback, no reduce-scatter); either way each rank
        # steps its partition and all-gathers the 16-bit parameters (bf16_optimizer.py step -> all_gather_dp_groups)
        op: comm.Op = "all_reduce" if deepspeed_uses_bf16_optimizer(training, par) else "reduce_scatter"
        reduce = comm.collective_time(op, grads, g, cluster)
        gather = comm.collective_time("all_gather", gathered_bytes(training, par) * params, g, cluster)
    if pipelined:
        # the stage's REDUCE_GRAD runs after its last backward (pipelining/stage.py perform_reduce_grad), exposed; its
        # first forward gathers unit by unit, each prefetched behind the unit before
        forward = st.window(False, g.crosses) if st else math.inf
        return reduce + comm.exposed(gather, forward, costs.overlap_contention)
    if par.zero_stage == 2 or par.megatron_fsdp == "optim_grads":
        reduce = 0.0  # reduce-scattered in every micro-batch's backward (zero_comm)
    if not (training.overlap_grad_reduce and training.software.can.overlap_grad_reduce):
        return reduce + gather
    if training.software.can.pipeline == "deepspeed" and par.pp > 1:
        return reduce + gather  # the PipelineEngine reduces after the last backward
    if par.zero_stage == 1:
        return reduce + gather  # overlap_comm is off for ZeRO-1 as rendered: reduced in blocking hooks
    bucket = min(1.0, max(MEGATRON_BUCKET_PARAMS, 1_000_000 * g.size) / max(params, 1))
    backward, forward = (st.window(True, g.crosses), st.window(False, g.crosses)) if st else (math.inf, math.inf)
    exposed_reduce = comm.exposed(reduce * (1 - bucket), backward, costs.overlap_contention)
    exposed_reduce += reduce * bucket
    if training.software.can.overlap_param_gather and par.distributed_optimizer:
        gather = comm.exposed(gather, forward, costs.overlap_contention)
    return exposed_reduce + gather
