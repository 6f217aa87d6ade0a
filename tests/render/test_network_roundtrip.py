"""Issue 12, defect 7: the trained network is the one named. For each preset family, a released model's
config.json goes through the Hugging Face import, a plan and megatron_args.txt, and what megatron-core builds from
those flags (TransformerConfig / MLATransformerConfig, the RoPE module) equals what transformers builds from the
same config.json: widths, norm epsilon, init std, QK norm, QKV bias, the MoE router, and the RoPE frequencies
(transformers' own ROPE_INIT_FUNCTIONS against megatron-core's RotaryEmbedding / YarnRotaryEmbedding).

The config.json values are those of the released checkpoints (model cards / config.json on the Hugging Face hub);
transformers' config classes fill every key they omit with that model type's default, as `from_pretrained` would.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from megatron_check import Flags, args_file_words, build_core_config, check_rotary
from render_cases import fixed_result
from test_megatron_args import check_megatron

from app.planner import catalog
from app.planner.hf_import import from_hf_config
from app.planner.specs import ModelSpec
from app.render import render

transformers = pytest.importorskip("transformers")

from tests.planner.hf_configs import DEEPSEEK_V3, GPT2, LLAMA2_7B, LLAMA31_8B, MIXTRAL, QWEN2_MOE, QWEN3_MOE  # noqa: E402

FAMILIES = {
    "llama-2": (LLAMA2_7B, "llama-2-7b"),
    "llama-3.1": (LLAMA31_8B, "llama-3-8b-128k"),
    "mixtral": (MIXTRAL, "mixtral-8x7b"),
    "qwen2-moe": (QWEN2_MOE, "qwen2-57b-a14b"),
    "qwen3-moe": (QWEN3_MOE, "qwen3-30b-a3b"),
    "deepseek-v3": (DEEPSEEK_V3, None),
    "gpt2": (GPT2, None),
}
NETWORK = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "ffn_hidden_size",
    "vocab_size",
    "rotary_base",
    "rope_scaling",
    "norm_epsilon",
    "init_method_std",
    "qk_layernorm",
    "add_qkv_bias",
    "num_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_router_pre_softmax",
    "moe_aux_loss_coeff",
    "moe_shared_expert_gate",
    "kv_channels",
)


def hf(cfg: dict[str, Any]) -> Any:
    """transformers' config for this config.json (defaults filled as from_pretrained would)."""
    return transformers.AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})


def planned(cfg: dict[str, Any]) -> tuple[ModelSpec, Flags, Any]:
    """config.json -> a plan -> megatron_args.txt -> megatron-core's config."""
    arts = planned_arts(cfg)
    check_megatron(arts)
    fl = Flags(args_file_words(arts.files["megatron_args.txt"]))
    return ModelSpec(**from_hf_config(cfg)), fl, build_core_config(fl)


def planned_arts(cfg: dict[str, Any]) -> Any:
    """config.json -> a plan -> its files (four or five layers so that it is quick; the rest as released)."""
    fields = {**from_hf_config(cfg), "num_layers": 4 if cfg["model_type"] != "deepseek_v3" else 5, "seq_length": 4096}
    if cfg["model_type"] == "deepseek_v3":
        fields["moe_first_dense_layers"] = 1
    moe = "num_experts" in fields
    par = {"tp": 2, "dp": 4, "ep": 4 if moe else 1, "sequence_parallel": True, "distributed_optimizer": True}
    req = {
        "model": fields,
        "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 64, "framework": "megatron"},
    }
    return render(fixed_result(req, par))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_config_json_to_megatron_builds_the_same_network(family: str, megatron_core: Any) -> None:
    cfg, _preset = FAMILIES[family]
    h, (_model, _fl, core) = hf(cfg), planned(cfg)
    assert core.hidden_size == h.hidden_size and core.num_attention_heads == h.num_attention_heads
    assert core.init_method_std == h.initializer_range
    eps = getattr(h, "rms_norm_eps", None) or getattr(h, "layer_norm_epsilon", None)
    assert core.layernorm_epsilon == pytest.approx(eps)
    kind = cfg["model_type"]
    assert core.qk_layernorm == (kind.startswith("qwen3") or kind == "deepseek_v3")
    assert core.add_qkv_bias == kind.startswith("qwen2")
    if getattr(h, "num_key_value_heads", None) and kind != "deepseek_v3":
        assert (core.num_query_groups or core.num_attention_heads) == h.num_key_value_heads
    if kind in ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3"):
        assert core.moe_router_topk == h.num_experts_per_tok
        assert core.moe_aux_loss_coeff == pytest.approx(getattr(h, "router_aux_loss_coef", 1e-4))
        # Mixtral renormalises its top-k softmax (Megatron's default); Qwen-MoE follows norm_topk_prob
        assert core.moe_router_pre_softmax == (kind == "deepseek_v3" or not getattr(h, "norm_topk_prob", True))
    if kind == "deepseek_v3":
        assert core.moe_router_score_function == "sigmoid" and core.moe_router_enable_expert_bias
        assert (core.moe_router_num_groups, core.moe_router_group_topk) == (h.n_group, h.topk_group)
        assert core.moe_router_topk_scaling_factor == h.routed_scaling_factor
        assert (core.q_lora_rank, core.kv_lora_rank, core.qk_head_dim, core.qk_pos_emb_head_dim, core.v_head_dim) == (
            h.q_lora_rank,
            h.kv_lora_rank,
            h.qk_nope_head_dim,
            h.qk_rope_head_dim,
            h.v_head_dim,
        )


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "gpt2"])
def test_rope_frequencies_are_the_released_models(family: str, megatron_core: Any) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg, _preset = FAMILIES[family]
    h, (_model, fl, core) = hf(cfg), planned(cfg)
    scaling = getattr(h, "rope_scaling", None) or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    theirs, _attention_scale = ROPE_INIT_FUNCTIONS[kind](h, "cpu")
    # MLA: megatron-core's YaRN frequencies (YarnRotaryEmbedding.get_emb); else GPTModel's RotaryEmbedding
    ours = yarn_inv_freq(core) if cfg["model_type"] == "deepseek_v3" else check_rotary(fl).inv_freq
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=1e-5, atol=0)


def yarn_inv_freq(core: Any) -> torch.Tensor:
    """The inverse frequencies YarnRotaryEmbedding.get_emb computes (its own module functions; get_emb itself
    moves them to CUDA)."""
    from megatron.core.models.common.embeddings import yarn_rotary_pos_embedding as yarn

    dim, base = core.qk_pos_emb_head_dim, core.rotary_base
    extra = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    inter = extra / core.rotary_scaling_factor
    low, high = yarn._yarn_find_correction_range(
        core.beta_fast, core.beta_slow, dim, base, core.original_max_position_embeddings, True
    )
    mask = 1.0 - yarn._yarn_linear_ramp_mask(low, high, dim // 2, device="cpu").to(dtype=torch.float32)
    return inter * (1 - mask) + extra * mask


def test_the_check_can_fail(megatron_core: Any) -> None:
    """Megatron's default base (10000) is not Llama-3.1's: the frequencies differ."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    _model, fl, _core = planned(LLAMA31_8B)
    fl.items["--rotary-base"] = ("10000",)
    theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](hf(LLAMA31_8B), "cpu")
    assert not torch.allclose(check_rotary(fl).inv_freq, theirs)


@pytest.mark.parametrize("family", [f for f, (_c, p) in FAMILIES.items() if p])
def test_presets_are_the_released_config(family: str) -> None:
    cfg, preset = FAMILIES[family]
    imported = ModelSpec(**{**from_hf_config(cfg), "seq_length": catalog.model_fields(preset)["seq_length"]})
    ours = ModelSpec(**catalog.model_fields(preset))
    assert {k: getattr(imported, k) for k in NETWORK} == {k: getattr(ours, k) for k in NETWORK}


def test_what_megatron_cannot_build_is_refused() -> None:
    neox = {
        "model_type": "gpt_neox",
        "hidden_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "intermediate_size": 2048,
        "vocab_size": 50432,
        "max_position_embeddings": 2048,
    }
    req = {
        "model": {"hf_config": neox},
        "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 64, "framework": "megatron"},
    }
    with pytest.raises(ValueError, match=r"model\.parallel_residual"):
        render(fixed_result(req, {"tp": 1, "dp": 8}))
    # Qwen2 windows the layers from max_window_layers on: not every layer but each n-th
    qwen_tail = {**LLAMA2_7B, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 1024}
    with pytest.raises(ValueError, match=r"sliding_window\(1024\) on layers g{28}w{4} .*not planned or rendered"):
        from_hf_config({**qwen_tail, "max_window_layers": 28})
    with pytest.raises(ValueError, match="rope_scaling type 'linear' is not supported"):
        from_hf_config({**LLAMA2_7B, "rope_scaling": {"type": "linear", "factor": 2.0}})
    odd = {**LLAMA31_8B, "rope_scaling": {**LLAMA31_8B["rope_scaling"], "high_freq_factor": 2.0}}
    req = {
        "model": {"hf_config": odd, "num_layers": 2, "seq_length": 4096},
        "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 64, "framework": "megatron"},
    }
    with pytest.raises(ValueError, match=r"llama3 scaling fixes high_freq_factor\(2.0\) != 4.0"):
        render(fixed_result(req, {"tp": 1, "dp": 8}))


WINDOWED = {
    # Mistral-7B-v0.1: a 4,096-token window on every layer (its config.json)
    "mistral-every-layer": {
        **LLAMA2_7B,
        "model_type": "mistral",
        "sliding_window": 4096,
        "max_position_embeddings": 32768,
    },
    # gpt-oss / Gemma-2 style: windowed and global layers alternate (config.json layer_types)
    "alternating": {
        **LLAMA2_7B,
        "model_type": "qwen2",
        "use_sliding_window": True,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 16,
    },
}


@pytest.mark.parametrize("case", list(WINDOWED))
def test_sliding_windows_are_the_released_models(case: str, megatron_core: Any) -> None:
    """megatron-core's window on each layer (TransformerConfig.window_size and is_layer_window_attention) is the
    window transformers gives that layer: the same keys before each query, on the same layers."""
    from megatron.core.transformer.utils import is_layer_window_attention

    cfg = WINDOWED[case]
    h = hf(cfg)
    arts = planned_arts({**cfg, "num_hidden_layers": 32})
    check_megatron(arts)
    core = build_core_config(Flags(args_file_words(arts.files["megatron_args.txt"])))
    theirs = getattr(h, "layer_types", None) or ["sliding_attention"] * h.num_hidden_layers
    ours = [is_layer_window_attention(core.window_size, core.window_attn_skip_freq, n) for n in range(1, 5)]
    assert ours == [t == "sliding_attention" for t in theirs[:4]]
    # transformers' sliding_window counts the query itself; megatron-core's left window does not
    assert core.window_size == (h.sliding_window - 1, 0)
