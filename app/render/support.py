"""What the renderer can turn into files that start a real job, checked before anything is rendered.

These are limits of the tools (Megatron-LM, Megatron-DeepSpeed, DeepSpeed's engine, examples/train_gpt.py) that
the planner's rules do not (yet) enforce; `unsupported` names each with the numbers, and `render` refuses such a
plan with a ValueError instead of writing files that would fail at start-up or train another network.
"""

from __future__ import annotations

from app.planner.network import RopeScaling
from app.planner.results import Plan
from app.planner.specs import ModelSpec, ParallelConfig, TrainingSpec

EXAMPLE_TRAINER = "examples/train_gpt.py"
RENDERED_FRAMEWORKS = ("megatron", "megatron-deepspeed", "deepspeed")
# MLATransformerConfig's YaRN constants without a Megatron-LM flag (core_v0.16.1 transformer_config.py).
MEGATRON_YARN_FIXED = {"beta_fast": 32.0, "beta_slow": 1.0, "original_max_position_embeddings": 4096}


def _rope_limits(model: ModelSpec, framework: str) -> list[str]:
    scaling: RopeScaling | None = model.rope_scaling
    if scaling is None:
        return []
    if framework != "megatron":
        return [f"model.rope_scaling: {scaling.type} RoPE scaling has no flag in {framework}"]
    if scaling.type == "llama3":
        bad = scaling.megatron_llama3_mismatch()
        return [f"model.rope_scaling: megatron-core's llama3 scaling fixes {', '.join(bad)}"] if bad else []
    if not model.multi_latent_attention:
        return ["model.rope_scaling: Megatron-LM runs YaRN only with multi-latent attention (--rope-type yarn)"]
    bad = [f"{k}({getattr(scaling, k)}) != {v}" for k, v in MEGATRON_YARN_FIXED.items() if getattr(scaling, k) != v]
    return [f"model.rope_scaling: Megatron-LM has no flag for yarn {', '.join(bad)}"] if bad else []


def _megatron_limits(model: ModelSpec, framework: str) -> list[str]:
    out = _rope_limits(model, framework)
    if model.parallel_residual:
        out.append(
            f"model.parallel_residual: {model.name} adds attention and MLP on one residual (GPT-NeoX); "
            f"Megatron's transformer layer runs them one after the other"
        )
    if model.position_embedding_type == "alibi":
        out.append(
            f"model.position_embedding_type: ALiBi ({model.name}) has no flag in Megatron-LM or "
            f"Megatron-DeepSpeed; choose rope or learned_absolute"
        )
    if framework != "megatron" and model.is_moe:
        out.append(
            f"model.num_experts: mixture-of-experts models are rendered for Megatron-LM only (framework {framework})"
        )
    if framework != "megatron" and model.multi_latent_attention:
        out.append(f"model.multi_latent_attention: MLA is rendered for Megatron-LM only (framework {framework})")
    if framework != "megatron":
        missing = [
            name for name, on in (("qk_layernorm", model.qk_layernorm), ("add_qkv_bias", model.add_qkv_bias)) if on
        ]
        if missing:
            out.append(f"model.{missing[0]}: Megatron-DeepSpeed has no flag for {' or '.join(missing)}")
    return out


def _mds_parallel_limits(par: ParallelConfig) -> list[str]:
    """Megatron-DeepSpeed runs DeepSpeed's PipelineModule with partition_method='type:transformer' fixed
    (megatron/model/gpt_model.py L463) and has none of Megatron-LM's newer pipeline/overlap flags."""
    out = []
    if par.partition_method not in (None, "type:transformer"):
        out.append(
            f"parallel.partition_method({par.partition_method}): Megatron-DeepSpeed's GPTModelPipe always "
            f"partitions by type:transformer (megatron/model/gpt_model.py)"
        )
    uneven = {
        "first_stage_layers": par.first_stage_layers,
        "last_stage_layers": par.last_stage_layers,
        "pipeline_layout": par.pipeline_layout,
    }
    for name, value in uneven.items():
        if value is not None:
            out.append(f"parallel.{name}({value}): Megatron-DeepSpeed has no flag for it")
    for name in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split", "tp_comm_overlap"):
        if getattr(par, name):
            out.append(f"parallel.{name}: Megatron-DeepSpeed has no flag for it")
    if par.megatron_fsdp is not None:
        out.append("parallel.megatron_fsdp: Megatron-FSDP is Megatron-LM's, not Megatron-DeepSpeed's")
    if par.recompute_modules and set(par.recompute_modules) != {"core_attn"}:
        out.append(
            f"parallel.recompute_modules({', '.join(par.recompute_modules)}): Megatron-DeepSpeed's selective "
            f"recompute covers the attention core only"
        )
    return out


def _megatron_lm_parallel_limits(training: TrainingSpec, par: ParallelConfig, generation: str) -> list[str]:
    out = []
    if par.fp8_param_gather and not (par.distributed_optimizer or par.megatron_fsdp):
        out.append(
            "parallel.fp8_param_gather: Megatron needs the distributed optimizer or Megatron-FSDP for FP8 "
            "primary weights (arguments.py)"
        )
    recipe = par.fp8_recipe or training.fp8_recipe
    if training.precision == "fp8" and recipe == "mxfp8" and generation != "blackwell":
        out.append(f"parallel.fp8_recipe: mxfp8 needs Blackwell tensor cores, not {generation}")
    return out


def _deepspeed_limits(model: ModelSpec, plan: Plan, entrypoint: str) -> list[str]:
    par, out = plan.parallel, []
    if par.pp > 1 or par.tp > 1 or par.cp > 1 or par.ep > 1:
        out.append(
            f"framework deepspeed: the plain DeepSpeed engine trains data parallel + ZeRO only, but plan "
            f"#{plan.rank} has tp({par.tp}) pp({par.pp}) cp({par.cp}) ep({par.ep}); use megatron-deepspeed "
            f"for pipeline or tensor parallelism"
        )
    if model.multi_latent_attention:
        out.append("model.multi_latent_attention: MLA is rendered for Megatron-LM only (framework deepspeed)")
    if model.is_moe and entrypoint == EXAMPLE_TRAINER:
        out += [
            f"model.{name}: {EXAMPLE_TRAINER} --model-impl hf builds transformers' Mixtral and Qwen3-MoE blocks, "
            f"not {what}; give your Hugging Face training script as the entrypoint (ds_config.json is the same)"
            for name, what, present in (
                ("moe_shared_expert_intermediate_size", "shared experts", model.moe_shared_expert_intermediate_size),
                ("moe_first_dense_layers", "leading dense layers", model.moe_first_dense_layers),
                ("swiglu", "a GELU MLP", not model.swiglu),
                ("normalization", model.normalization, model.normalization != "RMSNorm"),
                ("position_embedding_type", model.position_embedding_type, model.position_embedding_type != "rope"),
                ("sliding_window", "sliding-window attention", model.sliding_window is not None),
            )
            if present
        ]
    if entrypoint == EXAMPLE_TRAINER and model.position_embedding_type not in ("rope", "learned_absolute"):
        out.append(
            f"model.position_embedding_type: {EXAMPLE_TRAINER} supports rope and learned_absolute, "
            f"not {model.position_embedding_type}"
        )
    return out


def unsupported(
    model: ModelSpec,
    training: TrainingSpec,
    plan: Plan,
    entrypoint: str,
    accelerator: str = "cuda",
    generation: str = "hopper",
) -> list[str]:
    """Why this plan cannot be rendered into files that start (empty: it can)."""
    framework = training.framework
    if framework not in RENDERED_FRAMEWORKS:
        return [f"training.framework: {framework} is not rendered (rendered: {', '.join(RENDERED_FRAMEWORKS)})"]
    if framework == "deepspeed":
        out = _deepspeed_limits(model, plan, entrypoint)
    else:
        out = _megatron_limits(model, framework)
        if framework == "megatron":
            out += _megatron_lm_parallel_limits(training, plan.parallel, generation)
        else:
            out += _mds_parallel_limits(plan.parallel)
    if accelerator == "cpu" and framework != "deepspeed":
        out.append(f"accelerator: cpu runs only the DeepSpeed framework's trainer, not {framework}")
    if framework != "megatron" and training.precision == "fp8":
        out.append("training.precision: FP8 (Transformer Engine) is rendered for Megatron-LM only")
    return out
