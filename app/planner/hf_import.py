"""Hugging Face `config.json` → ModelSpec fields (Llama/Mistral/Mixtral/Qwen2/Qwen3(-MoE)/DeepSeek-V3/GPT-2/GPT-NeoX).

Every key that changes the network is read, with the Hugging Face default of that model type when it is absent
(transformers' configuration_<type>.py: e.g. Llama rms_norm_eps 1e-6 and rope_theta 1e4, Mixtral rope_theta 1e6),
so the plan trains the network the config describes: RoPE base and scaling, norm epsilon, init std, QKV bias,
QK norm, the MoE router (score function, renormalisation, expert bias, scaling, group-limited routing, aux loss).
Sliding-window attention becomes megatron-core's window (on every layer, or on all but each n-th); what Megatron
cannot express (other window patterns, biases on the output projection or the MLP, other RoPE scalings) is
refused with the key and its value.

Values are read strictly: a count or size must be a JSON integer (128.0 reads as 128), a flag JSON true or false, a
name a string; 1.7 heads, 0 experts or "false" are refused with the key and the value, never rounded or coerced into
another model.

The training sequence length is not in a config.json; `max_position_embeddings` (or GPT-2's `n_positions`) is
used unless the request overrides `seq_length`, which `from_hf_config` takes to judge the sliding window by.
"""

from __future__ import annotations

from typing import Any

LLAMA_LIKE = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}
MOE_TYPES = {"mixtral", "qwen2_moe", "qwen3_moe"}  # transformers builds routed experts on every sparse layer
# the types whose attention reads `sliding_window` (transformers MistralAttention, MixtralAttention, Qwen2/3(-MoE)
# attention with use_sliding_window); LlamaAttention and DeepseekV3Attention never do, whatever the config says
WINDOW_TYPES = {"mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}
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


def _given(cfg: dict[str, Any], key: str, kind: str, default: Any) -> Any:
    """The key's value; absent or null, the model type's default (HF_DEFAULTS) or `default`."""
    value = cfg.get(key)
    return HF_DEFAULTS.get(kind, {}).get(key, default) if value is None else value


def _whole(key: str, value: Any, least: int = 1) -> int:
    """A count or size: a JSON integer (an integral float such as 128.0 reads as 128) of at least `least`. Anything
    else (1.7, "64", true, 0 where a size is meant) is refused with the key and its value: rounded or coerced, it
    would plan another model."""
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not integral or value < least:
        want = {0: "a non-negative integer", 1: "a positive integer"}.get(least, f"an integer >= {least}")
        raise ValueError(f"config.json {key!r} must be {want}, got {value!r}")
    return int(value)


def _int(cfg: dict[str, Any], key: str, kind: str) -> int:
    """A count or size the config must give."""
    return _whole(key, _need(cfg, key, kind))


def _count(cfg: dict[str, Any], key: str, kind: str, default: int, least: int = 1) -> int:
    """A count or size with a default (the model type's, else `default`)."""
    return _whole(key, _given(cfg, key, kind, default), least)


def _optional(cfg: dict[str, Any], key: str) -> int | None:
    """A positive count or size that may be absent or null."""
    value = cfg.get(key)
    return None if value is None else _whole(key, value)


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"config.json {key!r} must be a number, got {value!r}")
    return float(value)


def _num(cfg: dict[str, Any], key: str, kind: str, default: float | None = None) -> float:
    return _number(key, _given(cfg, key, kind, default))


def _flag(cfg: dict[str, Any], key: str, kind: str, default: bool = False) -> bool:
    """JSON true or false (absent or null: the default); "false" or 0 is refused, not read as a truth value."""
    value = _given(cfg, key, kind, default)
    if not isinstance(value, bool):
        raise ValueError(f"config.json {key!r} must be true or false, got {value!r}")
    return value


def _text(cfg: dict[str, Any], key: str, default: str | None = None) -> str | None:
    """A string (absent or null: `default`)."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValueError(f"config.json {key!r} must be a string, got {value!r}")
    return value


def rope_scaling(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """config.json `rope_scaling` → ModelSpec.rope_scaling (llama3 and yarn; others are refused)."""
    raw = cfg.get("rope_scaling")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError(f"config.json 'rope_scaling' must be an object, got {raw!r}")
    kind = raw.get("rope_type", raw.get("type"))
    if kind is not None and not isinstance(kind, str):
        raise ValueError(f"config.json rope_scaling type must be a string, got {kind!r}")
    if kind in (None, "default"):
        return None
    keys = {
        "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
        "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"),
    }
    if kind not in keys:
        raise ValueError(f"config.json rope_scaling type {kind!r} is not supported (llama3, yarn)")
    read = {k: _number(f"rope_scaling.{k}", raw[k]) for k in keys[kind] if raw.get(k) is not None}
    if "original_max_position_embeddings" in read:
        key = "rope_scaling.original_max_position_embeddings"
        read["original_max_position_embeddings"] = _whole(key, raw["original_max_position_embeddings"])
    return {"type": kind, **read}


def _window(cfg: dict[str, Any], kind: str, seq_length: int | None) -> dict[str, Any]:
    """Sliding-window attention as megatron-core builds it: a window on every layer, or on every layer but each
    n-th (--window-attn-skip-freq). From `layer_types` where the config lists them; Qwen2/Qwen3/Qwen2-MoE window
    the layers from `max_window_layers` on (transformers Qwen2Config), Mistral (4,096 by default) and Qwen3-MoE
    every layer. A window no shorter than the sequence trained at (`seq_length`, else max_position_embeddings)
    covers the whole causal prefix: it is full attention and is dropped."""
    if kind not in WINDOW_TYPES or not _flag(cfg, "use_sliding_window", kind, True):
        return {}  # (a Llama config's sliding_window was rendered as --window-size, QA 2026-12-07)
    # an absent key is the model type's default; an explicit null (or 0) is no window
    raw = cfg["sliding_window"] if "sliding_window" in cfg else HF_DEFAULTS.get(kind, {}).get("sliding_window")
    window = 0 if raw is None else _whole("sliding_window", raw, least=0)
    # the request's length (callers pass an int or None; one below 1 is ModelSpec's to refuse), else the longest
    trained = seq_length if seq_length and seq_length >= 1 else _int(cfg, "max_position_embeddings", kind)
    if not window or window >= trained:
        return {}
    layers = _int(cfg, "num_hidden_layers", kind)
    types = cfg.get("layer_types")
    if types is not None:
        windowed = _windowed_layers(types, layers)
    elif "max_window_layers" in HF_DEFAULTS.get(kind, {}):  # Qwen2, Qwen3, Qwen2-MoE
        first = _count(cfg, "max_window_layers", kind, 0, least=0)
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


def _windowed_layers(types: Any, layers: int) -> list[bool]:
    """config.json `layer_types`: "sliding_attention" or "full_attention" for each layer, as transformers checks."""
    kinds = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != layers or any(t not in kinds for t in types):
        raise ValueError(
            f"config.json 'layer_types' must list 'sliding_attention' or 'full_attention' for each of the "
            f"num_hidden_layers({layers}) layers, got {types!r}"
        )
    return [t == "sliding_attention" for t in types]


def _common(cfg: dict[str, Any], kind: str, seq_length: int | None) -> dict[str, Any]:
    """RoPE, norm epsilon and init std, and the refusals of what Megatron cannot build."""
    biased = ("llama", "qwen3", "qwen3_moe", "mistral", *DEEPSEEK)  # (DeepseekV3Attention's q_a/kv_a/o biases)
    for key in ("mlp_bias",) + (("attention_bias",) if kind in biased else ()):
        if _flag(cfg, key, kind):
            raise ValueError(
                f"config.json {key!r} is true: biases on the output projection / MLP without "
                f"biases elsewhere have no Megatron flag"
            )
    return {
        **_window(cfg, kind, seq_length),
        "rotary_base": _num(cfg, "rope_theta", kind, 1e4),
        "rope_scaling": rope_scaling(cfg),
        "norm_epsilon": _num(cfg, "rms_norm_eps", kind, 1e-6),
        "init_method_std": _num(cfg, "initializer_range", kind, 0.02),
    }


def _llama_like(cfg: dict[str, Any], kind: str, seq_length: int | None) -> dict[str, Any]:
    h, heads = _int(cfg, "hidden_size", kind), _int(cfg, "num_attention_heads", kind)
    out: dict[str, Any] = {
        "num_layers": _int(cfg, "num_hidden_layers", kind),
        "hidden_size": h,
        "num_attention_heads": heads,
        "num_query_groups": _count(cfg, "num_key_value_heads", kind, heads),
        "ffn_hidden_size": _int(cfg, "intermediate_size", kind),
        "vocab_size": _int(cfg, "vocab_size", kind),
        "seq_length": _int(cfg, "max_position_embeddings", kind),
        "swiglu": _gated_silu(cfg),
        "untie_embeddings_and_output_weights": not _flag(cfg, "tie_word_embeddings", kind),
        "position_embedding_type": "rope",
        "normalization": "RMSNorm",
        "add_bias_linear": False,
        "attention_dropout": _num(cfg, "attention_dropout", kind, 0.0),
        "add_qkv_bias": kind.startswith("qwen2") and _flag(cfg, "qkv_bias", kind, True),  # Qwen2Attention bias
        "qk_layernorm": kind.startswith("qwen3"),  # Qwen3Attention q_norm / k_norm
        **_common(cfg, kind, seq_length),
    }
    head_dim = _optional(cfg, "head_dim")
    if head_dim is not None:
        out["kv_channels"] = head_dim
    out.update(_moe_fields(cfg, kind))
    return out


def _gated_silu(cfg: dict[str, Any]) -> bool:
    """transformers' Llama-like MLPs (LlamaMLP, MistralMLP, Qwen2/3MLP and their experts; DeepseekV3MLP) are always
    gated, down(act(gate(x)) * up(x)), with act = ACT2FN[hidden_act]; Megatron-LM has a flag for the SiLU gate only
    (--swiglu). Any other activation would plan a different network (a plain two-matrix MLP has a third fewer MLP
    weights), so it is refused with the key and its value."""
    act = _text(cfg, "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(
            f"config.json hidden_act {act!r}: this model type's MLP is gated (gate_proj, up_proj, down_proj) and "
            f"Megatron-LM gates with SiLU only (--swiglu); a gated {act} has no Megatron flag"
        )
    return True


def _experts(cfg: dict[str, Any], kind: str) -> int:
    """Routed experts: a MoE model type must have them (num_local_experts for Mixtral, num_experts for Qwen-MoE);
    another model type is dense, as transformers builds it whatever expert counts its config carries (a Llama
    config with num_experts 8 was planned as a 47.5B MoE, QA 2026-12-07)."""
    key = "num_local_experts" if "num_local_experts" in cfg or kind == "mixtral" else "num_experts"
    return _int(cfg, key, kind) if kind in MOE_TYPES else 0


def _moe_fields(cfg: dict[str, Any], kind: str) -> dict[str, Any]:
    experts = _experts(cfg, kind)
    if not experts:
        return {}
    out: dict[str, Any] = {
        "num_experts": experts,
        "moe_router_topk": _int(cfg, "num_experts_per_tok", kind),
        "moe_ffn_hidden_size": _count(cfg, "moe_intermediate_size", kind, _int(cfg, "intermediate_size", kind)),
        "moe_aux_loss_coeff": _num(cfg, "router_aux_loss_coef", kind, 0.001),
        # Mixtral renormalises its top-k softmax (= softmax after top-k, Megatron's default); Qwen-MoE with
        # norm_topk_prob false keeps the softmax over all experts (--moe-router-pre-softmax).
        "moe_router_pre_softmax": kind != "mixtral" and not _flag(cfg, "norm_topk_prob", kind),
    }
    shared = _count(cfg, "shared_expert_intermediate_size", kind, 0, least=0)
    if shared:
        out["moe_shared_expert_intermediate_size"] = shared
        out["moe_shared_expert_gate"] = kind == "qwen2_moe"  # Qwen2MoeSparseMoeBlock.shared_expert_gate
    step = _count(cfg, "decoder_sparse_step", kind, 1)
    if step != 1:  # Qwen2/3-MoE: layer i is sparse where (i + 1) % decoder_sparse_step == 0
        raise ValueError(
            f"config.json decoder_sparse_step({step}): only every layer after the leading dense ones "
            f"(mlp_only_layers) is modelled as MoE"
        )
    dense_layers = _mlp_only_layers(cfg)
    if dense_layers:
        if dense_layers != list(range(len(dense_layers))):
            raise ValueError(
                f"config.json mlp_only_layers {dense_layers} are not the leading layers; "
                f"only leading dense layers are modelled"
            )
        out["moe_first_dense_layers"] = len(dense_layers)
    return out


def _mlp_only_layers(cfg: dict[str, Any]) -> list[int]:
    """Qwen-MoE's dense layers, by index from 0 (a list of integers; absent or null: none), sorted and distinct."""
    layers = cfg.get("mlp_only_layers")
    if layers is None:
        return []
    if not isinstance(layers, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
        raise ValueError(f"config.json 'mlp_only_layers' must be a list of layer indices (integers), got {layers!r}")
    return sorted(set(layers))


def _deepseek(cfg: dict[str, Any], kind: str, seq_length: int | None) -> dict[str, Any]:
    """DeepSeek-V3 (and Kimi K2): MLA, shared + routed experts after leading dense layers, sigmoid routing with an
    expert bias (topk_method noaux_tc), routed_scaling_factor, group-limited routing (n_group, topk_group)."""
    base = "deepseek_v3"
    freq = _count(cfg, "moe_layer_freq", base, 1)
    if freq != 1:
        raise ValueError(
            f"config.json moe_layer_freq({freq}): only every layer after the leading dense ones is modelled as MoE"
        )
    moe_ffn = _int(cfg, "moe_intermediate_size", kind)
    groups = _count(cfg, "n_group", base, 1)
    scoring = _text(cfg, "scoring_func", "sigmoid")
    out: dict[str, Any] = {
        "num_layers": _int(cfg, "num_hidden_layers", kind),
        "hidden_size": _int(cfg, "hidden_size", kind),
        "num_attention_heads": _int(cfg, "num_attention_heads", kind),
        "ffn_hidden_size": _int(cfg, "intermediate_size", kind),
        "vocab_size": _int(cfg, "vocab_size", kind),
        "seq_length": _int(cfg, "max_position_embeddings", kind),
        "swiglu": _gated_silu(cfg),
        "untie_embeddings_and_output_weights": not _flag(cfg, "tie_word_embeddings", base),
        "position_embedding_type": "rope",
        "normalization": "RMSNorm",
        "add_bias_linear": False,
        "multi_latent_attention": True,
        "q_lora_rank": _optional(cfg, "q_lora_rank"),
        "kv_lora_rank": _int(cfg, "kv_lora_rank", kind),
        "qk_head_dim": _int(cfg, "qk_nope_head_dim", kind),
        "qk_pos_emb_head_dim": _int(cfg, "qk_rope_head_dim", kind),
        "v_head_dim": _int(cfg, "v_head_dim", kind),
        "qk_layernorm": True,  # the q_a_layernorm / kv_a_layernorm of the latents (Megatron: --qk-layernorm)
        "num_experts": _int(cfg, "n_routed_experts", kind),
        "moe_router_topk": _int(cfg, "num_experts_per_tok", kind),
        "moe_ffn_hidden_size": moe_ffn,
        "moe_shared_expert_intermediate_size": _count(cfg, "n_shared_experts", base, 1, least=0) * moe_ffn or None,
        "moe_first_dense_layers": _count(cfg, "first_k_dense_replace", base, 0, least=0),
        "moe_router_score_function": scoring,
        "moe_router_enable_expert_bias": _text(cfg, "topk_method", "noaux_tc") == "noaux_tc",
        # a softmax router's top-k weights: renormalised (Megatron's default) or the softmax over all experts
        # (--moe-router-pre-softmax); a sigmoid router's are renormalised whatever the flag says
        "moe_router_pre_softmax": scoring != "softmax" or not _flag(cfg, "norm_topk_prob", base, True),
        "moe_router_topk_scaling_factor": _num(cfg, "routed_scaling_factor", base, 1.0),
        "moe_router_load_balancing_type": "seq_aux_loss",
        "moe_aux_loss_coeff": _num(cfg, "aux_loss_alpha", base, 1e-4),
        **_common(cfg, base, seq_length),
    }
    if groups > 1:
        out["moe_router_num_groups"] = groups
        out["moe_router_group_topk"] = _count(cfg, "topk_group", base, 1)
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
        "ffn_hidden_size": _optional(cfg, "n_inner") or 4 * h,
        "vocab_size": _int(cfg, "vocab_size", "gpt2"),
        "seq_length": _int(cfg, "n_positions", "gpt2"),
        "position_embedding_type": "learned_absolute",
        "normalization": "LayerNorm",
        "add_bias_linear": True,
        "untie_embeddings_and_output_weights": not _flag(cfg, "tie_word_embeddings", "gpt2", True),
        "hidden_dropout": _num(cfg, "resid_pdrop", "gpt2", 0.1),
        "attention_dropout": _num(cfg, "attn_pdrop", "gpt2", 0.1),
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
        "untie_embeddings_and_output_weights": not _flag(cfg, "tie_word_embeddings", "gpt_neox"),
        "hidden_dropout": _num(cfg, "hidden_dropout", "gpt_neox", 0.0),
        "attention_dropout": _num(cfg, "attention_dropout", "gpt_neox", 0.0),
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


def _label(cfg: dict[str, Any], kind: str) -> str:
    """The model's name: `_name_or_path`, else the first of `architectures` (a list of strings), else the type."""
    path = _text(cfg, "_name_or_path")
    architectures = cfg.get("architectures")
    if architectures is not None and (
        not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures)
    ):
        raise ValueError(f"config.json 'architectures' must be a list of strings, got {architectures!r}")
    return path or next((a for a in architectures or [] if a), kind)


def from_hf_config(cfg: dict[str, Any], name: str | None = None, seq_length: int | None = None) -> dict[str, Any]:
    """ModelSpec fields from a parsed config.json. Unknown model types are refused, naming the known ones.
    `seq_length` is the length the model will be trained at where the request overrides it: a sliding window no
    shorter is full attention and is not kept (with none, max_position_embeddings judges it)."""
    if not isinstance(cfg, dict):
        raise ValueError("config.json must be a JSON object")
    kind = model_type(cfg)
    if kind in LLAMA_LIKE:
        fields = _llama_like(cfg, kind, seq_length)
    elif kind in DEEPSEEK:
        fields = _deepseek(cfg, kind, seq_length)
    elif kind == "gpt2":
        fields = _gpt2(cfg)
        if seq_length is not None and seq_length > fields["seq_length"]:
            # a learned position table has n_positions rows: a longer sequence indexes past it, and the rendered
            # --max-position-embeddings could not load the weights (it took the training length, QA 2026-12-07)
            raise ValueError(
                f"seq_length({seq_length}) > n_positions({fields['seq_length']}): GPT-2's learned position "
                f"embeddings have n_positions rows; train at {fields['seq_length']} tokens or fewer"
            )
    else:
        fields = _gpt_neox(cfg)
    fields["name"] = str(name or _label(cfg, kind))[:100]
    fields["source"] = f"Hugging Face config.json (model_type {kind})"
    mtp = _count(cfg, "num_nextn_predict_layers", kind, 0, least=0) if kind in DEEPSEEK else 0
    if mtp:  # DeepSeek-V3: 1 (Megatron's --mtp-num-layers)
        fields["mtp_num_layers"] = mtp
    return fields
