"""What the planner returns: estimates (memory, time) and ranked plans. Bytes and seconds inside."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.planner.profile import Constant
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


class Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StageMemory(Result):
    """Peak memory of one GPU of one pipeline stage, in bytes, by what holds it."""

    stage: int = Field(description="Pipeline stage (0 = first).")
    layers: int = Field(description="Transformer layers on this stage.")
    params: int = Field(description="Parameters held by one GPU of this stage.")
    weights_bytes: int = Field(description="16-bit (and FP8) weights resident on the GPU.")
    gradients_bytes: int = Field(description="Gradient buffers on the GPU.")
    optimizer_bytes: int = Field(description="FP32 master weights and Adam moments on the GPU.")
    activations_bytes: int = Field(
        description="Activations kept for backward at the peak (all in-flight micro-batches)."
    )
    other_bytes: int = Field(
        description="Communication buckets, gathered ZeRO-3 parameters, workspaces, "
        "CUDA context and allocator fragmentation."
    )
    total_bytes: int = Field(description="The predicted peak of this stage's GPUs: reserved + CUDA context.")
    allocated_bytes: int = Field(0, description="Peak bytes allocated by tensors (torch.cuda.max_memory_allocated).")
    reserved_bytes: int = Field(0, description="Peak bytes the caching allocator reserves (max_memory_reserved).")
    peak_phase: str = Field("backward", description="When the peak happens: backward, or optimizer step.")
    microbatches_in_flight: int = Field(description="Micro-batches whose activations this stage holds at its peak.")


class Interval(Result):
    """An 80 % prediction interval, from the validation residuals of this stack on this GPU generation."""

    low: float
    high: float
    coverage: float = Field(0.8, description="Share of measured runs the interval is built to contain.")
    basis: str = Field(description="Where the width comes from (runs of this stack x GPU generation, or why wide).")


class MemoryEstimate(Result):
    peak_bytes: int = Field(description="Highest per-GPU peak over all stages (reserved + CUDA context).")
    peak_stage: int = Field(description="The stage with that peak.")
    peak_allocated_bytes: int = Field(0, description="Allocated bytes at that peak.")
    peak_reserved_bytes: int = Field(0, description="Reserved bytes at that peak (what runs out).")
    peak_upper_bytes: int = Field(
        0, description="Upper end of the 80 % interval of the peak; a plan fits when this is under usable_bytes."
    )
    peak_interval: Interval | None = Field(None, description="80 % interval of the peak in bytes.")
    capacity_bytes: int = Field(description="GPU memory.")
    usable_bytes: int = Field(description="Capacity minus the required headroom.")
    headroom_fraction: float = Field(description="1 - peak/capacity.")
    stages: list[StageMemory]
    cpu_bytes_per_node: int = Field(0, description="Host memory used by offloaded states per node.")
    cpu_capacity_bytes_per_node: int = Field(0, description="Host memory per node.")
    nvme_bytes_per_node: int = Field(0, description="NVMe used by offloaded states per node.")


class TimeEstimate(Result):
    step_s: float = Field(description="Seconds per optimizer step (one global batch).")
    tokens_per_s: float = Field(description="Tokens per second for the whole job.")
    tflops_per_gpu: float = Field(description="Model TFLOP/s per GPU (Megatron's FLOP count, recompute excluded).")
    mfu: float = Field(
        description="Model FLOPs utilisation: tflops_per_gpu / the GPU's dense tensor-core peak of the training "
        "precision, the BF16 peak for FP8 training (so that FP8 and BF16 runs compare: FP8 can pass 1)."
    )
    hfu: float = Field(description="Hardware FLOPs utilisation: as MFU but counting recomputation.")
    bubble_fraction: float = Field(description="Pipeline bubble time / step time.")
    flops_per_step: float = Field(description="Model FLOPs per step (Megatron num_floating_point_operations).")
    flops_definition: str = Field(description="How the FLOPs are counted.")
    breakdown: dict[str, float] = Field(description="Seconds per step by cause; they add up to step_s.")
    time_to_train_s: float | None = Field(None, description="Seconds for training.train_tokens, if given.")
    step_interval: Interval | None = Field(None, description="80 % interval of step_s.")
    tokens_per_s_interval: Interval | None = Field(None, description="80 % interval of tokens_per_s.")
    host_bound: bool = Field(False, description="The CPU, not the GPU, sets the pace (small micro-batches).")


class Estimate(Result):
    feasible: bool = Field(description="Valid for the framework and fits in memory with the headroom.")
    reasons: list[str] = Field(description="Why not feasible (empty if feasible).")
    memory: MemoryEstimate
    time: TimeEstimate
    constants: list[Constant] = Field(default_factory=list, description="Hardware numbers used and their source.")


class Layout(Result):
    """Numbers derived once from a parallel config and read by every artifact."""

    world_size: int
    num_nodes: int
    gpus_per_node: int
    num_microbatches: int = Field(description="Micro-batches per pipeline per step (= gradient accumulation).")
    global_batch_size: int
    stage_layers: list[int] = Field(description="Transformer layers on each pipeline stage.")


class CheckpointPlan(Result):
    """When to checkpoint and what failures cost (app/planner/goodput.py: Young/Daly, bytes over bandwidth)."""

    size_bytes: int = Field(description="One full checkpoint: 16-bit weights + fp32 master weights + Adam moments.")
    save_s: float = Field(description="Seconds to write it at the checkpoint storage's bandwidth (training waits).")
    load_s: float = Field(description="Seconds to read it back on a restart.")
    restart_s: float = Field(description="Seconds a failure costs besides the lost steps: restart overhead + load.")
    mtbf_s: float = Field(description="Mean time between failures of the job's GPUs, seconds.")
    mtbf_source: str = Field(description="Where the MTBF comes from.")
    interval_steps: int = Field(description="Steps between checkpoints (Daly's optimum, whole steps): --save-interval.")
    interval_s: float = Field(description="Seconds of training between checkpoints.")
    goodput: float = Field(description="Expected useful training time / wall time, with saves, failures and restarts.")


class Plan(Result):
    rank: int = Field(description="1 = best for the objective.")
    parallel: ParallelConfig
    layout: Layout
    estimate: Estimate
    why: list[str] = Field(description="Short reasons this plan ranks where it does.")
    notes: list[str] = Field(default_factory=list, description="Choices made on your behalf.")
    checkpoint: CheckpointPlan | None = Field(
        None, description="Checkpoint interval and expected goodput (None in plans stored before they existed)."
    )
    decisions: Decisions | None = Field(
        None, description="What the rendered files configure (None: a plan stored before decisions were kept)."
    )


class RejectedGroup(Result):
    reason: str = Field(description="A stable code for the rule (e.g. heads_divisible_by_tp, out_of_memory).")
    message: str = Field(description="What the rule says, with the numbers of an example.")
    count: int = Field(description="Candidates rejected for this reason.")
    examples: list[ParallelConfig] = Field(description="A few of them.")


class SearchStats(Result):
    candidates: int
    evaluated: int
    feasible: int
    seconds: float
    truncated: bool = Field(False, description="True when the search time cap stopped the search.")
    skipped: int = Field(
        0,
        description="Candidates never examined: a bound on their step (compute alone) already exceeded the last "
        "ranked plan's step, so none could enter the ranking (throughput objective).",
    )


class PlanResult(Result):
    planner_version: str
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    num_parameters: int
    num_active_parameters: int
    plans: list[Plan]
    rejected: list[RejectedGroup]
    suggestions: list[str] = Field(default_factory=list, description="When nothing fits: what would.")
    constants: list[Constant] = Field(default_factory=list, description="Hardware numbers used and their source.")
    notes: list[str] = Field(default_factory=list, description="Choices made on your behalf.")
    stats: SearchStats

    @property
    def best(self) -> Plan | None:
        return self.plans[0] if self.plans else None


# The decisions the rendered files carry out (app/planner/decisions.py computes them; the renderer only formats
# them). A stored plan keeps them, so files rendered later by newer code still configure what was estimated.
class OffloadDecision(Result):
    device: Literal["cpu", "nvme"] = Field(description="Where ZeRO keeps the offloaded states.")
    pin_memory: bool = Field(True, description="Page-locked host buffers (DeepSpeed offload_config pin_memory).")
    buffer_count: int | None = Field(None, description="NVMe staging buffers (DeepSpeed: optimizer 4, params 5).")
    buffer_size: int | None = Field(None, description="NVMe parameter staging buffer, elements (offload_param).")


class ZeroDecision(Result):
    stage: int = Field(description="ZeRO stage.")
    overlap_comm: bool = Field(description="Overlap the gradient reduction with backward (doubles IPG buckets).")
    reduce_bucket_size: int = Field(description="Elements per gradient-reduction bucket.")
    allgather_bucket_size: int | None = Field(None, description="Stages 1-2: elements per parameter all-gather.")
    prefetch_bucket_size: int | None = Field(None, description="Stage 3: parameters prefetched, elements.")
    param_persistence_threshold: int | None = Field(None, description="Stage 3: smaller params stay gathered.")
    max_live_parameters: int | None = Field(None, description="Stage 3: gathered parameters kept live, elements.")
    sub_group_size: int | None = Field(None, description="Stage 3: optimizer-step sub-group, elements.")
    offload_optimizer: OffloadDecision | None = None
    offload_param: OffloadDecision | None = None


class DeepSpeedDecision(Result):
    zero: ZeroDecision
    bf16_optimizer: bool = Field(description="fp32 gradient accumulation: DeepSpeed selects BF16_Optimizer.")
    grad_accum_dtype: Literal["fp32"] | None = Field(
        None,
        description="data_types.grad_accum_dtype: fp32 for BF16_Optimizer and for ZeRO-1/2's fp32 partition buffer "
        "(the memory model counts it); None: DeepSpeed's default, the model's dtype.",
    )
    communication_data_type: Literal["fp32", "bf16", "fp16"] = Field(description="Gradient dtype on the wire.")
    client_optimizer: str = Field(description="The optimizer class the framework passes to deepspeed.initialize.")
    pipeline_engine: bool = Field(description="DeepSpeed's PipelineEngine runs the stages (Megatron-DeepSpeed).")


class NcclDecision(Result):
    all_reduce_algo: str | None = Field(None, description="NCCL_ALGO value, or None: NCCL's own choice.")
    min_nccl_version: str | None = Field(None, description="Oldest NCCL that parses that value correctly.")
    reason: str = Field(description="Why it is set or left to NCCL.")
    cross_node_groups: list[str] = Field(default_factory=list, description="Parallel groups spanning nodes.")


class Decisions(Result):
    """Every choice the files make that follows from the plan (buckets, optimizer path, NCCL, timeouts, ...)."""

    deepspeed: DeepSpeedDecision | None = Field(None, description="DeepSpeed-based frameworks only.")
    nccl: NcclDecision
    cuda_device_max_connections: int | None = Field(None, description="CUDA_DEVICE_MAX_CONNECTIONS, None: unset.")
    cuda_device_max_connections_reason: str = ""
    userbuffers_skip_multicast: bool = Field(
        False, description="UB_SKIPMC=1: TP comm overlap over CUDA IPC, the GPUs' NVLink has no multicast (NVSwitch)."
    )
    distributed_timeout_minutes: int = Field(description="Collective timeout (--distributed-timeout-minutes).")
    timeout_reason: str = ""
    graceful_stop_s: int = Field(description="Seconds before a time limit or kill to stop and save.")
    manual_gc_interval: int | None = Field(None, description="--manual-gc-interval at scale; None: Python's GC.")
    fp8_recipe: str | None = Field(None, description="FP8 scaling recipe of an FP8 plan.")
    make_vocab_size_divisible_by: int = Field(128, description="Megatron's vocabulary padding divisor.")
    padded_vocab_size: int = Field(description="Vocabulary rows Megatron builds (vocab_size padded).")
    notes: list[str] = Field(default_factory=list, description="What was decided on your behalf, in words.")
