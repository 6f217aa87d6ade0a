"""What the renderer can turn into files that start a real job, checked before anything is rendered.

These are limits of the tools (Megatron-LM, Megatron-DeepSpeed, DeepSpeed's engine, examples/train_gpt.py) that
the planner's rules do not (yet) enforce; `unsupported` names each with the numbers, and `render` refuses such a
plan with a ValueError instead of writing files that would fail at start-up.
"""

from __future__ import annotations

from app.planner.results import Plan
from app.planner.specs import ModelSpec, TrainingSpec

EXAMPLE_TRAINER = "examples/train_gpt.py"


def _megatron_limits(model: ModelSpec, framework: str) -> list[str]:
    out = []
    if model.position_embedding_type == "alibi":
        out.append(f"model.position_embedding_type: ALiBi ({model.name}) has no flag in Megatron-LM or "
                   f"Megatron-DeepSpeed; choose rope or learned_absolute")
    if framework != "megatron" and model.is_moe:
        out.append(f"model.num_experts: mixture-of-experts models are rendered for Megatron-LM only "
                   f"(framework {framework})")
    if framework != "megatron" and model.multi_latent_attention:
        out.append(f"model.multi_latent_attention: MLA is rendered for Megatron-LM only (framework {framework})")
    return out


def _deepspeed_limits(model: ModelSpec, plan: Plan, entrypoint: str) -> list[str]:
    par, out = plan.parallel, []
    if par.pp > 1 or par.tp > 1 or par.cp > 1 or par.ep > 1:
        out.append(f"framework deepspeed: the plain DeepSpeed engine trains data parallel + ZeRO only, but plan "
                   f"#{plan.rank} has tp({par.tp}) pp({par.pp}) cp({par.cp}) ep({par.ep}); use megatron-deepspeed "
                   f"for pipeline or tensor parallelism")
    if model.is_moe or model.multi_latent_attention:
        out.append(f"model {model.name}: MoE and MLA models are rendered for Megatron-LM only (framework deepspeed)")
    if entrypoint == EXAMPLE_TRAINER and model.position_embedding_type not in ("rope", "learned_absolute"):
        out.append(f"model.position_embedding_type: {EXAMPLE_TRAINER} supports rope and learned_absolute, "
                   f"not {model.position_embedding_type}")
    return out


def unsupported(model: ModelSpec, training: TrainingSpec, plan: Plan, entrypoint: str,
                accelerator: str = "cuda") -> list[str]:
    """Why this plan cannot be rendered into files that start (empty: it can)."""
    if training.framework == "deepspeed":
        out = _deepspeed_limits(model, plan, entrypoint)
    else:
        out = _megatron_limits(model, training.framework)
    if accelerator == "cpu" and training.framework != "deepspeed":
        out.append(f"accelerator: cpu runs only the DeepSpeed framework's trainer, not {training.framework}")
    if training.framework != "megatron" and training.precision == "fp8":
        out.append("training.precision: FP8 (Transformer Engine) is rendered for Megatron-LM only")
    return out
