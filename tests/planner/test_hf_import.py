"""Hugging Face config.json import for the supported key sets."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.planner import PlanRequest
from app.planner.hf_import import HF_DEFAULTS, from_hf_config

from .hf_configs import GPT2, LLAMA2_7B, MIXTRAL, QWEN2_MOE
from .hf_configs import QWEN3_MOE as QWEN3

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


QWEN25_7B = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1e6,
}


def test_qwen2_counts_its_qkv_biases() -> None:
    """Qwen2.5-7B: 7,615,616,512 parameters (Hugging Face), 28 x (3584 + 512 + 512) of them the Q, K and V biases,
    which the count left out although the import set add_qkv_bias (QA, 2026-12-06)."""
    assert params(QWEN25_7B) == (7_615_616_512, 7_615_616_512)


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
        match=r"model_type .bert. is not supported; supported: deepseek_v3, gpt2, gpt_neox, kimi_k2, llama",
    ):
        params({"model_type": "bert", "hidden_size": 768})
    incomplete = {k: v for k, v in LLAMA2_7B.items() if k != "num_hidden_layers"}
    with pytest.raises(ValidationError, match="lacks 'num_hidden_layers'"):
        params(incomplete)
    with pytest.raises(ValidationError, match="'hidden_size' must be a positive integer, got -5"):
        params({**LLAMA2_7B, "hidden_size": -5})


@pytest.mark.parametrize("kind", sorted(HF_DEFAULTS))
def test_defaults_of_absent_keys_are_transformers_own(kind: str) -> None:
    """A config.json that omits a key means that model type's default in transformers' config class."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(kind).to_dict()
    for key, value in HF_DEFAULTS[kind].items():
        assert cfg.get(key) == value, (kind, key, cfg.get(key))


def test_network_fields_are_imported() -> None:
    from .hf_configs import DEEPSEEK_V3, LLAMA31_8B, QWEN3_MOE

    llama = from_hf_config(LLAMA31_8B)
    assert llama["rotary_base"] == 500000.0 and llama["rope_scaling"]["type"] == "llama3"
    assert llama["norm_epsilon"] == 1e-5 and not llama["qk_layernorm"] and not llama["add_qkv_bias"]
    assert from_hf_config({**LLAMA2_7B, "rms_norm_eps": None})["norm_epsilon"] == 1e-6  # Llama's default
    qwen2 = from_hf_config(QWEN2_MOE)
    assert qwen2["add_qkv_bias"] and qwen2["moe_router_pre_softmax"] and qwen2["moe_shared_expert_gate"]
    qwen3 = from_hf_config(QWEN3_MOE)
    assert qwen3["qk_layernorm"] and not qwen3["moe_router_pre_softmax"] and qwen3["moe_aux_loss_coeff"] == 0.001
    ds = from_hf_config(DEEPSEEK_V3)
    assert ds["multi_latent_attention"] and ds["moe_router_score_function"] == "sigmoid"
    assert ds["moe_router_enable_expert_bias"] and ds["moe_router_topk_scaling_factor"] == 2.5
    assert (ds["moe_router_num_groups"], ds["moe_router_group_topk"], ds["moe_first_dense_layers"]) == (8, 4, 3)
    assert ds["rope_scaling"] == {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }
    with pytest.raises(ValueError, match="'attention_bias' is true"):
        from_hf_config({**LLAMA2_7B, "attention_bias": True})


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        ({"model_type": "mistral"}, (4096, None)),  # Mistral's default window, on every layer
        ({"model_type": "mistral", "sliding_window": None}, (None, None)),  # Mistral v0.2+: no window
        ({"model_type": "mistral", "sliding_window": 8192}, (None, None)),  # no shorter than the longest sequence
        ({"model_type": "qwen2", "sliding_window": 1024}, (None, None)),  # use_sliding_window is off by default
        (
            {"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2, "use_sliding_window": True,
             "sliding_window": 1024},
            (1024, None),
        ),
        (
            {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 128, "max_window_layers": 0},
            (128, None),
        ),
        (
            {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 128,
             "layer_types": ["sliding_attention"] * 5 + ["full_attention"]},  # Gemma-3's 5:1
            (128, 6),
        ),
    ],
)  # fmt: skip
def test_sliding_windows_are_imported_as_megatron_builds_them(
    update: dict[str, Any], expected: tuple[int | None, int | None]
) -> None:
    cfg = {**LLAMA2_7B, "num_hidden_layers": 6, "max_position_embeddings": 8192, **update}
    fields = from_hf_config(cfg)
    assert (fields.get("sliding_window"), fields.get("window_attn_skip_freq")) == expected
    windowed = PlanRequest(model={"hf_config": cfg}, cluster={"num_nodes": 1, "gpu": "H100-SXM"},
                           training={"global_batch_size": 8}).model.windowed_layers  # fmt: skip
    assert windowed == (0 if expected[0] is None else 6 - (6 // expected[1] if expected[1] else 0))
    with pytest.raises(ValueError, match=r"sliding_window\(128\) on layers wgwwgw"):
        from_hf_config({**cfg, "use_sliding_window": True, "sliding_window": 128,
                        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"] * 2})  # fmt: skip


@pytest.mark.parametrize("act", ["gelu", "gelu_pytorch_tanh", "relu"])
def test_a_gated_mlp_with_another_activation_is_refused(act: str) -> None:
    """transformers builds Llama's MLP gated whatever hidden_act says; it was imported as a plain two-matrix MLP
    (Llama-3-8B-shaped: 6.15B parameters instead of 8.03B) and rendered without --swiglu."""
    with pytest.raises(ValidationError, match=f"hidden_act '{act}': this model type's MLP is gated"):
        params({**LLAMA2_7B, "hidden_act": act})
    assert from_hf_config({**LLAMA2_7B, "hidden_act": "swish"})["swiglu"] is True


def test_the_model_type_is_checked_before_the_sequence_length() -> None:
    """An unsupported config.json was first asked for its sequence length; GPT-2's longest context is n_positions."""
    from app.service.errors import Refused
    from app.service.requests import parse_plan_request

    cluster, training = {"num_nodes": 1, "gpu": "H100-SXM"}, {"global_batch_size": 8}
    with pytest.raises(Refused) as exc:
        parse_plan_request({"model": {"hf_config": {"model_type": "gemma2"}}, "cluster": cluster, "training": training})
    assert [(e.field, e.message.split(";")[0]) for e in exc.value.errors] == [
        ("model.hf_config", "config.json model_type 'gemma2' is not supported")
    ]
    with pytest.raises(Refused, match=r"\(n_positions = 1024\)"):
        parse_plan_request({"model": {"hf_config": GPT2}, "cluster": cluster, "training": training})


@pytest.mark.parametrize("cfg", [QWEN2_MOE, QWEN3], ids=["qwen2_moe", "qwen3_moe"])
def test_a_sparse_step_other_than_1_is_refused_by_its_key(cfg: dict[str, Any]) -> None:
    """transformers makes layer i sparse only where `(i + 1) % decoder_sparse_step == 0`: with 2, every other layer
    is a dense MLP, a different network. It was ignored (30.53B parameters either way; QA, 2026-12-07); the planner
    models leading dense layers only, so it refuses by the key, as it does mlp_only_layers elsewhere."""
    assert params({**cfg, "decoder_sparse_step": 1}) == params(cfg)
    with pytest.raises(ValidationError, match=r"config.json decoder_sparse_step\(2\): only every layer"):
        params({**cfg, "decoder_sparse_step": 2})


def test_deepseek_router_normalisation_follows_its_score_function() -> None:
    """Megatron renormalises sigmoid top-k weights always, but a softmax router's are renormalised only after top-k
    (its default) and kept as the softmax over all experts with --moe-router-pre-softmax. A deepseek_v3 config with
    softmax scoring and norm_topk_prob false was refused as if it were sigmoid (QA, 2026-12-07)."""
    from .hf_configs import DEEPSEEK_V3

    def spec(**keys: Any) -> Any:
        return PlanRequest(
            model={"hf_config": {**DEEPSEEK_V3, **keys}, "seq_length": 4096},
            cluster={"num_nodes": 1, "gpu": "H100-SXM"},
            training={"global_batch_size": 8},
        ).model

    kept = spec(scoring_func="softmax", norm_topk_prob=False, topk_method="greedy")
    assert (kept.moe_router_score_function, kept.moe_router_pre_softmax) == ("softmax", True)
    renormalised = spec(scoring_func="softmax", norm_topk_prob=True, topk_method="greedy")
    assert (renormalised.moe_router_score_function, renormalised.moe_router_pre_softmax) == ("softmax", False)
    with pytest.raises(ValidationError, match="norm_topk_prob false with scoring_func sigmoid: Megatron renormalises"):
        spec(scoring_func="sigmoid", norm_topk_prob=False)
