"""`evaluate`: one parallel configuration → feasibility, memory per stage, step time and its breakdown."""

from __future__ import annotations

from app.planner import compute, rules
from app.planner.layout import num_microbatches, stage_groups, stage_layer_kinds
from app.planner.memory import memory_estimate, optimizer_shards, stage_params
from app.planner.results import Estimate, MemoryEstimate, TimeEstimate
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.step import StageTime, _dp_exposed, pipeline_time, stage_time

FLOPS_DEFINITION = (
    "Model FLOPs as Megatron-LM's num_floating_point_operations: 6 x (forward FLOPs per token) x tokens, "
    "causal attention counted once (q*s), recomputation excluded, MoE counted on the top-k active experts; "
    "MFU divides by the GPU's dense tensor-core peak for the training precision (BF16 peak for FP8 training, "
    "so FP8 and BF16 MFU compare); HFU adds recomputation."
)
OPTIMIZER_BYTES_PER_PARAM = 30  # fused Adam: read grad, r/w fp32 master, m, v; write the 16-bit param
GRAD_PASS_BYTES_PER_PARAM = 8  # gradient-norm read and zeroing over the whole gradient buffer


def time_estimate(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig) -> TimeEstimate:
    m = max(1, num_microbatches(training, par))
    kinds = stage_layer_kinds(model, par)
    groups = stage_groups(kinds, par.pp)
    timed = [(stage_time(model, cluster, training, par, first, d, e), n) for first, n, d, e in groups]
    pipe_s, bubble_s, slow = pipeline_time(timed, par, m)
    first_params = stage_params(model, par, 0, *kinds[0])
    dp_s = _dp_exposed(model, cluster, training, par, timed[0][0], (first_params.dense, first_params.expert))
    optimizer_s, offload_s = _optimizer_times(model, cluster, training, par, groups)
    step = pipe_s + dp_s + optimizer_s + offload_s
    breakdown = _breakdown(slow, m, bubble_s, dp_s, optimizer_s, offload_s)
    tokens = training.global_batch_size * model.seq_length
    flops = compute.model_flops_per_token(model) * tokens
    hw_flops = flops + compute.recompute_flops_per_token(model, par.recompute) * tokens
    peak = cluster.gpu.peak_flops("bf16" if training.precision == "fp8" else training.precision)
    per_gpu = flops / step / par.world_size
    return TimeEstimate(
        step_s=step,
        tokens_per_s=tokens / step,
        tflops_per_gpu=per_gpu / 1e12,
        mfu=per_gpu / peak,
        hfu=hw_flops / step / par.world_size / peak,
        bubble_fraction=bubble_s / step,
        flops_per_step=flops,
        flops_definition=FLOPS_DEFINITION,
        breakdown=breakdown,
        time_to_train_s=(training.train_tokens / (tokens / step)) if training.train_tokens else None,
    )


def step_lower_bound(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig) -> float:
    """A cheap bound below `time_estimate(...).step_s`: every FLOP (recomputation included) at the fastest rate
    the model grants any kernel, stretched by the pipeline's fill and drain `(m + (p-1)/v) / m`."""
    gpu = cluster.gpu
    eff = gpu.efficiency
    gemm_eff = eff.gemm_fp8 if training.precision == "fp8" else eff.gemm
    fastest = max(
        gpu.peak_flops(training.precision) * gemm_eff,
        gpu.peak_flops("bf16" if training.precision == "fp8" else training.precision) * eff.attention,
    )
    per_token = compute.model_flops_per_token(model) + compute.recompute_flops_per_token(model, par.recompute)
    work = per_token * training.global_batch_size * model.seq_length / par.world_size / fastest
    m = max(1, num_microbatches(training, par))
    return work * (1 + (par.pp - 1) / (par.vpp * m))


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
        "bubble_s": bubble,
        "dp_comm_s": dp,
        "optimizer_s": opt,
        "offload_s": offload,
    }


def _optimizer_times(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig,
    groups: list[tuple[int, int, int, int]],
) -> tuple[float, float]:
    """(GPU optimizer step, exposed offload work) for the slowest stage."""
    dense_n, expert_n = optimizer_shards(par, training.framework)
    sharded = par.distributed_optimizer or par.zero_stage >= 1
    worst_gpu = worst_offload = 0.0
    local = min(cluster.gpus_per_node, par.world_size)
    hbm = cluster.gpu.hbm_bw * cluster.gpu.efficiency.hbm
    for first, _n, d, e in groups:
        sp = stage_params(model, par, first, d, e)
        shard = (sp.dense / dense_n + sp.expert / expert_n) if sharded else sp.dense + sp.expert
        total = sp.dense + sp.expert
        if par.offload_optimizer == "none":
            gpu = (OPTIMIZER_BYTES_PER_PARAM * shard + GRAD_PASS_BYTES_PER_PARAM * total) / hbm
            worst_gpu = max(worst_gpu, gpu)
            continue
        pcie = 4 * shard / cluster.h2d_bw  # 16-bit grads down, 16-bit params up
        cpu = shard * local / cluster.cpu_adam_params_per_s
        nvme = 2 * 16 * shard * local / (cluster.nvme_GBps * 1e9) if par.offload_optimizer == "nvme" else 0.0
        worst_offload = max(worst_offload, pcie + cpu + nvme)
    return worst_gpu, worst_offload


def fits(mem: MemoryEstimate) -> list[rules.Violation]:
    out = []
    if mem.peak_bytes > mem.usable_bytes:
        stage = mem.stages[mem.peak_stage]
        out.append(
            rules.Violation(
                "out_of_memory",
                f"stage {mem.peak_stage} needs {mem.peak_bytes / 2**30:.1f} GiB per GPU "
                f"(weights {stage.weights_bytes / 2**30:.1f}, grads {stage.gradients_bytes / 2**30:.1f}, "
                f"optimizer {stage.optimizer_bytes / 2**30:.1f}, activations {stage.activations_bytes / 2**30:.1f}, "
                f"other {stage.other_bytes / 2**30:.1f}) > usable {mem.usable_bytes / 2**30:.1f} GiB "
                f"({mem.capacity_bytes / 2**30:.1f} GiB minus "
                f"{100 * (1 - mem.usable_bytes / mem.capacity_bytes):.0f}% headroom)",
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
    mem = memory_estimate(model, cluster, training, par)
    violations += fits(mem)
    time = time or time_estimate(model, cluster, training, par)
    return Estimate(feasible=not violations, reasons=[v.message for v in violations], memory=mem, time=time)
