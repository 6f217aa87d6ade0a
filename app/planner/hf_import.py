"""Hugging Face `config.json` → ModelSpec fields (Llama/Mistral/Mixtral/Qwen2/Qwen3(-MoE)/GPT-2/GPT-NeoX key sets).

The training sequence length is not in a config.json; `max_position_embeddings` (or GPT-2's `n_positions`) is
used unless the request overrides `seq_length`.
"""

from __future__ import annotations

from typing import Any

LLAMA_LIKE = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}
SUPPORTED = sorted(LLAMA_LIKE | {"gpt2", "gpt_neox"})


def _need(cfg: dict[str, Any], key: str, kind: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise ValueError(f"config.json ({kind}) lacks {key!r}")
    return cfg[key]


def _int(cfg: dict[str, Any], key: str, kind: str) -> int:
    value = _need(cfg, key, kind)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"config.json {key!r} must be a positive integer, got {value!r}")
    return value


def _llama_like(cfg: dict[str, Any], kind: str) -> dict[str, Any]:
    h, heads = _int(cfg, "hidden_size", kind), _int(cfg, "num_attention_heads", kind)
    out: dict[str, Any] = {
        "num_layers": _int(cfg, "num_hidden_layers", kind),
        "hidden_size": h,
        "num_attention_heads": heads,
        "num_query_groups": cfg.get("num_key_value_heads") or heads,
        "ffn_hidden_size": _int(cfg, "intermediate_size", kind),
        "vocab_size": _int(cfg, "vocab_size", kind),
        "seq_length": _int(cfg, "max_position_embeddings", kind),
        "swiglu": cfg.get("hidden_act", "silu") in ("silu", "swish"),
        "untie_embeddings_and_output_weights": not cfg.get("tie_word_embeddings", False),
        "position_embedding_type": "rope",
        "normalization": "RMSNorm",
        "add_bias_linear": False,
        "attention_dropout": float(cfg.get("attention_dropout", 0.0) or 0.0),
    }
    if cfg.get("head_dim"):
        out["kv_channels"] = int(cfg["head_dim"])
    out.update(_moe_fields(cfg, kind))
    return out


def _moe_fields(cfg: dict[str, Any], kind: str) -> dict[str, Any]:
    experts = cfg.get("num_local_experts") or cfg.get("num_experts")
    if not experts:
        return {}
    out: dict[str, Any] = {
        "num_experts": int(experts),
        "moe_router_topk": _int(cfg, "num_experts_per_tok", kind),
        "moe_ffn_hidden_size": int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"]),
    }
    if cfg.get("shared_expert_intermediate_size"):
        out["moe_shared_expert_intermediate_size"] = int(cfg["shared_expert_intermediate_size"])
    dense_layers = cfg.get("mlp_only_layers") or []
    if dense_layers:
        if list(dense_layers) != list(range(len(dense_layers))):
            raise ValueError(
                f"config.json mlp_only_layers {dense_layers} are not the leading layers; "
                f"only leading dense layers are modelled"
            )
        out["moe_first_dense_layers"] = len(dense_layers)
    return out


def _gpt2(cfg: dict[str, Any]) -> dict[str, Any]:
    h = _int(cfg, "n_embd", "gpt2")
    return {
        "num_layers": _int(cfg, "n_layer", "gpt2"),
        "hidden_size": h,
        "num_attention_heads": _int(cfg, "n_head", "gpt2"),
        "ffn_hidden_size": cfg.get("n_inner") or 4 * h,
        "vocab_size": _int(cfg, "vocab_size", "gpt2"),
        "seq_length": _int(cfg, "n_positions", "gpt2"),
        "position_embedding_type": "learned_absolute",
        "normalization": "LayerNorm",
        "add_bias_linear": True,
        "untie_embeddings_and_output_weights": not cfg.get("tie_word_embeddings", True),
        "hidden_dropout": float(cfg.get("resid_pdrop", 0.1) or 0.0),
        "attention_dropout": float(cfg.get("attn_pdrop", 0.1) or 0.0),
    }


def _gpt_neox(cfg: dict[str, Any]) -> dict[str, Any]:
    return {
        "num_layers": _int(cfg, "num_hidden_layers", "gpt_neox"),
        "hidden_size": _int(cfg, "hidden_size", "gpt_neox"),
        "num_attention_heads": _int(cfg, "num_attention_heads", "gpt_neox"),
        "ffn_hidden_size": _int(cfg, "intermediate_size", "gpt_neox"),
        "vocab_size": _int(cfg, "vocab_size", "gpt_neox"),
        "seq_length": _int(cfg, "max_position_embeddings", "gpt_neox"),
        "position_embedding_type": "rope",
        "normalization": "LayerNorm",
        "add_bias_linear": True,
        "untie_embeddings_and_output_weights": not cfg.get("tie_word_embeddings", False),
        "hidden_dropout": float(cfg.get("hidden_dropout", 0.0) or 0.0),
        "attention_dropout": float(cfg.get("attention_dropout", 0.0) or 0.0),
    }


def from_hf_config(cfg: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """ModelSpec fields from a parsed config.json. Unknown model types are refused, naming the known ones."""
    if not isinstance(cfg, dict):
        raise ValueError("config.json must be a JSON object")
    kind = str(cfg.get("model_type", "")).lower()
    if kind in LLAMA_LIKE:
        fields = _llama_like(cfg, kind)
    elif kind == "gpt2":
        fields = _gpt2(cfg)
    elif kind == "gpt_neox":
        fields = _gpt_neox(cfg)
    else:
        raise ValueError(f"config.json model_type {kind or None!r} is not supported; supported: {', '.join(SUPPORTED)}")
    label = name or cfg.get("_name_or_path") or (cfg.get("architectures") or [kind])[0]
    fields["name"] = str(label)[:100]
    fields["source"] = f"Hugging Face config.json (model_type {kind})"
    return fields
