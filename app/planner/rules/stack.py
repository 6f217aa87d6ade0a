"""Rules on what the stack can run: its sharding modes (ZeRO, FSDP, Megatron-FSDP), parallelisms, overlaps,
precisions, recomputation, activation offload and model families, read from its capabilities (data/stacks.json)."""

from __future__ import annotations

from collections.abc import Iterable

from app.planner.layout import stage_shapes
from app.planner.rules.base import Ctx, Violation
from app.planner.space import DELAYED_FP8_NO_RECOMPUTE
from app.planner.specs import ModelSpec
from app.planner.stack import Stack, stacks
from app.planner.states import reduce_dtype


def sharding_supported(c: Ctx) -> Violation | None:
    """The stack shards as it can: Megatron's distributed optimizer (not ZeRO stages or ZeRO offload), DeepSpeed's
    ZeRO stages (not the distributed optimizer), FSDP's full shard."""
    p, s = c.par, c.training.software
    can = s.can
    if (p.zero_stage or p.offload_optimizer != "none" or p.offload_param != "none") and "zero" not in can.sharding:
        return Violation(
            "framework_support",
            f"{s.label} shards with {', '.join(can.sharding)}, not ZeRO stages or ZeRO offload "
            f"(choose framework deepspeed or megatron-deepspeed)",
        )
    if "zero" in can.sharding and p.zero_stage == 0 and c.training.precision == "bf16":
        return Violation("framework_support", _bf16_without_zero(c))
    if "zero" in can.sharding and p.zero_stage not in can.zero_stages:
        return Violation("framework_support", f"zero_stage({p.zero_stage}): {s.label} runs {list(can.zero_stages)}")
    if p.distributed_optimizer and "distributed_optimizer" not in can.sharding:
        return Violation("framework_support", f"{s.label} shards with ZeRO/FSDP, not Megatron's distributed optimizer")
    if p.megatron_fsdp is not None:
        return _megatron_fsdp_rule(c)
    if p.offload_optimizer != "none" and not can.offload:
        return Violation("framework_support", f"{s.label}: no optimizer offload")
    return None


def _megatron_fsdp_rule(c: Ctx) -> Violation | None:
    """Megatron-FSDP (Megatron-LM docs/discussions/megatron-fsdp-user-guide: --use-megatron-fsdp needs
    --use-distributed-optimizer, --ckpt-format fsdp_dtensor and CUDA_DEVICE_MAX_CONNECTIONS unset, which the renderer
    writes; validate_args asserts the last two). Sharding the compute weights (optim_grads_params) gathers every
    FSDP unit again for each micro-batch of each pipeline stage: planned with PP 1 only, as NVIDIA's FSDP recipes
    run."""
    p, s = c.par, c.training.software
    if "megatron_fsdp" not in s.can.sharding:
        return Violation("framework_support", f"{s.label} has no Megatron-FSDP")
    if not p.distributed_optimizer:
        return Violation("megatron_fsdp", "megatron_fsdp needs distributed_optimizer (--use-distributed-optimizer)")
    if p.dp * p.cp == 1:
        return Violation("megatron_fsdp", "megatron_fsdp over one data-parallel rank shards nothing")
    if p.megatron_fsdp == "optim_grads_params" and p.pp > 1:
        return Violation("megatron_fsdp", f"megatron_fsdp optim_grads_params with pp({p.pp}) > 1 is not planned")
    if c.training.precision == "fp16":
        return Violation("megatron_fsdp", "Megatron-FSDP is planned for bf16/fp8 training, not fp16")
    return None


def parallelism_supported(c: Ctx) -> Violation | None:
    p, s = c.par, c.training.software
    if (p.tp > 1 or p.sequence_parallel) and not s.can.tensor_parallel:
        return Violation("framework_support", f"{s.label} has no tensor parallelism here")
    if p.ep > 1 and not s.can.expert_parallel:
        return Violation("framework_support", f"{s.label}: expert parallelism is planned for Megatron-LM only")
    if p.pp > 1 and s.can.pipeline is None:
        return Violation(
            "framework_support",
            f"pp({p.pp}): {s.label} runs no pipeline here (use megatron-deepspeed for pipeline parallelism)",
        )
    return None


def overlap_supported(c: Ctx) -> Violation | None:
    p, s = c.par, c.training.software
    if p.tp_comm_overlap and not (s.can.tp_comm_overlap and p.sequence_parallel and p.tp > 1):
        return Violation("tp_comm_overlap", "tp_comm_overlap needs sequence parallelism, TP > 1 and Megatron-core")
    if p.tp_comm_overlap and c.model.multi_latent_attention:
        # megatron/core/extensions/transformer_engine.py TELinear.__init__ (core_v0.16.1 L531-541): a userbuffer
        # name other than qkv, proj, fc1, fc2 sets config.tp_comm_overlap = False on the config all layers share
        return Violation(
            "tp_comm_overlap",
            "tp_comm_overlap with multi-latent attention: megatron-core turns it off for every later layer at the "
            "first MLA projection (Transformer Engine userbuffers exist for qkv, proj, fc1 and fc2 only), so the "
            "TP communication would run exposed",
        )
    if p.moe_ep_overlap and not (s.can.ep_overlap and p.ep > 1 and p.recompute != "full"):
        return Violation("moe_ep_overlap", "EP overlap needs EP > 1, Megatron-core and no full recompute")
    if p.moe_ep_overlap and p.pp > 1 and p.vpp == 1:
        return Violation("moe_ep_overlap", "EP overlap with pipeline parallelism needs interleaving (vpp > 1)")
    if p.moe_token_dispatcher == "flex" and not (s.can.flex_dispatcher and p.ep > 1):
        return Violation(
            "moe_token_dispatcher",
            f"the flex dispatcher (DeepEP/HybridEP) needs expert parallelism (ep {p.ep}) and megatron-core "
            f"(MoEFlexTokenDispatcher; {s.label} has no such dispatcher)",
        )
    mtp = c.model.mtp_num_layers
    if p.moe_ep_overlap and mtp and (mtp > 1 or p.pp == 1):  # TransformerConfig.__post_init__
        wrong = [f"mtp_num_layers 1 (not {mtp})"] if mtp > 1 else []
        wrong += [f"pp > 1 (not {p.pp})"] if p.pp == 1 else []
        return Violation("moe_ep_overlap", f"EP overlap with multi-token prediction needs {' and '.join(wrong)}")
    return None


def precision_supported(c: Ctx) -> Violation | None:
    p, s, t = c.par, c.training.software, c.training
    if t.precision == "fp8" and not s.can.fp8:
        names = ", ".join(st.name for st in stacks() if st.can.fp8)
        return Violation("fp8_framework", f"FP8 is planned with training.stack {names}, not {s.label}")
    sharded = p.distributed_optimizer or "fsdp" in s.can.sharding
    if p.fp8_param_gather and not (t.precision == "fp8" and s.can.fp8_param_gather and sharded):
        return Violation(
            "fp8_param_gather", "fp8_param_gather needs FP8 training and the distributed optimizer (or FSDP)"
        )
    if t.optimizer_states == "bf16" and not p.distributed_optimizer:
        # OptimizerConfig.__post_init__: '--use-precision-aware-optimizer only supported with distributed optimizer'
        return Violation("optimizer_states", "bf16 optimizer states need the distributed optimizer")
    if p.fp8_recipe is not None and not fp8_recipe_runs(p.fp8_recipe, c.cluster.gpu.generation):
        needs = "Blackwell" if p.fp8_recipe == "mxfp8" else "Hopper or later (SM90)"
        return Violation("fp8_recipe", f"fp8_recipe {p.fp8_recipe} needs {needs}, not {c.cluster.gpu.name}")
    return None


# The GPU generations each FP8 recipe runs on where not every FP8 GPU does: MXFP8 scales 32-element blocks in
# Blackwell's hardware; Transformer Engine's Float8BlockScaling needs compute capability 9.0 or later (its
# block-scaled GEMM; the recipe support check raises before the first FP8 forward on Ada's 8.9: QA 2026-12-07)
FP8_RECIPE_GENERATIONS = {"mxfp8": ("blackwell",), "blockwise": ("hopper", "blackwell")}


def fp8_recipe_runs(recipe: str, generation: str) -> bool:
    """Whether FP8 recipe `recipe` runs on a GPU of `generation` (the rule and the request's input check ask)."""
    return generation in FP8_RECIPE_GENERATIONS.get(recipe, (generation,))


def recompute_modules_problem(
    m: ModelSpec, s: Stack, modules: Iterable[str], fp8_recipe: str | None = None
) -> str | None:
    """What makes selective recompute of `modules` impossible for this model on this stack (under `fp8_recipe`, an
    FP8 plan's), or None."""
    modules = tuple(modules)
    unknown = [x for x in modules if x not in s.can.recompute_modules]
    if unknown:
        return f"{s.label} cannot recompute modules {unknown}"
    if fp8_recipe == "delayed" and any(x in DELAYED_FP8_NO_RECOMPUTE for x in modules):
        # megatron-core 0.16.1 TransformerConfig.__post_init__ raises it (rendered plans did not start, QA)
        return "fp8_recipe delayed does not support moe_act and layernorm recompute (megatron-core TransformerConfig)"
    for mod in modules:
        if mod in ("moe", "moe_act", "shared_experts") and not m.is_moe:
            return f"recompute module {mod} needs an MoE model"
        if mod == "shared_experts" and not m.moe_shared_expert_intermediate_size:
            return f"recompute module shared_experts needs shared experts, which {m.name} has not"
        if mod == "mla_up_proj" and not m.multi_latent_attention:
            return "recompute module mla_up_proj needs multi-latent attention"
    return None


def recompute_supported(c: Ctx) -> Violation | None:
    """TransformerConfig: full recompute takes a method and a layer count (1..layers per stage); selective takes
    modules and no layer count; moe/moe_act/shared_experts need an MoE model, mla_up_proj MLA."""
    p, s, m = c.par, c.training.software, c.model
    if p.recompute == "selective":
        if p.recompute_num_layers is not None or p.recompute_method is not None:
            return Violation("recompute", "selective recompute takes no recompute_method/num_layers")
        bad = recompute_modules_problem(m, s, p.recompute_modules or (), p.fp8_recipe)
        return None if bad is None else Violation("recompute", bad)
    if p.recompute_modules:
        return Violation("recompute", "recompute_modules is for selective recompute")
    if p.recompute_num_layers is not None or p.recompute_method is not None:
        if p.recompute != "full" or not s.can.partial_recompute:
            return Violation("recompute", f"recompute_method/num_layers: full recompute with {s.label} only")
        per_stage = m.num_layers // p.pp
        k = p.recompute_num_layers
        if k is not None and not 1 <= k <= per_stage:
            return Violation("recompute", f"recompute_num_layers({k}) must be in 1..layers per stage({per_stage})")
        if k is not None and p.recompute_method == "uniform":
            return _uniform_groups(c, k)
    return None


def _uniform_groups(c: Ctx, k: int) -> Violation | None:
    """Uniform recompute checkpoints each model chunk in groups of k layers with no clamp at the chunk's end
    (transformer_block.py L536-541 at core_v0.16.1: layers[k*i : k*(i+1)]), so a chunk whose layer count k does not
    divide raises IndexError in the first backward (QA 2026-12-07: TP8 PP8 9/11 stages, uniform 2, "feasible")."""
    try:
        chunks = {n for shape in stage_shapes(c.model, c.training, c.par) for n in shape.chunks if n}
    except ValueError:  # a layout the pipeline rules refuse
        return None
    bad = sorted(n for n in chunks if n % k)
    if bad:
        return Violation(
            "recompute",
            f"recompute_method uniform groups every model chunk's layers by recompute_num_layers({k}): chunks of "
            f"{bad} layers are not multiples of it (use block, or a divisor)",
        )
    return None


def activation_offload_supported(c: Ctx) -> Violation | None:
    """TransformerConfig.__post_init__: CPU offloading needs fewer layers than the model has, PP 1 and no
    recomputation (megatron-core transformer_config.py, the cpu_offloading checks); and no EP overlap, which the
    config accepts but whose schedule never enters the offload context."""
    p, s, m = c.par, c.training.software, c.model
    n = p.cpu_offloading_num_layers
    if not n:
        return None
    if not s.can.activation_offload:
        return Violation("activation_offload", f"activation offload (cpu_offloading_num_layers): not with {s.label}")
    if n >= m.num_layers:
        return Violation("activation_offload", f"cpu_offloading_num_layers({n}) must be < num_layers({m.num_layers})")
    if p.pp > 1:
        return Violation("activation_offload", f"activation offload needs pp 1, not {p.pp} (megatron-core)")
    if p.recompute != "none":
        return Violation("activation_offload", f"activation offload does not run with recompute {p.recompute}")
    if p.moe_ep_overlap:
        # the EP-overlap schedule runs each layer's parts itself (models/common/model_chunk_schedule_plan.py,
        # gpt/fine_grained_callables.py), never TransformerBlock.forward, whose `offload_context` does the offload
        return Violation(
            "activation_offload",
            "activation offload (cpu_offloading_num_layers) does not run with moe_ep_overlap: the EP-overlap "
            "schedule bypasses TransformerBlock.forward, where megatron-core offloads",
        )
    return None


def model_fits_framework(c: Ctx) -> Violation | None:
    """What each stack can run: MoE with Megatron-core and Hugging Face models (every expert on each GPU: DeepSpeed
    ZeRO, FSDP), MLA with Megatron-core only; ALiBi only where the
    stack implements it (BigScience's Megatron-DeepSpeed fork, Hugging Face, llm-foundry); sliding-window attention
    with Megatron-core and Hugging Face models."""
    m, s = c.model, c.training.software
    if (m.is_moe and not s.can.moe) or (m.multi_latent_attention and not s.can.mla):
        mla = m.multi_latent_attention and not s.can.mla
        what = "multi-latent attention" if mla else "experts"
        names = ", ".join(st.name for st in stacks() if (st.can.mla if mla else st.can.moe))
        return Violation(
            "framework_support", f"{m.name} has {what}: planned with training.stack {names}, not {s.label}"
        )
    if m.mtp_num_layers and m.position_embedding_type not in ("rope", "none"):  # arguments.py validate_args
        return Violation(
            "framework_support",
            f"multi-token prediction runs with rope or no position embedding, not {m.position_embedding_type}",
        )
    if m.mtp_num_layers and not s.can.mtp:
        return Violation(
            "framework_support",
            f"{m.name} has {m.mtp_num_layers} multi-token prediction layer(s): megatron-core builds them "
            f"(--mtp-num-layers), {s.label} does not; set mtp_num_layers 0 to plan without them",
        )
    if m.sliding_window is not None and not s.can.sliding_window:
        return Violation(
            "framework_support",
            f"{m.name} has sliding-window attention (sliding_window {m.sliding_window}): {s.label} does not build it "
            f"(megatron-core --window-size and Hugging Face models do); unset sliding_window to plan full attention",
        )
    if m.position_embedding_type == "alibi" and not s.can.alibi:
        # the nearest stack that runs it: the same framework's, else a Megatron fork's for a Megatron user
        able = sorted(
            (st.framework != s.framework, "megatron" not in st.framework, st.name, st.framework)
            for st in stacks()
            if st.can.alibi
        )
        other, _, name, framework = able[0] if able else (False, False, "", "")
        where = f"training.stack {name!r}"
        if other:
            where = f"training.framework {framework!r} with {where}"
        choose = f"set {where} to plan it as that stack runs it, or " if able else ""
        return Violation(
            "framework_support",
            f"{m.name} uses ALiBi, which {s.label} does not implement (BigScience's Megatron-DeepSpeed fork, Hugging "
            f"Face and llm-foundry do); {choose}set position_embedding_type to rope for a same-size plan",
        )
    return None


def zero_with_pipeline(c: Ctx) -> Violation | None:
    """deepspeed/runtime/pipe/engine.py: ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism."""
    if c.training.software.can.pipeline == "deepspeed" and c.par.pp > 1 and c.par.zero_stage >= 2:
        return Violation(
            "zero_with_pipeline",
            f"zero_stage({c.par.zero_stage}) with pp({c.par.pp}) > 1: DeepSpeed's pipeline engine allows ZeRO 0-1 only",
        )
    return None


def offload_rules(c: Ctx) -> Violation | None:
    p = c.par
    if p.offload_param != "none" and p.zero_stage != 3:
        return Violation("offload_needs_zero", f"offload_param needs zero_stage 3, not {p.zero_stage}")
    if p.offload_optimizer != "none" and p.zero_stage == 0:
        return Violation("offload_needs_zero", "offload_optimizer needs zero_stage >= 1")
    if p.offload_optimizer == "nvme" and p.zero_stage != 3:
        return Violation("offload_needs_zero", "NVMe optimizer offload needs zero_stage 3 (ZeRO-Infinity)")
    if "nvme" in (p.offload_optimizer, p.offload_param) and not c.cluster.nvme_path:
        return Violation("nvme_needs_path", "NVMe offload needs cluster.nvme_path")
    return None


def fp8_supported(c: Ctx) -> Violation | None:
    if c.training.precision == "fp8" and c.cluster.gpu.fp8_TFLOPs is None:
        return Violation("fp8_unsupported", f"{c.cluster.gpu.name} has no FP8 tensor cores")
    return None


def _bf16_without_zero(c: Ctx) -> str:
    """What DeepSpeed does with bf16 and ZeRO off (engine.py `_do_optimizer_sanity_check`)."""
    if reduce_dtype(c.training, c.par) == "fp32":
        return (
            "DeepSpeed refuses bf16 weights with fp32 gradient accumulation without ZeRO (engine.py: unsupported "
            "mix of model_dtype and grad_accum_dtype); use zero_stage 1 (BF16_Optimizer)"
        )
    return "DeepSpeed bf16 without ZeRO keeps bf16 optimizer states (DDP_BFLOAT16); use zero_stage >= 1"
