"""Read rendered Megatron arguments back and check them with megatron-core and with Megatron-LM's own rules.

megatron-core's `TransformerConfig` / `ModelParallelConfig` (and `MLATransformerConfig`) validate the model and
parallel flags in `__post_init__`; what lives only in Megatron-LM's `validate_args` (world size, batch
divisibility, pipeline splits, overlap flags, CUDA_DEVICE_MAX_CONNECTIONS) is re-checked by `megatron_lm_rules`,
each rule naming the check it mirrors (shared/docs/rules.md sec. 1).
"""

from __future__ import annotations

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
    "--seq-length", "--max-position-embeddings", "--position-embedding-type", "--group-query-attention",
    "--micro-batch-size", "--global-batch-size", "--use-distributed-optimizer", "--overlap-grad-reduce",
    "--overlap-param-gather", "--no-overlap-p2p-communication", "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank", "--train-iters", "--lr", "--min-lr", "--lr-decay-style",
    "--lr-warmup-iters", "--optimizer", "--adam-beta1", "--adam-beta2", "--weight-decay", "--clip-grad", "--seed",
    "--log-interval", "--eval-interval", "--eval-iters", "--log-throughput", "--save", "--load", "--save-interval",
    "--mock-data", "--tokenizer-type", "--vocab-size", "--data-path", "--split", "--tokenizer-model",
    "--vocab-file", "--merge-file", "--initial-loss-scale", "--min-loss-scale", "--loss-scale-window",
    "--hysteresis", "--deepspeed", "--zero-stage", "--no-pipeline-parallel", "--deepspeed-activation-checkpointing",
    "--use-rotary-position-embeddings", "--no-position-embedding", "--use-flash-attn-v2",
}


def _vpp(fl: Flags) -> int | None:
    pp = fl.int("--pipeline-model-parallel-size", 1)
    if fl.has("--num-virtual-stages-per-pipeline-rank"):
        return fl.int("--num-virtual-stages-per-pipeline-rank")
    if fl.has("--num-layers-per-virtual-pipeline-stage"):
        return fl.int("--num-layers") // pp // fl.int("--num-layers-per-virtual-pipeline-stage")
    return None


SIMPLE_INTS = {
    "--num-layers": "num_layers", "--hidden-size": "hidden_size", "--num-attention-heads": "num_attention_heads",
    "--ffn-hidden-size": "ffn_hidden_size", "--num-query-groups": "num_query_groups",
    "--num-key-value-heads": "num_query_groups", "--kv-channels": "kv_channels",
    "--tensor-model-parallel-size": "tensor_model_parallel_size",
    "--pipeline-model-parallel-size": "pipeline_model_parallel_size",
    "--context-parallel-size": "context_parallel_size", "--expert-model-parallel-size": "expert_model_parallel_size",
    "--expert-tensor-parallel-size": "expert_tensor_parallel_size", "--num-experts": "num_moe_experts",
    "--moe-router-topk": "moe_router_topk", "--moe-ffn-hidden-size": "moe_ffn_hidden_size",
    "--moe-shared-expert-intermediate-size": "moe_shared_expert_intermediate_size",
    "--recompute-num-layers": "recompute_num_layers", "--fp8-amax-history-len": "fp8_amax_history_len",
    "--decoder-first-pipeline-num-layers": "num_layers_in_first_pipeline_stage",
    "--decoder-last-pipeline-num-layers": "num_layers_in_last_pipeline_stage",
    "--q-lora-rank": "q_lora_rank", "--kv-lora-rank": "kv_lora_rank", "--qk-head-dim": "qk_head_dim",
    "--qk-pos-emb-head-dim": "qk_pos_emb_head_dim", "--v-head-dim": "v_head_dim",
}
SIMPLE_STRS = {
    "--recompute-granularity": "recompute_granularity", "--recompute-method": "recompute_method",
    "--fp8-format": "fp8", "--fp8-amax-compute-algo": "fp8_amax_compute_algo",
    "--moe-token-dispatcher-type": "moe_token_dispatcher_type",
    "--moe-router-load-balancing-type": "moe_router_load_balancing_type", "--moe-router-dtype": "moe_router_dtype",
}
SIMPLE_FLOATS = {"--hidden-dropout": "hidden_dropout", "--attention-dropout": "attention_dropout",
                 "--moe-aux-loss-coeff": "moe_aux_loss_coeff",
                 "--moe-expert-capacity-factor": "moe_expert_capacity_factor"}
SWITCHES = {"--sequence-parallel": "sequence_parallel", "--bf16": "bf16", "--fp16": "fp16", "--swiglu":
            "gated_linear_unit", "--moe-grouped-gemm": "moe_grouped_gemm",
            "--untie-embeddings-and-output-weights": None, "--multi-latent-attention": None}


def core_kwargs(fl: Flags) -> tuple[dict[str, Any], set[str]]:
    """TransformerConfig keyword arguments from the flags, and the flags they used."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.enums import AttnBackend

    kw: dict[str, Any] = {}
    used: set[str] = set()
    for table, conv in ((SIMPLE_INTS, int), (SIMPLE_STRS, str), (SIMPLE_FLOATS, float)):
        for flag, key in table.items():
            if fl.has(flag):
                kw[key] = conv(fl.one(flag))
                used.add(flag)
    for flag, key in SWITCHES.items():
        if fl.has(flag):
            used.add(flag)
            if key:
                kw[key] = True
    if kw.get("gated_linear_unit"):
        kw["activation_func"] = F.silu
    kw["add_bias_linear"] = not fl.has("--disable-bias-linear")
    used.add("--disable-bias-linear")
    if fl.has("--normalization"):
        kw["normalization"] = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}.get(fl.one("--normalization"),
                                                                                  fl.one("--normalization"))
        used.add("--normalization")
    if fl.has("--attention-backend"):
        kw["attention_backend"] = AttnBackend[fl.one("--attention-backend")]
        used.add("--attention-backend")
    if fl.has("--moe-layer-freq"):
        kw["moe_layer_freq"] = eval(fl.one("--moe-layer-freq"), {"__builtins__": {}})  # Megatron evals it too
        used.add("--moe-layer-freq")
    kw["virtual_pipeline_model_parallel_size"] = _vpp(fl)
    if kw.get("pipeline_model_parallel_size", 1) > 1:
        kw["pipeline_dtype"] = torch.float16 if kw.get("fp16") else torch.bfloat16 if kw.get("bf16") else torch.float32
    return kw, used


def build_core_config(fl: Flags) -> Any:
    """Construct megatron-core's config classes from the flags; raises what megatron-core raises.

    Transformer Engine is not installed on CPU CI; the clusters run it. Its version probe is answered with
    2.8 (what the containers ship) so that the FP8/MoE checks run instead of failing on a missing package."""
    from unittest import mock

    from megatron.core import ModelParallelConfig
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig
    from packaging.version import Version

    kw, used = core_kwargs(fl)
    unmapped = set(fl.items) - used - NOT_IN_CORE
    assert not unmapped, f"flags neither checked by megatron-core nor by the Megatron-LM rules: {sorted(unmapped)}"
    parallel_keys = {f for f in ModelParallelConfig.__dataclass_fields__ if f in kw}
    ModelParallelConfig(**{k: kw[k] for k in parallel_keys})
    cls = MLATransformerConfig if fl.has("--multi-latent-attention") else TransformerConfig

    def te_at_least(version: str, check_equality: bool = True) -> bool:
        return Version("2.8.0") >= Version(version) if check_equality else Version("2.8.0") > Version(version)

    with mock.patch("megatron.core.transformer.transformer_config.is_te_min_version", te_at_least):
        return cls(**kw)
