"""Checkpoint interval and goodput: how often a plan should save, and the share of wall time that trains.

Pure functions; bytes and seconds inside. Each formula names its source:
- what a checkpoint holds: 16-bit weights (2 B per parameter) and, for mixed-precision Adam, fp32 master weights
  and two fp32 moments (K = 12 B per parameter; Rajbhandari et al. 2020, ZeRO, §3.1). Gradients are not saved.
- save and load time: those bytes over the checkpoint storage's aggregate bandwidth. The default is 1 GB/s per
  node: Llama 3's checkpoint store sustains 2 TB/s for 16,384 GPUs on 2,048 nodes (Dubey et al. 2024, §3.3.1).
- the job's mean time between failures: `cluster.mtbf_hours`, else the per-GPU interruption rate of Llama 3 405B
  pre-training, 419 unexpected interruptions in 54 days on 16,384 H100 (Dubey et al. 2024, §3.3.4, Table 5), that
  is 50,677 GPU-hours per failure, divided by the job's GPUs (failures of independent GPUs add up).
- the interval: Young's first-order optimum sqrt(2 δ M) (Young 1974, CACM 17(9)), and Daly's higher-order one
  (Daly 2006, FGCS 22(3), §4), which the planner uses; δ is the save time, M the MTBF.
- goodput: useful time over expected wall time for exponentially distributed failures, Daly's complete cost
  function T_w = M e^(R/M) (e^((τ+δ)/M) - 1) T_s / τ (Daly 2006, §3), with τ the compute time between saves and
  R the time a restart costs (overhead + load).
"""

from __future__ import annotations

import math

from app.planner.results import CheckpointPlan
from app.planner.specs import ClusterSpec, ModelSpec

WEIGHT_BYTES_PER_PARAM = 2  # bf16/fp16 weights (fp8 training keeps 16-bit primary weights too)
OPTIMIZER_BYTES_PER_PARAM = 12  # fp32 master weights + Adam's exp_avg and exp_avg_sq (ZeRO §3.1, K = 12)
BF16_OPTIMIZER_BYTES_PER_PARAM = 6  # bf16 exp_avg and exp_avg_sq + the fp32 master's 16-bit remainder
GPU_HOURS_PER_FAILURE = 54 * 24 * 16_384 / 419  # Llama 3 405B: 419 unexpected interruptions, 54 days, 16,384 GPUs
STORAGE_GBPS_PER_NODE = 1.0  # Llama 3: 2 TB/s sustained for 2,048 nodes (§3.3.1)
RESTART_OVERHEAD_S = 300.0  # tear down, reschedule, start, initialise: an assumption (Daly's examples use 600 s)


def checkpoint_bytes(model: ModelSpec, optimizer_states: str = "fp32") -> int:
    """Bytes of one full checkpoint: every parameter's 16-bit weight and its Adam state as the optimizer holds it:
    fp32 master + moments (ZeRO §3.1), or with bf16 states (Megatron's precision-aware optimizer) bf16 moments and
    the master's 16-bit remainder, 6 B (it was 12 B either way, QA 2026-12-07)."""
    state = BF16_OPTIMIZER_BYTES_PER_PARAM if optimizer_states == "bf16" else OPTIMIZER_BYTES_PER_PARAM
    return model.num_parameters * (WEIGHT_BYTES_PER_PARAM + state)


def storage_bandwidth(cluster: ClusterSpec, gpus: int | None = None) -> float:
    """Bytes/s a job on `gpus` GPUs (all of the cluster's when None) reads or writes its checkpoint at: the
    cluster's stated aggregate, else 1 GB/s per node the job uses (it counted every node of the cluster, so a
    2-GPU plan on 64 nodes saved at 64 GB/s, QA 2026-12-07)."""
    if cluster.checkpoint_storage_GBps:
        return cluster.checkpoint_storage_GBps * 1e9
    nodes = cluster.num_nodes if gpus is None else max(1, math.ceil(gpus / cluster.gpus_per_node))
    return STORAGE_GBPS_PER_NODE * nodes * 1e9


def save_seconds(model: ModelSpec, cluster: ClusterSpec, gpus: int, optimizer_states: str = "fp32") -> float:
    """Seconds to write (or read) one checkpoint of a job on `gpus` GPUs: its bytes over the storage bandwidth."""
    return checkpoint_bytes(model, optimizer_states) / storage_bandwidth(cluster, gpus)


def mtbf_s(cluster: ClusterSpec, gpus: int) -> float:
    """Mean seconds between failures of a job on `gpus` GPUs: the cluster's figure, else Llama 3's rate."""
    hours = cluster.mtbf_hours if cluster.mtbf_hours is not None else GPU_HOURS_PER_FAILURE / gpus
    return hours * 3600.0


def young_interval(save_s: float, mtbf: float) -> float:
    """Young 1974: tau = sqrt(2 * delta * M)."""
    return math.sqrt(2.0 * save_s * mtbf)


def daly_interval(save_s: float, mtbf: float) -> float:
    """Daly 2006 §4: tau = sqrt(2 delta M) (1 + sqrt(xi)/3 + xi/9) - delta with xi = delta / (2M), for
    delta < 2M; else tau = M."""
    if save_s >= 2.0 * mtbf:
        return mtbf
    xi = save_s / (2.0 * mtbf)
    return young_interval(save_s, mtbf) * (1.0 + math.sqrt(xi) / 3.0 + xi / 9.0) - save_s


def goodput(interval_s: float, save_s: float, restart_s: float, mtbf: float) -> float:
    """Daly 2006 §3: T_s / T_w = tau / (M e^(R/M) (e^((tau + delta)/M) - 1)); 0 when failures swamp the work."""
    exponent = (interval_s + save_s) / mtbf
    if exponent + restart_s / mtbf > 700.0:  # e^700 is near float's limit: no useful work survives
        return 0.0
    return interval_s / (mtbf * math.exp(restart_s / mtbf) * math.expm1(exponent))


def checkpoint_plan(
    model: ModelSpec, cluster: ClusterSpec, gpus: int, step_s: float, optimizer_states: str = "fp32"
) -> CheckpointPlan:
    """The checkpoint interval (Daly's optimum in whole steps) and the goodput it gives a plan of `step_s`."""
    save = load = save_seconds(model, cluster, gpus, optimizer_states)
    restart = (cluster.restart_overhead_s if cluster.restart_overhead_s is not None else RESTART_OVERHEAD_S) + load
    mtbf = mtbf_s(cluster, gpus)
    steps = max(1, round(daly_interval(save, mtbf) / step_s))
    interval = steps * step_s
    source = (
        "cluster.mtbf_hours"
        if cluster.mtbf_hours is not None
        else f"default: {GPU_HOURS_PER_FAILURE:,.0f} GPU-hours per failure (Llama 3) / {gpus} GPUs"
    )
    return CheckpointPlan(
        size_bytes=checkpoint_bytes(model, optimizer_states),
        save_s=save,
        load_s=load,
        restart_s=restart,
        mtbf_s=mtbf,
        mtbf_source=source,
        interval_steps=steps,
        interval_s=interval,
        goodput=goodput(interval, save, restart, mtbf),
    )
