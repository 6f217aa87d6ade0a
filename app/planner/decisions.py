"""Every decision the rendered files carry out, derived once from the plan: `decide(...) -> Decisions`.

The renderer formats these and never calls back into the cost model, so a stored plan renders the same files
forever (docs/conventions.md, "The Plan carries its decisions"). Each value names the code or document it
follows:

- ZeRO buckets, `overlap_comm` and the BF16_Optimizer choice are the memory model's own (`states.zero_buckets`,
  `states.zero_overlap_comm`, `states.deepspeed_uses_bf16_optimizer`), so ds_config.json configures exactly the
  buffers the estimate counted.
- `sub_group_size` (ZeRO-3): DeepSpeed's NVMe optimizer swapper pins `buffer_count` (4) host buffers of the largest
  sub-group (deepspeed/runtime/swap_tensor/optimizer_utils.py, `SwapBufferManager(num_elems=largest_numel,
  count=buffer_count)`; stage3.py passes `max(fp16_partitioned_groups_flat_numel)`). With DeepSpeed's default of
  1e9 elements that is 16 GB pinned per rank; the memory model counts 4 x 1e8 fp32 elements.
- NCCL_ALGO: NCCL's per-collective syntax (`allreduce:tree`) exists from NCCL 2.24 (src/graph/tuning.cc
  `parseList`, tag v2.24.3-1); 2.23 and older read the whole value as one unknown algorithm name and enable none.
- The distributed timeout and the graceful-stop margin scale with the predicted step time.
"""

from __future__ import annotations

import math

from app.planner import comm, space
from app.planner import layout as lay
from app.planner.goodput import save_seconds
from app.planner.results import (
    Decisions,
    DeepSpeedDecision,
    Estimate,
    NcclDecision,
    OffloadDecision,
    ZeroDecision,
)
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.states import (
    compact_grad_partition,
    deepspeed_uses_bf16_optimizer,
    fused_fc1,
    zero_buckets,
    zero_overlap_comm,
)
from app.planner.traffic import MEGATRON_BUCKET_PARAMS, grad_bytes, railed

# DeepSpeed's NVMe buffers as the memory model counts them (memory._offload_buffers: 4 x 1e8 fp32 optimizer
# elements, 5 x 1e8 16-bit parameter elements); offload_config.py defaults: buffer_count 4 / 5, buffer_size 1e8.
NVME_OPTIMIZER_BUFFERS = 4
NVME_PARAM_BUFFERS = 5
NVME_PARAM_BUFFER_ELEMENTS = 100_000_000
# The per-collective NCCL_ALGO syntax needs this NCCL (src/graph/tuning.cc parseList, v2.24.3-1).
PER_COLLECTIVE_ALGO_NCCL = "2.24"
TREE_ALLREDUCE = "allreduce:tree"
# Megatron-LM's default --distributed-timeout-minutes (arguments.py), kept as the floor.
MEGATRON_TIMEOUT_MIN = 10
TIMEOUT_STEPS = 5  # a collective may wait a whole step behind a straggler: allow several
MIN_GRACEFUL_STOP_S = 600  # the least time to finish the step, write a checkpoint and exit
GRACEFUL_STOP_SLACK_S = 300  # exit, process-group teardown and a loaded file system on top of the predicted save
MANUAL_GC_MIN_GPUS = 64  # GC pauses stall every rank of a collective; NVIDIA's recipes collect every 100 steps
MANUAL_GC_INTERVAL = 100
NVLS_GENERATIONS = ("hopper", "blackwell")  # NVLink SHARP needs third-generation NVSwitch (Hopper) or later


def _largest_param(model: ModelSpec, par: ParallelConfig, fused_fc1: bool = True) -> int:
    """Elements of the largest single weight on one rank (embedding, MLP or QKV matrix); SwiGLU's gate and up
    projections are one weight in Megatron's fc1, two in a Hugging Face model (`fused_fc1` False, as
    states.stage_params)."""
    h = model.hidden_size
    ffn = max(model.ffn_hidden_size or 0, model.moe_ffn_hidden_size or 0)
    qkv = h * (model.query_size + 2 * model.kv_size)
    return max(h * model.vocab_size, h * ffn * (2 if model.swiglu and fused_fc1 else 1), qkv) // max(1, par.tp)


def _offload(device: str, buffers: int, size: int | None) -> OffloadDecision | None:
    if device == "none":
        return None
    nvme = device == "nvme"
    return OffloadDecision(
        device="nvme" if nvme else "cpu", buffer_count=buffers if nvme else None, buffer_size=size if nvme else None
    )


def zero_decision(model: ModelSpec, par: ParallelConfig, fused_fc1: bool = True) -> ZeroDecision:
    stage, nvme = par.zero_stage, "nvme" in (par.offload_optimizer, par.offload_param)
    b = zero_buckets(model, stage, nvme)
    # A sub-group and an NVMe buffer hold at least one parameter's partition (stage3.py, partitioned_param_swapper.py
    # `numel <= elements_per_buffer`).
    partition = math.ceil(_largest_param(model, par, fused_fc1) / max(1, par.dp))
    sub_group = None
    if stage == 3:  # the memory model's sub-group: 1e8 with NVMe (its swap buffers), else DeepSpeed's 1e9
        sub_group = max(b.sub_group_size, partition) if nvme else b.sub_group_size
    param_buffer = max(NVME_PARAM_BUFFER_ELEMENTS, partition)
    return ZeroDecision(
        stage=stage,
        overlap_comm=zero_overlap_comm(stage),
        reduce_bucket_size=b.reduce_bucket_size,
        allgather_bucket_size=b.allgather_bucket_size if stage in (1, 2) else None,
        prefetch_bucket_size=b.prefetch_bucket_size if stage == 3 else None,
        param_persistence_threshold=b.param_persistence_threshold if stage == 3 else None,
        max_live_parameters=b.max_live_parameters if stage == 3 else None,
        sub_group_size=sub_group,
        offload_optimizer=_offload(par.offload_optimizer, NVME_OPTIMIZER_BUFFERS, None) if stage else None,
        offload_param=_offload(par.offload_param, NVME_PARAM_BUFFERS, param_buffer) if stage == 3 else None,
    )


def _wire_dtype(training: TrainingSpec, par: ParallelConfig, bf16_optimizer: bool) -> str:
    """The gradient dtype DeepSpeed reduces in: fp32 for BF16_Optimizer's fp32 gradients (DeepSpeed's default
    would send them in bf16), else the model's 16-bit type (rules.md sec. 3)."""
    if training.precision == "fp16":
        return "fp16"
    return "fp32" if bf16_optimizer and (par.grad_reduce_dtype or training.reduce_dtype) == "fp32" else "bf16"


def client_optimizer(training: TrainingSpec, par: ParallelConfig) -> str:
    """What each framework hands deepspeed.initialize. DeepSpeed refuses ZeRO-Offload with any client optimizer
    but DeepSpeedCPUAdam (engine.py `_configure_optimizer`, ZeRORuntimeException): Megatron-DeepSpeed passes it
    with --cpu-optimizer (megatron/optimizer/__init__.py L83-89); examples/train_gpt.py passes torch's AdamW and
    sets `zero_force_ds_cpu_optimizer: false` itself."""
    offload = par.offload_optimizer != "none"
    if training.framework == "megatron-deepspeed":
        return "deepspeed.ops.adam.DeepSpeedCPUAdam" if offload else "apex.optimizers.FusedAdam"
    return "torch.optim.AdamW"


def deepspeed_decision(model: ModelSpec, training: TrainingSpec, par: ParallelConfig) -> DeepSpeedDecision:
    bf16_opt = deepspeed_uses_bf16_optimizer(training, par)
    fp32_accumulation = bf16_opt or compact_grad_partition(training, par)
    return DeepSpeedDecision(
        zero=zero_decision(model, par, fused_fc1=fused_fc1(training)),
        bf16_optimizer=bf16_opt,
        grad_accum_dtype="fp32" if fp32_accumulation else None,
        communication_data_type=_wire_dtype(training, par, bf16_opt),  # type: ignore[arg-type]
        client_optimizer=client_optimizer(training, par),
        pipeline_engine=training.framework == "megatron-deepspeed" and par.pp > 1,
    )


def cross_node_groups(par: ParallelConfig, cluster: ClusterSpec) -> list[str]:
    """Which parallel groups span nodes (Megatron's tp-cp-ep-dp-pp rank order)."""
    checks = (
        ("tensor-parallel", lay.tp_crosses_nodes(par, cluster)),
        ("context-parallel", lay.cp_crosses_nodes(par, cluster)),
        ("expert-parallel", lay.ep_crosses_nodes(par, cluster)),
        ("data-parallel", lay.dp_crosses_nodes(par, cluster)),
        ("pipeline", lay.pp_crosses_nodes(par, cluster)),
    )
    return [name for name, crosses in checks if crosses]


def _gradient_all_reduce(training: TrainingSpec, par: ParallelConfig) -> bool:
    """Is the data-parallel gradient sync an all-reduce? Megatron without the distributed optimizer or FSDP;
    DeepSpeed without ZeRO or with BF16_Optimizer (engine.allreduce_gradients). ZeRO-1/2 reduce each partition to
    its owner (stage_1_and_2.py average_tensor), ZeRO-3 and the distributed optimizer reduce-scatter."""
    if training.framework == "megatron":
        return not par.distributed_optimizer and par.megatron_fsdp is None
    return par.zero_stage == 0 or deepspeed_uses_bf16_optimizer(training, par)


# a tree all-reduce is pinned where NCCL's own tuning model has it at most this share of the ring's time for the
# plan's all-reduces: there the tree's saved network steps outweigh its lower bandwidth; elsewhere NCCL chooses
TREE_PAYS = 0.9


def _cross_node_all_reduces(
    model: ModelSpec, training: TrainingSpec, par: ParallelConfig, cluster: ClusterSpec
) -> list[tuple[str, float, comm.Group]]:
    """(what, bytes of one call, group) of the plan's all-reduces that cross nodes: the data-parallel gradient
    buckets (Megatron DDP: max(40M, 1M x DP x CP) elements, one bucket of the whole stage without overlapped
    reduction, distributed_data_parallel.py; DeepSpeed: 5e8 elements, engine.py MEMORY_OPT_ALLREDUCE_SIZE), at most
    the stage's parameters; the tensor-parallel activation all-reduces without sequence parallelism (one [s, b, h]
    16-bit tensor each)."""
    groups = cross_node_groups(par, cluster)
    out: list[tuple[str, float, comm.Group]] = []
    if "data-parallel" in groups and _gradient_all_reduce(training, par):
        g = railed(lay.dp_group(par, cluster), training)
        stage = model.num_parameters / (par.tp * par.pp)
        per_call = 5e8
        if training.framework == "megatron":
            overlapped = training.overlap_grad_reduce and training.software.can.overlap_grad_reduce
            per_call = max(MEGATRON_BUCKET_PARAMS, 1_000_000 * par.dp * par.cp) if overlapped else stage
        out.append(("the data-parallel gradient all-reduce", grad_bytes(training, par) * min(per_call, stage), g))
    if "tensor-parallel" in groups and not par.sequence_parallel:
        tokens = model.seq_length // par.cp * par.micro_batch_size
        out.append(("the tensor-parallel all-reduces", 2.0 * tokens * model.hidden_size, lay.tp_group(par, cluster)))
    return out


def nccl_decision(model: ModelSpec, training: TrainingSpec, par: ParallelConfig, cluster: ClusterSpec) -> NcclDecision:
    """NCCL_ALGO, which is process-wide: a tree all-reduce only where NCCL's tuning model has the tree well ahead of
    the ring for every all-reduce of the plan that crosses nodes. For Megatron's 40M-element gradient buckets on a
    few nodes the bytes dominate, the tree's 0.92 bandwidth costs more than its saved steps win, and NCCL picks the
    ring itself; pinning the tree there for its log2 latency slowed the bulk all-reduce (render review 2026-12-07).
    The step time assumes NCCL's choice either way (comm.latency)."""
    groups = cross_node_groups(par, cluster)
    reduces = _cross_node_all_reduces(model, training, par, cluster)
    if not reduces:
        return NcclDecision(
            reason="no all-reduce of the plan crosses nodes (reduce-scatter, all-gather, all-to-all "
            "and pipeline/context p2p traffic have no tree algorithm): NCCL chooses",
            cross_node_groups=groups,
        )
    named = " and ".join(what for what, _b, _g in reduces)
    gpu = cluster.gpu
    if gpu.generation in NVLS_GENERATIONS and cluster.nvlink_domain >= 4:
        return NcclDecision(
            reason=f"{named} cross nodes, but NCCL_ALGO is process-wide: on {gpu.name} NCCL runs them as NVLSTree "
            f"(NVLink SHARP inside the node, a tree across), which a forced tree would disable: NCCL chooses",
            cross_node_groups=groups,
        )
    # the nodes one all-reduce group spans (it said the job's node count: a DP group of TP2 PP2 DP8 on 4 nodes
    # spans 2, QA 2026-12-07)
    nodes = max(g.domains for _w, _b, g in reduces)
    times = [(what, *comm.all_reduce_ring_and_tree(size, g, cluster)) for what, size, g in reduces]
    worst = max(times, key=lambda t: t[2] / t[1])
    shares = ", ".join(
        f"{what} {1e3 * tree:.2f} ms as a tree vs {1e3 * ring:.2f} ms as a ring" for what, ring, tree in times
    )
    if worst[2] > TREE_PAYS * worst[1]:
        return NcclDecision(
            reason=f"{named} cross {nodes} nodes; by NCCL's tuning model ({shares}: the bytes dominate and the "
            f"tree moves them at {comm.TREE_ALLREDUCE_BW} of the ring's bandwidth) the tree saves too little to pin "
            f"it process-wide: NCCL chooses",
            cross_node_groups=groups,
        )
    return NcclDecision(
        all_reduce_algo=TREE_ALLREDUCE,
        min_nccl_version=PER_COLLECTIVE_ALGO_NCCL,
        cross_node_groups=groups,
        reason=f"{named} cross {nodes} nodes: a tree all-reduce takes log2(nodes) network steps where a ring takes "
        f"2(nodes-1) (NCCL tuning.cc; {shares}); only AllReduce is pinned, the other collectives keep NCCL's choice "
        f"(per-collective syntax, NCCL >= {PER_COLLECTIVE_ALGO_NCCL}); it also turns off CollNet/SHARP for "
        f"all-reduce",
    )


def cuda_connections(training: TrainingSpec, par: ParallelConfig, cluster: ClusterSpec) -> tuple[int | None, str]:
    """Megatron-LM validate_args (core_v0.16.1 arguments.py L927-953): with TP or CP > 1 before Blackwell it
    asserts CUDA_DEVICE_MAX_CONNECTIONS=1, except under Megatron-FSDP (which asserts it is not 1, L686-688) or
    with EP-overlap (a warning: 1 or 32). Megatron-DeepSpeed raises without it under sequence parallelism."""
    fw, blackwell = training.framework, cluster.gpu.generation == "blackwell"
    if fw not in ("megatron", "megatron-deepspeed"):
        return None, f"{fw} has no such requirement"
    if fw == "megatron-deepspeed":
        if par.sequence_parallel and par.tp > 1:
            return 1, "Megatron-DeepSpeed raises without it under sequence parallelism (arguments.py)"
        return None, "no sequence parallelism: Megatron-DeepSpeed has no requirement"
    if par.megatron_fsdp is not None:
        return None, "Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 (left at CUDA's default)"
    if par.moe_ep_overlap:
        return 32, "EP all-to-all overlap needs several hardware queues (Megatron recommends 32)"
    if (par.tp > 1 or par.cp > 1) and not blackwell:
        sizes = " and ".join(f"{n}({v})" for n, v in (("tp", par.tp), ("cp", par.cp)) if v > 1)
        return 1, (
            f"{sizes} > 1: Megatron asserts one CUDA connection before Blackwell, so that its TP/CP "
            f"communication kernels are scheduled in issue order"
        )
    if par.tp > 1 or par.cp > 1:
        return None, f"{cluster.gpu.name} (Blackwell): Megatron no longer requires a single connection"
    return None, "tp 1 and cp 1: not required"


def vocab_divisor(model: ModelSpec, par: ParallelConfig) -> tuple[int, int]:
    """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP (arguments.py
    `_vocab_size_with_padding`, default 128). The largest power-of-two divisor up to 128 that needs no padding
    trains exactly the named vocabulary; when TP does not divide it, Megatron must pad (default 128)."""
    v, tp = model.vocab_size, par.tp
    for d in (128, 64, 32, 16, 8, 4, 2, 1):
        if v % (d * tp) == 0:
            return d, v
    multiple = 128 * tp
    return 128, math.ceil(v / multiple) * multiple


def fp8_recipe(training: TrainingSpec, par: ParallelConfig, cluster: ClusterSpec) -> str | None:
    """The plan's recipe, else the request's, else per-tensor current scaling on Hopper and MXFP8 on Blackwell
    (the defaults TrainingSpec.fp8_recipe documents)."""
    if training.precision != "fp8":
        return None
    return par.fp8_recipe or training.fp8_recipe or ("mxfp8" if cluster.gpu.generation == "blackwell" else "tensorwise")


def graceful_stop(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, gpus: int, step_s: float) -> int:
    """Seconds between a stop signal (Slurm's --signal before the time limit, torchrun's shutdown timeout, a pod's
    grace period) and the kill: two steps, the predicted checkpoint save and some slack. It left out the save: at
    0.5 GB/s a 920 GiB checkpoint takes 33 min, and the 600 s given cut it off (QA 2026-12-07)."""
    save_s = save_seconds(model, cluster, gpus, training.optimizer_states)
    return max(MIN_GRACEFUL_STOP_S, math.ceil(2 * step_s + save_s) + GRACEFUL_STOP_SLACK_S)


def decide(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig, estimate: Estimate
) -> Decisions:
    """Everything the files need that follows from the plan; pure (no I/O, no options)."""
    step_s = estimate.time.step_s
    timeout = max(MEGATRON_TIMEOUT_MIN, math.ceil(TIMEOUT_STEPS * step_s / 60))
    connections, connections_reason = cuda_connections(training, par, cluster)
    divisor, padded = vocab_divisor(model, par)
    notes = []
    if padded != model.vocab_size:
        notes.append(
            f"vocab_size({model.vocab_size}) is not a multiple of tp({par.tp}): Megatron pads it to "
            f"{padded} rows (make_vocab_size_divisible_by 128)"
        )
    if par.moe_token_dispatcher == "flex":
        notes.append(
            "MoE tokens travel through megatron-core's flex dispatcher (DeepEP, or HybridEP over multi-node "
            "NVLink): one copy per GPU and node a token reaches instead of one per expert; the image needs the "
            "deep_ep package (NVSHMEM, GPUDirect RDMA). Pin moe_token_dispatcher alltoall where it is missing."
        )
    return Decisions(
        deepspeed=deepspeed_decision(model, training, par) if training.framework != "megatron" else None,
        nccl=nccl_decision(model, training, par, cluster),
        cuda_device_max_connections=connections,
        cuda_device_max_connections_reason=connections_reason,
        userbuffers_skip_multicast=bool(par.tp_comm_overlap) and not space.userbuffers_multicast(cluster),
        distributed_timeout_minutes=timeout,
        timeout_reason=f"{TIMEOUT_STEPS} predicted steps of {step_s:.1f} s, at least Megatron's default "
        f"{MEGATRON_TIMEOUT_MIN} min",
        graceful_stop_s=graceful_stop(model, cluster, training, par.world_size, step_s),
        manual_gc_interval=MANUAL_GC_INTERVAL if par.world_size >= MANUAL_GC_MIN_GPUS else None,
        fp8_recipe=fp8_recipe(training, par, cluster),
        make_vocab_size_divisible_by=divisor,
        padded_vocab_size=padded,
        notes=notes,
    )
