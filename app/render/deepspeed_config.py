"""The values of ds_config.json, formatted from the plan's decisions; templates/ds_config.json.j2 lays them out.

Bucket sizes, sub-groups, overlap, offload buffers, the BF16_Optimizer choice and the gradient wire dtype are
the plan's own (`Plan.decisions.deepspeed`, app/planner/decisions.py), so the file configures exactly what the
estimate assumed, also when a stored plan is rendered by newer code. Field names and defaults: rules.md sec. 3
(deepspeed/runtime/config.py, zero/config.py, zero/offload_config.py, precision_config.py,
swap_tensor/constants.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.results import DeepSpeedDecision, OffloadDecision, ZeroDecision
from app.render.facts import Facts

# DeepSpeed 0.19's `zero_optimization.leaf_module.classes` defaults (runtime/zero/leaf_module_config.py): transformers'
# sparse MoE blocks, gathered whole by ZeRO-3 (the planner's memory counts them so, states.stage_params). Written
# out for an MoE model under ZeRO-3, so the file shows what the plan assumes and a user adds another block's class.
ZERO3_LEAF_MODULES = (
    "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
    "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
    "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock",
)


@dataclass(frozen=True, slots=True)
class Optimizer:
    lr: float
    weight_decay: float
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    # torch's AdamW instead of DeepSpeed's FusedAdam (engine.py get_optimizer_configuration), where the stack's
    # optimizer is modelled as torch's (data/stacks.json costs.optimizer "torch-adamw": its multi-tensor temporaries
    # and time, as the measured H200 runs ran it); never with optimizer offload, which needs DeepSpeedCPUAdam
    torch_adam: bool = False


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
    zero: ZeroDecision
    offloads: tuple[tuple[str, OffloadDecision], ...]
    aio: bool
    activation_checkpointing: bool
    optimizer: Optimizer | None  # Megatron-DeepSpeed builds its own optimizer and scheduler from its arguments
    scheduler: Scheduler | None
    pipeline: bool
    leaf_modules: tuple[str, ...] = ()  # ZeRO-3 leaf module classes (an MoE model's sparse blocks)


def deepspeed_decision(f: Facts) -> DeepSpeedDecision:
    ds = f.decisions.deepspeed
    if ds is None:  # decisions.decide fills it for every DeepSpeed-based framework
        raise ValueError(f"plan #{f.plan.rank}: its decisions have no DeepSpeed section (framework {f.framework})")
    return ds


def ds_config(f: Facts) -> DsConfig:
    o, par, ds = f.options, f.par, deepspeed_decision(f)
    zero = ds.zero
    offloads = tuple(
        (n, d)
        for n, d in (("offload_optimizer", zero.offload_optimizer), ("offload_param", zero.offload_param))
        if d is not None
    )
    own_optimizer = f.framework == "deepspeed"
    return DsConfig(
        train_batch_size=f.global_batch_size,
        micro_batch_size=f.micro_batch_size,
        grad_accum_steps=f.grad_accum_steps,
        steps_per_print=o.log_interval,
        gradient_clipping=o.clip_grad,
        fp16=LossScale() if f.training.precision == "fp16" else None,
        communication_data_type=ds.communication_data_type,
        # the planner's fp32 accumulation, not only BF16_Optimizer's: ZeRO-2 under Megatron-DeepSpeed was counted
        # with an fp32 partition buffer the config never asked for (QA 2026-12-07); a plan stored before the field
        grad_accum_dtype=ds.grad_accum_dtype or ("fp32" if ds.bf16_optimizer else None),
        zero=zero,
        offloads=offloads,
        aio=any(d.device == "nvme" for _n, d in offloads),
        activation_checkpointing=par.recompute == "full",
        optimizer=Optimizer(o.lr, o.weight_decay, torch_adam=_torch_adam(f, zero)) if own_optimizer else None,
        scheduler=Scheduler(o.train_iters, max(1, o.warmup_iters), o.final_lr / o.lr) if own_optimizer else None,
        pipeline=ds.pipeline_engine,
        leaf_modules=ZERO3_LEAF_MODULES if zero.stage == 3 and f.model.is_moe else (),
    )


def _torch_adam(f: Facts, zero: ZeroDecision) -> bool:
    """The rendered job runs the optimizer the planner timed: DeepSpeed's FusedAdam updates in place at ~30 B of
    traffic per parameter, torch's multi-tensor AdamW allocates a group-sized temporary and moves ~80 B (step.py
    OPTIMIZER_BYTES); the stack's costs say which was timed."""
    return f.training.software.costs.optimizer == "torch-adamw" and zero.offload_optimizer is None
