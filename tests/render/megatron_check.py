"""Read rendered Megatron arguments back and check them with megatron-core and with Megatron-LM's own rules.

megatron-core's `TransformerConfig` / `ModelParallelConfig` (and `MLATransformerConfig`) validate the model and
parallel flags in `__post_init__`; what lives only in Megatron-LM's `validate_args` (world size, batch
divisibility, pipeline splits, overlap flags, CUDA_DEVICE_MAX_CONNECTIONS) is re-checked by `megatron_lm_rules`,
each rule naming the check it mirrors (shared/docs/rules.md sec. 1).
"""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"


def known_flags(name: str) -> set[str]:
    lines = (DATA / name).read_text().splitlines()
    return {line for line in lines if line.startswith("--")}


def args_file_words(text: str) -> list[str]:
    """The words train.sh reads from megatron_args.txt (`read -ra`, comment lines skipped)."""
    words = []
    for line in text.splitlines():
        parts = line.split()
        if parts and not parts[0].startswith("#"):
            assert shlex.split(line) == parts, f"line needs quoting, train.sh would split it differently: {line!r}"
            words += parts
    return words


class Flags:
    """Flags in order: name -> value words (an empty tuple for a switch)."""

    def __init__(self, words: list[str]) -> None:
        self.items: dict[str, tuple[str, ...]] = {}
        name: str | None = None
        for word in words:
            if word.startswith("--"):
                assert word not in self.items, f"{word} given twice"
                name = word
                self.items[name] = ()
            else:
                assert name is not None, f"value {word!r} before any flag"
                self.items[name] = (*self.items[name], word)

    def has(self, name: str) -> bool:
        return name in self.items

    def one(self, name: str) -> str:
        values = self.items[name]
        assert len(values) == 1, f"{name}: expected one value, got {values}"
        return values[0]

    def int(self, name: str, default: int | None = None) -> int:
        if name not in self.items and default is not None:
            return default
        return int(self.one(name))

    def float(self, name: str) -> float:
        return float(self.one(name))


# Flags that configure Megatron-LM's training loop, data, optimizer wrapper or launcher, not megatron-core's
# TransformerConfig; `megatron_lm_rules` and the consistency tests check the ones that must agree.
NOT_IN_CORE = {
    # optimizer flags: checked by megatron-core's OptimizerConfig (build_optimizer_config)
    "--use-precision-aware-optimizer",
    "--exp-avg-dtype",
    "--exp-avg-sq-dtype",
    "--seq-length",
    "--max-position-embeddings",
    "--position-embedding-type",
    "--group-query-attention",
    "--micro-batch-size",
    "--global-batch-size",
    "--use-distributed-optimizer",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--no-overlap-p2p-communication",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--train-iters",
    "--lr",
    "--min-lr",
    "--lr-decay-style",
    "--lr-warmup-iters",
    "--optimizer",
    "--adam-beta1",
    "--adam-beta2",
    "--weight-decay",
    "--clip-grad",
    "--seed",
    "--log-interval",
    "--eval-interval",
    "--eval-iters",
    "--log-throughput",
    "--save",
    "--load",
    "--save-interval",
    "--mock-data",
    "--tokenizer-type",
    "--vocab-size",
    "--data-path",
    "--split",
    "--tokenizer-model",
    "--vocab-file",
    "--merge-file",
    "--initial-loss-scale",
    "--min-loss-scale",
    "--loss-scale-window",
    "--hysteresis",
    "--deepspeed",
    "--zero-stage",
    "--no-pipeline-parallel",
    "--deepspeed-activation-checkpointing",
    "--use-rotary-position-embeddings",
    "--no-position-embedding",
    "--use-flash-attn-v2",
    # training loop, data and checkpointing (megatron/training): checked by megatron_rules or the tests
    "--distributed-timeout-minutes",
    "--exit-signal-handler",
    "--exit-duration-in-mins",
    "--manual-gc",
    "--manual-gc-interval",
    "--make-vocab-size-divisible-by",
    "--no-create-attention-mask-in-dataloader",
    "--data-cache-path",
    "--cpu-optimizer",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--ckpt-format",
    "--grad-reduce-in-bf16",
    "--rotary-position-embeddings-theta",
    # RoPE of a non-MLA GPT is GPTModel's (built by check_rotary from these flags), MLA's is in its config
    "--rotary-base",
    "--rotary-percent",
    "--use-rope-scaling",
    "--rope-scaling-factor",
}
# Flag -> config field where Megatron-LM's name differs from the field (core_transformer_config_from_args).
RENAMED = {
    "--num-experts": "num_moe_experts",
    "--num-key-value-heads": "num_query_groups",
    "--decoder-first-pipeline-num-layers": "num_layers_in_first_pipeline_stage",
    "--decoder-last-pipeline-num-layers": "num_layers_in_last_pipeline_stage",
    "--fp8-format": "fp8",
    "--fp8-param-gather": "fp8_param",
    "--norm-epsilon": "layernorm_epsilon",
    "--layernorm-epsilon": "layernorm_epsilon",
    "--swiglu": "gated_linear_unit",
    "--hierarchical-context-parallel-sizes": "hierarchical_context_parallel_sizes",
}
STORE_FALSE = {"--disable-bias-linear": "add_bias_linear", "--no-rope-fusion": "apply_rope_fusion"}
HANDLED = {
    "--normalization",
    "--attention-backend",
    "--moe-layer-freq",
    "--multi-latent-attention",
    "--untie-embeddings-and-output-weights",
    "--window-size",
}


def _vpp(fl: Flags) -> int | None:
    pp = fl.int("--pipeline-model-parallel-size", 1)
    if fl.has("--num-virtual-stages-per-pipeline-rank"):
        return fl.int("--num-virtual-stages-per-pipeline-rank")
    if fl.has("--num-layers-per-virtual-pipeline-stage"):
        return fl.int("--num-layers") // pp // fl.int("--num-layers-per-virtual-pipeline-stage")
    return None


def _value(words: tuple[str, ...], list_field: bool) -> Any:
    """argparse's conversion: ints, then floats, else the string; several words (nargs='+') make a list."""

    def one(w: str) -> Any:
        for conv in (int, float):
            try:
                return conv(w)
            except ValueError:
                pass
        return w

    if not words:
        return True
    values = [one(w) for w in words]
    return values if list_field or len(values) > 1 else values[0]


def core_kwargs(fl: Flags, fields: set[str]) -> tuple[dict[str, Any], set[str]]:
    """Config keyword arguments from the flags (a flag's dest name or its rename, when it is a config field), and
    the flags they used."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.enums import AttnBackend

    kw: dict[str, Any] = {}
    used: set[str] = set()
    for name, words in fl.items.items():
        key = STORE_FALSE.get(name) or RENAMED.get(name) or name[2:].replace("-", "_")
        if name in STORE_FALSE and key in fields:
            kw[key] = False
        elif key in fields and name not in HANDLED:
            kw[key] = _value(words, key in ("recompute_modules", "hierarchical_context_parallel_sizes"))
        else:
            continue
        used.add(name)
    kw.setdefault("add_bias_linear", True)
    used.add("--disable-bias-linear")
    if kw.get("gated_linear_unit"):
        kw["activation_func"] = F.silu
    if fl.has("--normalization"):
        kw["normalization"] = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}.get(
            fl.one("--normalization"), fl.one("--normalization")
        )
    if fl.has("--attention-backend"):
        kw["attention_backend"] = AttnBackend[fl.one("--attention-backend")]
    if fl.has("--cpu-offloading-num-layers"):
        kw["cpu_offloading"] = fl.int("--cpu-offloading-num-layers") > 0  # Megatron-LM arguments.py L1236-1237
    if fl.has("--window-size"):  # arguments.py tuple_type: "left,right"
        kw["window_size"] = tuple(int(w) for w in fl.one("--window-size").strip("()").split(","))
    if fl.has("--moe-layer-freq"):
        kw["moe_layer_freq"] = eval(fl.one("--moe-layer-freq"), {"__builtins__": {}})  # Megatron evals it too
    used |= HANDLED & set(fl.items)
    kw["virtual_pipeline_model_parallel_size"] = _vpp(fl)
    if kw.get("pipeline_model_parallel_size", 1) > 1:
        kw["pipeline_dtype"] = torch.float16 if kw.get("fp16") else torch.bfloat16 if kw.get("bf16") else torch.float32
    if "fp8_recipe" in kw and not kw.get("fp8"):
        del kw["fp8_recipe"]
    return kw, used


def check_rotary(fl: Flags) -> Any:
    """GPTModel's RoPE as megatron-core builds it from the flags (models/common/embeddings/
    rotary_pos_embedding.py); None without RoPE or with MLA (whose RoPE is in MLATransformerConfig)."""
    if fl.has("--multi-latent-attention") or not (
        fl.has("--rotary-base") or fl.has("--rotary-position-embeddings-theta")
    ):
        return None
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    heads, hidden = fl.int("--num-attention-heads"), fl.int("--hidden-size")
    base = fl.int("--rotary-base") if fl.has("--rotary-base") else fl.int("--rotary-position-embeddings-theta")
    return RotaryEmbedding(
        kv_channels=fl.int("--kv-channels", hidden // heads),
        rotary_percent=fl.float("--rotary-percent"),
        rotary_base=base,
        rope_scaling=fl.has("--use-rope-scaling"),
        rope_scaling_factor=fl.float("--rope-scaling-factor") if fl.has("--rope-scaling-factor") else 8.0,
        use_cpu_initialization=True,
    )


def build_core_config(fl: Flags) -> Any:
    """Construct megatron-core's config classes from the flags; raises what megatron-core raises.

    Transformer Engine is not installed on CPU CI; the clusters run it. Its version probe is answered with
    2.8 (what the containers ship) so that the FP8/MoE checks run instead of failing on a missing package."""
    import dataclasses
    from unittest import mock

    from megatron.core import ModelParallelConfig
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig
    from packaging.version import Version

    cls = MLATransformerConfig if fl.has("--multi-latent-attention") else TransformerConfig
    kw, used = core_kwargs(fl, {f.name for f in dataclasses.fields(cls)})
    unmapped = set(fl.items) - used - NOT_IN_CORE
    assert not unmapped, f"flags neither checked by megatron-core nor by the Megatron-LM rules: {sorted(unmapped)}"
    parallel_keys = {f for f in ModelParallelConfig.__dataclass_fields__ if f in kw}
    ModelParallelConfig(**{k: kw[k] for k in parallel_keys})

    def te_at_least(version: str, check_equality: bool = True) -> bool:
        return Version("2.8.0") >= Version(version) if check_equality else Version("2.8.0") > Version(version)

    check_rotary(fl)
    build_optimizer_config(fl)
    import megatron.core.transformer.moe.moe_utils as moe_utils

    te_kernels = [mock.patch.object(moe_utils, name, object(), create=True) for name in TE_PERMUTE_KERNELS]
    with (
        mock.patch("megatron.core.transformer.transformer_config.is_te_min_version", te_at_least),
        contextlib.ExitStack() as stack,
    ):
        for patch in te_kernels:  # what Transformer Engine >= 2.1 exports for --moe-permute-fusion
            stack.enter_context(patch)
        return cls(**kw)


TE_PERMUTE_KERNELS = (
    "fused_permute",
    "fused_permute_with_probs",
    "fused_sort_chunks_by_index",
    "fused_sort_chunks_by_index_with_probs",
    "fused_unpermute",
)


def build_optimizer_config(fl: Flags) -> Any:
    """megatron-core's OptimizerConfig from the optimizer flags; raises what its `__post_init__` raises. Its
    precision-aware check imports Transformer Engine's FusedAdam (not installed on CPU CI): a stand-in with the
    keyword arguments TE >= 2.1 exports answers that import, so the checks Megatron runs next still run."""
    import sys
    import types
    from unittest import mock

    import torch
    from megatron.core.optimizer import OptimizerConfig

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

    def fused_adam(
        params: Any, master_weight_dtype: Any, exp_avg_dtype: Any, exp_avg_sq_dtype: Any, use_decoupled_grad: bool
    ) -> None:
        raise AssertionError("a signature stand-in, never called")

    optimizers = types.ModuleType("transformer_engine.pytorch.optimizers")
    optimizers.FusedAdam = fused_adam  # type: ignore[attr-defined]
    modules = {
        "transformer_engine": types.ModuleType("transformer_engine"),
        "transformer_engine.pytorch": types.ModuleType("transformer_engine.pytorch"),
        "transformer_engine.pytorch.optimizers": optimizers,
    }
    kw: dict[str, Any] = {
        "bf16": fl.has("--bf16"),
        "fp16": fl.has("--fp16"),
        "use_distributed_optimizer": fl.has("--use-distributed-optimizer"),
        "use_precision_aware_optimizer": fl.has("--use-precision-aware-optimizer"),
    }
    for name in ("--exp-avg-dtype", "--exp-avg-sq-dtype", "--main-params-dtype"):
        if fl.has(name):
            kw[name[2:].replace("-", "_")] = dtypes[fl.one(name)]
    with (
        mock.patch.dict(sys.modules, modules),
        mock.patch("megatron.core.optimizer.optimizer_config.is_te_min_version", lambda *a, **k: True, create=True),
    ):
        return OptimizerConfig(**kw)
