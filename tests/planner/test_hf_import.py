"""Hugging Face config.json import for the supported key sets."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.planner import PlanRequest
from app.planner.hf_import import from_hf_config

LLAMA2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "_name_or_path": "meta-llama/Llama-2-7b-hf",
}
MIXTRAL = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
}
QWEN2_MOE = {
    "model_type": "qwen2_moe",
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "moe_intermediate_size": 2560,
    "shared_expert_intermediate_size": 20480,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
}
QWEN3 = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "vocab_size": 50257}
NEOX = {
    "model_type": "gpt_neox",
    "hidden_size": 6144,
    "num_hidden_layers": 44,
    "num_attention_heads": 64,
    "intermediate_size": 24576,
    "vocab_size": 50432,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}


def params(cfg: dict[str, Any], **overrides: Any) -> tuple[int, int]:
    r = PlanRequest(
        model={"hf_config": cfg, **overrides},
        cluster={"num_nodes": 1, "gpu": "H100-SXM"},
        training={"global_batch_size": 8},
    )
    return r.model.num_parameters, r.model.num_active_parameters


@pytest.mark.parametrize(
    ("cfg", "total", "active"),
    [
        (LLAMA2_7B, 6_738_415_616, 6_738_415_616),
        (MIXTRAL, 46_702_792_704, 12_879_925_248),
        (QWEN2_MOE, 57.4e9, 14.2e9),
        (QWEN3, 30.5e9, 3.35e9),
        (GPT2, 124_439_808, 124_439_808),  # GPT-2 small: 124M with tied embeddings
        (NEOX, 20.55e9, 20.55e9),  # GPT-NeoX-20B
    ],
    ids=["llama", "mixtral", "qwen2_moe", "qwen3_moe", "gpt2", "gpt_neox"],
)
def test_counts_match_the_published_models(cfg: dict[str, Any], total: float, active: float) -> None:
    got_total, got_active = params(cfg)
    assert got_total == pytest.approx(total, rel=0.01)
    assert got_active == pytest.approx(active, rel=0.02)


def test_overrides_win_and_sequence_defaults_to_max_positions() -> None:
    r = PlanRequest(
        model={"hf_config": MIXTRAL, "seq_length": 4096},
        cluster={"num_nodes": 1, "gpu": "H100-SXM"},
        training={"global_batch_size": 8},
    )
    assert r.model.seq_length == 4096 and r.model.num_experts == 8 and r.model.swiglu
    assert from_hf_config(MIXTRAL)["seq_length"] == 32768
    assert from_hf_config(LLAMA2_7B)["name"] == "meta-llama/Llama-2-7b-hf"


def test_unsupported_and_incomplete_configs_are_refused_clearly() -> None:
    with pytest.raises(
        ValidationError,
        match="model_type .bert. is not supported; supported: deepseek_v3, gpt2, gpt_neox, kimi_k2, llama",
    ):
        params({"model_type": "bert", "hidden_size": 768})
    incomplete = {k: v for k, v in LLAMA2_7B.items() if k != "num_hidden_layers"}
    with pytest.raises(ValidationError, match="lacks 'num_hidden_layers'"):
        params(incomplete)
    with pytest.raises(ValidationError, match="'hidden_size' must be a positive integer, got -5"):
        params({**LLAMA2_7B, "hidden_size": -5})
