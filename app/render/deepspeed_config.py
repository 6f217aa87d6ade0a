"""The values of ds_config.json, derived from the plan; templates/ds_config.json.j2 lays them out.

Bucket sizes and the BF16_Optimizer choice come from the planner's memory model (`zero_buckets`,
`deepspeed_uses_bf16_optimizer`), the gradient wire dtype from its step-time model (`grad_bytes`), so the file
configures exactly what the estimate assumed. Field names and defaults: rules.md sec. 3 (deepspeed/runtime/config.py,
zero/config.py, zero/offload_config.py, precision_config.py, swap_tensor/constants.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.memory import deepspeed_uses_bf16_optimizer, zero_buckets, zero_overlap_comm
from app.planner.step import grad_bytes
from app.render.facts import Facts


@dataclass(frozen=True, slots=True)
class Offload:
    device: str  # "cpu" or "nvme"
    nvme_path: str | None
    buffer_count: int | None  # NVMe staging buffers (DeepSpeed's defaults: optimizer 4, parameters 5)


@dataclass(frozen=True, slots=True)
class Zero:
    stage: int
    overlap_comm: bool
    reduce_bucket_size: int
    allgather_bucket_size: int | None  # stages 1-2
    stage3_prefetch_bucket_size: int | None
    stage3_param_persistence_threshold: int | None
    stage3_max_live_parameters: int | None
    offload_optimizer: Offload | None
    offload_param: Offload | None


@dataclass(frozen=True, slots=True)
class Optimizer:
    lr: float
    weight_decay: float
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8


@dataclass(frozen=True, slots=True)
class Scheduler:
    """WarmupCosineLR (deepspeed/runtime/lr_schedules.py): ratios of the optimizer's lr, linear warm-up as
    Megatron's --lr-warmup-iters (DeepSpeed's default is log); it needs at least one warm-up step."""

    total_num_steps: int
    warmup_num_steps: int
    cos_min_ratio: float
    warmup_type: str = "linear"


@dataclass(frozen=True, slots=True)
class LossScale:
    """Dynamic fp16 loss scaling, the same numbers as Megatron's --initial-loss-scale 65536 etc."""

    initial_scale_power: int = 16
    loss_scale_window: int = 1000
    hysteresis: int = 2
    min_loss_scale: float = 1.0


@dataclass(frozen=True, slots=True)
class DsConfig:
    train_batch_size: int
    micro_batch_size: int
    grad_accum_steps: int
    steps_per_print: int
    gradient_clipping: float
    fp16: LossScale | None  # None: bf16 (fp8 is not planned for DeepSpeed)
    communication_data_type: str
    grad_accum_dtype: str | None
    zero: Zero
    aio: bool
    activation_checkpointing: bool
    optimizer: Optimizer | None  # Megatron-DeepSpeed builds its own optimizer and scheduler from its arguments
    scheduler: Scheduler | None
    pipeline: bool


def _offload(device: str, nvme_path: str | None, buffers: int) -> Offload | None:
    if device == "none":
        return None
    return Offload(device, nvme_path if device == "nvme" else None, buffers if device == "nvme" else None)


def zero_section(f: Facts) -> Zero:
    par = f.par
    stage = par.zero_stage
    b = zero_buckets(f.model, stage)
    return Zero(
        stage=stage,
        overlap_comm=zero_overlap_comm(stage),  # the planner's memory model counts the doubled IPG buckets
        reduce_bucket_size=b.reduce_bucket_size,
        allgather_bucket_size=b.allgather_bucket_size if stage in (1, 2) else None,
        stage3_prefetch_bucket_size=b.prefetch_bucket_size if stage == 3 else None,
        stage3_param_persistence_threshold=b.param_persistence_threshold if stage == 3 else None,
        stage3_max_live_parameters=b.max_live_parameters if stage == 3 else None,
        offload_optimizer=_offload(par.offload_optimizer, f.cluster.nvme_path, 4) if stage else None,
        offload_param=_offload(par.offload_param, f.cluster.nvme_path, 5) if stage == 3 else None,
    )


def communication_dtype(f: Facts) -> str:
    """The dtype the planner's step-time model puts on the wire for gradients (step.grad_bytes)."""
    if grad_bytes(f.training, f.par) == 4:
        return "fp32"
    return "fp16" if f.training.precision == "fp16" else "bf16"


def ds_config(f: Facts) -> DsConfig:
    o, par = f.options, f.par
    zero = zero_section(f)
    own_optimizer = f.framework == "deepspeed"
    return DsConfig(
        train_batch_size=f.global_batch_size,
        micro_batch_size=f.micro_batch_size,
        grad_accum_steps=f.grad_accum_steps,
        steps_per_print=o.log_interval,
        gradient_clipping=o.clip_grad,
        fp16=LossScale() if f.training.precision == "fp16" else None,
        communication_data_type=communication_dtype(f),
        grad_accum_dtype="fp32" if deepspeed_uses_bf16_optimizer(f.training, par) else None,
        zero=zero,
        aio="nvme" in (par.offload_optimizer, par.offload_param),
        activation_checkpointing=par.recompute == "full",
        optimizer=Optimizer(o.lr, o.weight_decay) if own_optimizer else None,
        scheduler=Scheduler(o.train_iters, max(1, o.warmup_iters), o.final_lr / o.lr) if own_optimizer else None,
        pipeline=f.framework == "megatron-deepspeed" and par.pp > 1,
    )
