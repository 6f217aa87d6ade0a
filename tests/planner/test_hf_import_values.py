"""config.json values of the wrong type or range: refused with the key and the value, never rounded, coerced into
another model, or reported as Python's own exception text (QA, the config.json importer)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from app.planner import PlanRequest
from app.planner.hf_import import from_hf_config

from .hf_configs import DEEPSEEK_V3, GPT2, LLAMA2_7B, MIXTRAL, QWEN2_MOE, QWEN3_MOE

NEOX = {
    "model_type": "gpt_neox",
    "hidden_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "intermediate_size": 2048,
    "vocab_size": 50432,
    "max_position_embeddings": 2048,
}
MISTRAL = {**LLAMA2_7B, "model_type": "mistral", "num_hidden_layers": 6, "max_position_embeddings": 32768}


def model(cfg: dict[str, Any], seq_length: int = 2048) -> Any:
    return PlanRequest.model_validate(
        {
            "model": {"hf_config": cfg, "seq_length": seq_length},
            "cluster": {"num_nodes": 1, "gpu": "H100-SXM"},
            "training": {"global_batch_size": 64},
        }
    ).model


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({**LLAMA2_7B, "head_dim": 1.7}, "'head_dim' must be a positive integer, got 1.7"),  # was kv_channels 1
        ({**LLAMA2_7B, "head_dim": 0}, "'head_dim' must be a positive integer, got 0"),
        ({**LLAMA2_7B, "num_key_value_heads": 0}, "'num_key_value_heads' must be a positive integer, got 0"),  # MHA
        ({**MIXTRAL, "num_local_experts": 0}, "'num_local_experts' must be a positive integer, got 0"),  # dense
        ({**MIXTRAL, "num_local_experts": 7.9}, "'num_local_experts' must be a positive integer, got 7.9"),  # 7
        (
            {**QWEN3_MOE, "moe_intermediate_size": 512.7},
            "'moe_intermediate_size' must be a positive integer, got 512.7",
        ),
        ({**QWEN3_MOE, "num_experts_per_tok": 2.5}, "'num_experts_per_tok' must be a positive integer, got 2.5"),
        ({**QWEN2_MOE, "shared_expert_intermediate_size": 20480.5}, "'shared_expert_intermediate_size' must be"),
        ({**LLAMA2_7B, "tie_word_embeddings": "false"}, "'tie_word_embeddings' must be true or false, got 'false'"),
        ({**GPT2, "tie_word_embeddings": 0}, "'tie_word_embeddings' must be true or false, got 0"),
        ({**LLAMA2_7B, "attention_bias": "false"}, "'attention_bias' must be true or false, got 'false'"),
        ({**NEOX, "use_parallel_residual": 1}, "'use_parallel_residual' must be true or false, got 1"),
        ({**GPT2, "n_inner": 3072.5}, "'n_inner' must be a positive integer, got 3072.5"),
        ({**DEEPSEEK_V3, "n_group": 7.5}, "'n_group' must be a positive integer, got 7.5"),
        ({**DEEPSEEK_V3, "topk_group": "4"}, "'topk_group' must be a positive integer, got '4'"),
        ({**DEEPSEEK_V3, "first_k_dense_replace": 2.5}, "'first_k_dense_replace' must be a non-negative integer"),
        ({**DEEPSEEK_V3, "n_shared_experts": -1}, "'n_shared_experts' must be a non-negative integer, got -1"),
        ({**DEEPSEEK_V3, "q_lora_rank": "1536"}, "'q_lora_rank' must be a positive integer, got '1536'"),
        ({**DEEPSEEK_V3, "num_nextn_predict_layers": 1.5}, "'num_nextn_predict_layers' must be a non-negative"),
        ({**LLAMA2_7B, "attention_dropout": "0.1"}, "'attention_dropout' must be a number, got '0.1'"),
        ({**LLAMA2_7B, "rope_scaling": {"rope_type": "llama3", "factor": "8"}}, "'rope_scaling.factor' must be"),
    ],
)
def test_a_count_size_or_flag_of_the_wrong_value_is_refused_by_its_key(cfg: dict[str, Any], message: str) -> None:
    """One strict reader for every integer and boolean key: 7.9 experts were planned as 7, head_dim 1.7 as 1,
    num_key_value_heads 0 as multi-head attention, Mixtral with 0 experts as dense, "false" as tied."""
    with pytest.raises(ValidationError, match=re.escape(f"config.json {message}")):
        model(cfg)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({**LLAMA2_7B, "architectures": {"a": 1}}, "'architectures' must be a list of strings, got {'a': 1}"),
        ({**LLAMA2_7B, "architectures": 5}, "'architectures' must be a list of strings, got 5"),
        ({**LLAMA2_7B, "architectures": "LlamaForCausalLM"}, "'architectures' must be a list of strings"),  # "L"
        ({**LLAMA2_7B, "_name_or_path": {"a": 1}}, "'_name_or_path' must be a string, got {'a': 1}"),
        ({**QWEN2_MOE, "mlp_only_layers": 3}, "'mlp_only_layers' must be a list of layer indices"),
        ({**QWEN2_MOE, "mlp_only_layers": "0,1"}, "'mlp_only_layers' must be a list of layer indices"),
        ({**LLAMA2_7B, "rope_scaling": {"type": ["yarn"]}}, "rope_scaling type must be a string, got ['yarn']"),
        ({**QWEN3_MOE, "moe_intermediate_size": "x"}, "'moe_intermediate_size' must be a positive integer, got 'x'"),
        ({**LLAMA2_7B, "hidden_act": ["silu"]}, "'hidden_act' must be a string"),
        ({**DEEPSEEK_V3, "topk_method": ["noaux_tc"]}, "'topk_method' must be a string"),
        ({**MISTRAL, "layer_types": "sliding_attention"}, "'layer_types' must list 'sliding_attention' or"),
        ({**MISTRAL, "layer_types": ["sliding_attention"] * 5}, "for each of the num_hidden_layers(6) layers"),
    ],
)
def test_a_value_of_an_odd_type_is_named_by_its_key_not_by_python(cfg: dict[str, Any], message: str) -> None:
    """These were "KeyError: 0", a TypeError, "unhashable type: 'list'", "invalid literal for int()", a model
    named "L" or "{'a': 1}", or "0,1" called "not the leading layers". Through the service: one error on
    `model` that starts with the key's config.json, no Python exception name."""
    from app.service.errors import Refused
    from app.service.requests import parse_plan_request

    body = {  # longer than Mistral's window (4,096), which is then kept and its layer_types read
        "model": {"hf_config": cfg, "seq_length": 8192},
        "cluster": {"num_nodes": 1, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 64},
    }
    with pytest.raises(Refused) as exc:
        parse_plan_request(body)
    [error] = exc.value.errors
    assert error.field == "model" and error.message.startswith("config.json"), error
    assert message in error.message and "Error" not in error.message, error
    with pytest.raises(ValidationError, match=re.escape(message)):
        model(cfg, seq_length=8192)


def test_integral_values_are_read_and_null_means_the_default() -> None:
    """128.0 is the integer 128; a null num_key_value_heads is multi-head attention, as in transformers. The first of
    `architectures` names the model; mlp_only_layers are layer indices in any order."""
    llama = {k: v for k, v in LLAMA2_7B.items() if k != "_name_or_path"}
    spec = model({**llama, "head_dim": 128.0, "num_key_value_heads": None, "architectures": ["LlamaForCausalLM"]})
    assert (spec.kv_channels, spec.num_query_groups, spec.name) == (128, 32, "LlamaForCausalLM")
    assert isinstance(spec.kv_channels, int)
    assert model({**QWEN2_MOE, "mlp_only_layers": [1, 0]}).moe_first_dense_layers == 2
    assert model({**MIXTRAL, "num_local_experts": 8.0}).num_experts == 8
    with pytest.raises(ValidationError, match=r"config.json 'head_dim' must be a positive integer, got 127.5"):
        model({**llama, "head_dim": 127.5})


def test_a_moe_model_type_without_experts_is_refused() -> None:
    """A Mixtral config.json without num_local_experts was planned as a dense model; transformers builds experts."""
    with pytest.raises(ValidationError, match=r"config.json \(mixtral\) lacks 'num_local_experts'"):
        model({k: v for k, v in MIXTRAL.items() if k != "num_local_experts"})
    with pytest.raises(ValidationError, match=r"config.json \(qwen3_moe\) lacks 'num_experts'"):
        model({k: v for k, v in QWEN3_MOE.items() if k != "num_experts"})


@pytest.mark.parametrize(
    ("seq_length", "window"),
    [
        (None, 4096),  # planned at max_position_embeddings (32,768): the window is kept
        (1024, None),  # the window covers the whole sequence: full attention
        (4096, None),  # a window as long as the sequence: every key is seen
        (8192, 4096),
    ],
)
def test_a_sliding_window_no_shorter_than_the_trained_sequence_is_dropped(
    seq_length: int | None, window: int | None
) -> None:
    """Mistral (window 4,096) trained at 1,024 tokens kept its window, although it covers the whole sequence; only
    a window no shorter than max_position_embeddings was dropped."""
    assert from_hf_config(MISTRAL, seq_length=seq_length).get("sliding_window") == window


def test_the_window_is_judged_by_the_trained_length_not_the_longest_context() -> None:
    """A window as long as max_position_embeddings still limits attention when training runs longer than that."""
    cfg = {**MISTRAL, "max_position_embeddings": 4096}
    assert "sliding_window" not in from_hf_config(cfg)
    assert from_hf_config(cfg, seq_length=8192)["sliding_window"] == 4096
    qwen = {**QWEN3_MOE, "use_sliding_window": True, "sliding_window": 2048, "max_position_embeddings": 40960}
    assert "sliding_window" not in from_hf_config(qwen, seq_length=2048)
    assert from_hf_config(qwen, seq_length=4096)["sliding_window"] == 2048


def test_a_request_at_a_length_the_window_covers_plans_full_attention() -> None:
    """End to end, both ways a request is read (the planner's spec and the service's parser): the window is judged
    by the request's own seq_length."""
    from app.service.requests import parse_plan_request

    assert model(MISTRAL, seq_length=1024).sliding_window is None
    assert model(MISTRAL, seq_length=8192).sliding_window == 4096
    for seq, window in ((1024, None), (8192, 4096)):
        raw = {
            "model": {"hf_config": MISTRAL, "seq_length": seq},
            "cluster": {"num_nodes": 1, "gpu": "H100-SXM"},
            "training": {"global_batch_size": 64},
        }
        assert parse_plan_request(raw).request.model.sliding_window == window


def test_keys_transformers_ignores_for_a_model_type_change_nothing() -> None:
    """A Llama config with sliding_window rendered --window-size, and with num_experts 8 planned a 47.5B MoE, though
    transformers builds a dense model with full attention from it (LlamaAttention reads no window; LlamaMLP is
    dense), as it does for Mistral's expert counts (QA 2026-12-07)."""
    dense = from_hf_config(LLAMA2_7B)
    assert from_hf_config({**LLAMA2_7B, "sliding_window": 1024}) == dense
    assert from_hf_config({**LLAMA2_7B, "num_experts": 8, "num_experts_per_tok": 2}) == dense
    mistral = from_hf_config(MISTRAL)
    assert from_hf_config({**MISTRAL, "num_local_experts": 8, "num_experts_per_tok": 2}) == mistral
    assert from_hf_config({**MISTRAL, "sliding_window": 1024})["sliding_window"] == 1024  # Mistral reads it


def test_deepseek_attention_biases_are_refused_as_for_llama() -> None:
    """DeepseekV3Attention puts biases on q_a_proj, kv_a_proj_with_mqa and o_proj under attention_bias true: it was
    planned as 682.6B with none, silently (QA 2026-12-07)."""
    with pytest.raises(ValueError, match="'attention_bias' is true"):
        from_hf_config({**DEEPSEEK_V3, "attention_bias": True})
    assert from_hf_config({**DEEPSEEK_V3, "attention_bias": False}) == from_hf_config(DEEPSEEK_V3)


def test_gpt2_trains_no_longer_than_its_position_table() -> None:
    """GPT-2's learned position embeddings have n_positions rows: a 4,096-token plan took the training length for
    --max-position-embeddings and indexed past the table (QA 2026-12-07)."""
    rows = GPT2["n_positions"]
    assert from_hf_config(GPT2, seq_length=rows)["seq_length"] == rows
    with pytest.raises(ValueError, match=rf"seq_length\({4 * rows}\) > n_positions\({rows}\)"):
        from_hf_config(GPT2, seq_length=4 * rows)
    with pytest.raises(ValidationError, match="n_positions"):
        PlanRequest(model={"hf_config": GPT2, "seq_length": 4 * rows}, cluster={"num_nodes": 1, "gpu": "H100-SXM"},
                    training={"global_batch_size": 8})  # fmt: skip
