"""Hugging Face `config.json` → ModelSpec fields (Llama/Mistral/Mixtral/Qwen2/Qwen3(-MoE)/DeepSeek-V3/GPT-2/GPT-NeoX).

Every key that changes the network is read, with the Hugging Face default of that model type when it is absent
(transformers' configuration_<type>.py: e.g. Llama rms_norm_eps 1e-6 and rope_theta 1e4, Mixtral rope_theta 1e6),
so the plan trains the network the config describes: RoPE base and scaling, norm epsilon, init std, QKV bias,
QK norm, the MoE router (score function, renormalisation, expert bias, scaling, group-limited routing, aux loss).
Sliding-window attention becomes megatron-core's window (on every layer, or on all but each n-th); what Megatron
cannot express (other window patterns, biases on the output projection or the MLP, other RoPE scalings) is
refused with the key and its value.

The training sequence length is not in a config.json; `max_position_embeddings` (or GPT-2's `n_positions`) is
used unless the request overrides `seq_length`.
"""

from __future__ import annotations

from typing import Any

LLAMA_LIKE = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}
DEEPSEEK = {"deepseek_v3", "kimi_k2"}  # Kimi K2 is the DeepSeek-V3 architecture (its config.json says so)
SUPPORTED = sorted(LLAMA_LIKE | DEEPSEEK | {"gpt2", "gpt_neox"})
# transformers 4.57 defaults of the keys read below, per model type (configuration_<type>.py).
HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"rope_theta": 1e4, "rms_norm_eps": 1e-6},
    "mistral": {"rope_theta": 1e4, "rms_norm_eps": 1e-6, "sliding_window": 4096},
    "mixtral": {"rope_theta": 1e6, "rms_norm_eps": 1e-5, "router_aux_loss_coef": 0.001},
    "qwen2": {"rope_theta": 1e4, "rms_norm_eps": 1e-6, "use_sliding_window": False, "max_window_layers": 28},
    "qwen2_moe": {
        "rope_theta": 1e4,
        "rms_norm_eps": 1e-6,
        "router_aux_loss_coef": 0.001,
        "norm_topk_prob": False,
        "use_sliding_window": False,
        "max_window_layers": 28,
    },
    "qwen3": {"rope_theta": 1e4, "rms_norm_eps": 1e-6, "use_sliding_window": False, "max_window_layers": 28},
    "qwen3_moe": {
        "rope_theta": 1e4,
        "rms_norm_eps": 1e-6,
        "router_aux_loss_coef": 0.001,
        "norm_topk_prob": False,
        "use_sliding_window": False,
    },
    "deepseek_v3": {
        "rope_theta": 1e4,
        "rms_norm_eps": 1e-6,
        "n_group": 8,
        "topk_group": 4,
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "first_k_dense_replace": 3,
        "n_shared_experts": 1,
    },
}


def _need(cfg: dict[str, Any], key: str, kind: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise ValueError(f"config.json ({kind}) lacks {key!r}")
    return cfg[key]


def _int(cfg: dict[str, Any], key: str, kind: str) -> int:
    value = _need(cfg, key, kind)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"config.json {key!r} must be a positive integer, got {value!r}")
    return value


def _num(cfg: dict[str, Any], key: str, kind: str, default: float | None = None) -> float:
    value = cfg.get(key, HF_DEFAULTS.get(kind, {}).get(key, default))
    if value is None:
        value = HF_DEFAULTS.get(kind, {}).get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"config.json {key!r} must be a number, got {value!r}")
    return float(value)


def _flag(cfg: dict[str, Any], key: str, kind: str, default: bool = False) -> bool:
    value = cfg.get(key, HF_DEFAULTS.get(kind, {}).get(key, default))
    if not isinstance(value, bool):
        raise ValueError(f"config.json {key!r} must be true or false, got {value!r}")
    return value


def rope_scaling(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """config.json `rope_scaling` → ModelSpec.rope_scaling (llama3 and yarn; others are refused)."""
    raw = cfg.get("rope_scaling")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError(f"config.json 'rope_scaling' must be an object, got {raw!r}")
    kind = raw.get("rope_type", raw.get("type"))
    if kind in (None, "default"):
        return None
    keys = {
        "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
        "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"),
    }
    if kind not in keys:
        raise ValueError(f"config.json rope_scaling type {kind!r} is not supported (llama3, yarn)")
    return {"type": kind, **{k: raw[k] for k in keys[kind] if raw.get(k) is not None}}


def _window(cfg: dict[str, Any], kind: str) -> dict[str, Any]:
    """Sliding-window attention as megatron-core builds it: a window on every layer, or on every layer but each
    n-th (--window-attn-skip-freq). From `layer_types` where the config lists them; Qwen2/Qwen3/Qwen2-MoE window
    the layers from `max_window_layers` on (transformers Qwen2Config), Mistral (4,096 by default) and Qwen3-MoE
    every layer. A window no shorter than the longest sequence changes nothing and is dropped."""
    given = {**HF_DEFAULTS.get(kind, {}), **cfg}  # an absent key is the model type's default; an explicit null is none
    if not given.get("sliding_window") or not _flag(cfg, "use_sliding_window", kind, True):
        return {}
    window, layers = _int(given, "sliding_window", kind), _int(cfg, "num_hidden_layers", kind)
    if window >= _int(cfg, "max_position_embeddings", kind):
        return {}
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        windowed = [t == "sliding_attention" for t in types]
    elif "max_window_layers" in HF_DEFAULTS.get(kind, {}):  # Qwen2, Qwen3, Qwen2-MoE
        first = int(_num(cfg, "max_window_layers", kind))
        windowed = [i >= first for i in range(layers)]
    else:
        windowed = [True] * layers
    if not any(windowed):
        return {}
    if all(windowed):
        return {"sliding_window": window}
    for n in range(2, layers + 1):  # megatron-core: layer_number (from 1) % n == 0 attends globally
        if all(w == ((i + 1) % n != 0) for i, w in enumerate(windowed)):
            return {"sliding_window": window, "window_attn_skip_freq": n}
    pattern = "".join("w" if w else "g" for w in windowed)
    raise ValueError(
        f"config.json sliding_window({window}) on layers {pattern} (w: windowed, g: global) is not every layer "
        f"but each n-th (--window-attn-skip-freq): not planned or rendered"
    )


def _common(cfg: dict[str, Any], kind: str) -> dict[str, Any]:
    """RoPE, norm epsilon and init std, and the refusals of what Megatron cannot build."""
    for key in ("mlp_bias",) + (("attention_bias",) if kind in ("llama", "qwen3", "qwen3_moe", "mistral") else ()):
        if cfg.get(key):
            raise ValueError(
                f"config.json {key!r} is true: biases on the output projection / MLP without "
                f"biases elsewhere have no Megatron flag"
            )
    return {
        **_window(cfg, kind),
        "rotary_base": _num(cfg, "rope_theta", kind, 1e4),
        "rope_scaling": rope_scaling(cfg),
        "norm_epsilon": _num(cfg, "rms_norm_eps", kind, 1e-6),
        "init_method_std": _num(cfg, "initializer_range", kind, 0.02),
    }


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
        "swiglu": _gated_silu(cfg),
        "untie_embeddings_and_output_weights": not cfg.get("tie_word_embeddings", False),
        "position_embedding_type": "rope",
        "normalization": "RMSNorm",
        "add_bias_linear": False,
        "attention_dropout": float(cfg.get("attention_dropout", 0.0) or 0.0),
        "add_qkv_bias": kind.startswith("qwen2") and _flag(cfg, "qkv_bias", kind, True),  # Qwen2Attention bias
        "qk_layernorm": kind.startswith("qwen3"),  # Qwen3Attention q_norm / k_norm
        **_common(cfg, kind),
    }
    if cfg.get("head_dim"):
        out["kv_channels"] = int(cfg["head_dim"])
    out.update(_moe_fields(cfg, kind))
    return out


def _gated_silu(cfg: dict[str, Any]) -> bool:
    """transformers' Llama-like MLPs (LlamaMLP, MistralMLP, Qwen2/3MLP and their experts; DeepseekV3MLP) are always
    gated, down(act(gate(x)) * up(x)), with act = ACT2FN[hidden_act]; Megatron-LM has a flag for the SiLU gate only
    (--swiglu). Any other activation would plan a different network (a plain two-matrix MLP has a third fewer MLP
    weights), so it is refused with the key and its value."""
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(
            f"config.json hidden_act {act!r}: this model type's MLP is gated (gate_proj, up_proj, down_proj) and "
            f"Megatron-LM gates with SiLU only (--swiglu); a gated {act} has no Megatron flag"
        )
    return True


def _moe_fields(cfg: dict[str, Any], kind: str) -> dict[str, Any]:
    experts = cfg.get("num_local_experts") or cfg.get("num_experts")
    if not experts:
        return {}
    out: dict[str, Any] = {
        "num_experts": int(experts),
        "moe_router_topk": _int(cfg, "num_experts_per_tok", kind),
        "moe_ffn_hidden_size": int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"]),
        "moe_aux_loss_coeff": _num(cfg, "router_aux_loss_coef", kind, 0.001),
        # Mixtral renormalises its top-k softmax (= softmax after top-k, Megatron's default); Qwen-MoE with
        # norm_topk_prob false keeps the softmax over all experts (--moe-router-pre-softmax).
        "moe_router_pre_softmax": kind != "mixtral" and not _flag(cfg, "norm_topk_prob", kind),
    }
    if cfg.get("shared_expert_intermediate_size"):
        out["moe_shared_expert_intermediate_size"] = int(cfg["shared_expert_intermediate_size"])
        out["moe_shared_expert_gate"] = kind == "qwen2_moe"  # Qwen2MoeSparseMoeBlock.shared_expert_gate
    step = cfg.get("decoder_sparse_step", 1)
    if step not in (None, 1):  # Qwen2/3-MoE: layer i is sparse where (i + 1) % decoder_sparse_step == 0
        raise ValueError(
            f"config.json decoder_sparse_step({step}): only every layer after the leading dense ones "
            f"(mlp_only_layers) is modelled as MoE"
        )
    dense_layers = cfg.get("mlp_only_layers") or []
    if dense_layers:
        if list(dense_layers) != list(range(len(dense_layers))):
            raise ValueError(
                f"config.json mlp_only_layers {dense_layers} are not the leading layers; "
                f"only leading dense layers are modelled"
            )
        out["moe_first_dense_layers"] = len(dense_layers)
    return out


def _deepseek(cfg: dict[str, Any], kind: str) -> dict[str, Any]:
    """DeepSeek-V3 (and Kimi K2): MLA, shared + routed experts after leading dense layers, sigmoid routing with an
    expert bias (topk_method noaux_tc), routed_scaling_factor, group-limited routing (n_group, topk_group)."""
    base = "deepseek_v3"
    if cfg.get("moe_layer_freq", 1) != 1:
        raise ValueError(
            f"config.json moe_layer_freq({cfg.get('moe_layer_freq')}): only every layer after the "
            f"leading dense ones is modelled as MoE"
        )
    moe_ffn = _int(cfg, "moe_intermediate_size", kind)
    groups = int(_num(cfg, "n_group", base, 1))
    out: dict[str, Any] = {
        "num_layers": _int(cfg, "num_hidden_layers", kind),
        "hidden_size": _int(cfg, "hidden_size", kind),
        "num_attention_heads": _int(cfg, "num_attention_heads", kind),
        "ffn_hidden_size": _int(cfg, "intermediate_size", kind),
        "vocab_size": _int(cfg, "vocab_size", kind),
        "seq_length": _int(cfg, "max_position_embeddings", kind),
        "swiglu": _gated_silu(cfg),
        "untie_embeddings_and_output_weights": not cfg.get("tie_word_embeddings", False),
        "position_embedding_type": "rope",
        "normalization": "RMSNorm",
        "add_bias_linear": False,
        "multi_latent_attention": True,
        "q_lora_rank": cfg.get("q_lora_rank"),
        "kv_lora_rank": _int(cfg, "kv_lora_rank", kind),
        "qk_head_dim": _int(cfg, "qk_nope_head_dim", kind),
        "qk_pos_emb_head_dim": _int(cfg, "qk_rope_head_dim", kind),
        "v_head_dim": _int(cfg, "v_head_dim", kind),
        "qk_layernorm": True,  # the q_a_layernorm / kv_a_layernorm of the latents (Megatron: --qk-layernorm)
        "num_experts": _int(cfg, "n_routed_experts", kind),
        "moe_router_topk": _int(cfg, "num_experts_per_tok", kind),
        "moe_ffn_hidden_size": moe_ffn,
        "moe_shared_expert_intermediate_size": int(_num(cfg, "n_shared_experts", base, 1)) * moe_ffn or None,
        "moe_first_dense_layers": int(_num(cfg, "first_k_dense_replace", base, 0)),
        "moe_router_score_function": cfg.get("scoring_func", "sigmoid"),
        "moe_router_enable_expert_bias": cfg.get("topk_method", "noaux_tc") == "noaux_tc",
        # a softmax router's top-k weights: renormalised (Megatron's default) or the softmax over all experts
        # (--moe-router-pre-softmax); a sigmoid router's are renormalised whatever the flag says
        "moe_router_pre_softmax": cfg.get("scoring_func", "sigmoid") != "softmax"
        or not _flag(cfg, "norm_topk_prob", base, True),
        "moe_router_topk_scaling_factor": _num(cfg, "routed_scaling_factor", base, 1.0),
        "moe_router_load_balancing_type": "seq_aux_loss",
        "moe_aux_loss_coeff": _num(cfg, "aux_loss_alpha", base, 1e-4),
        **_common(cfg, base),
    }
    if groups > 1:
        out["moe_router_num_groups"] = groups
        out["moe_router_group_topk"] = int(_num(cfg, "topk_group", base, 1))
    if out["moe_router_score_function"] == "sigmoid" and not _flag(cfg, "norm_topk_prob", base, True):
        raise ValueError(
            "config.json norm_topk_prob false with scoring_func sigmoid: Megatron renormalises sigmoid top-k "
            "weights always"
        )
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
        "norm_epsilon": _num(cfg, "layer_norm_epsilon", "gpt2", 1e-5),
        "init_method_std": _num(cfg, "initializer_range", "gpt2", 0.02),
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
        "rotary_base": _num(cfg, "rotary_emb_base", "gpt_neox", _num(cfg, "rope_theta", "gpt_neox", 1e4)),
        "rotary_percent": _num(cfg, "rotary_pct", "gpt_neox", 0.25),
        "norm_epsilon": _num(cfg, "layer_norm_eps", "gpt_neox", 1e-5),
        "init_method_std": _num(cfg, "initializer_range", "gpt_neox", 0.02),
        "parallel_residual": _flag(cfg, "use_parallel_residual", "gpt_neox", True),
    }


def model_type(cfg: dict[str, Any]) -> str:
    """The config's model_type, refused (naming the supported ones) when it is none of them."""
    kind = str(cfg.get("model_type", "")).lower()
    if kind not in SUPPORTED:
        raise ValueError(f"config.json model_type {kind or None!r} is not supported; supported: {', '.join(SUPPORTED)}")
    return kind


def longest_context(cfg: dict[str, Any]) -> str:
    """How long a context the config says the model supports, as `key = value` under the key it uses."""
    key = "n_positions" if "n_positions" in cfg and "max_position_embeddings" not in cfg else "max_position_embeddings"
    return f"{key} = {cfg.get(key)}"


def from_hf_config(cfg: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """ModelSpec fields from a parsed config.json. Unknown model types are refused, naming the known ones."""
    if not isinstance(cfg, dict):
        raise ValueError("config.json must be a JSON object")
    kind = model_type(cfg)
    if kind in LLAMA_LIKE:
        fields = _llama_like(cfg, kind)
    elif kind in DEEPSEEK:
        fields = _deepseek(cfg, kind)
    elif kind == "gpt2":
        fields = _gpt2(cfg)
    else:
        fields = _gpt_neox(cfg)
    label = name or cfg.get("_name_or_path") or (cfg.get("architectures") or [kind])[0]
    fields["name"] = str(label)[:100]
    fields["source"] = f"Hugging Face config.json (model_type {kind})"
    if kind in DEEPSEEK and cfg.get("num_nextn_predict_layers"):  # DeepSeek-V3: 1 (Megatron's --mtp-num-layers)
        fields["mtp_num_layers"] = int(_num(cfg, "num_nextn_predict_layers", kind, 0))
    return fields
