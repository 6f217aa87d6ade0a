"""Model-shape and mixture-of-experts flags, in Megatron-LM's and Megatron-DeepSpeed's dialects.

Every field of ModelSpec that changes the network is written, also where it equals Megatron's default, so that
the trained network is the one named (RoPE base and scaling, norms and their epsilon, biases, init std, router).
Flag names: Megatron-LM core_v0.16.1 megatron/training/arguments.py (tests/render/data/megatron_lm_flags.txt),
Megatron-DeepSpeed 4efb479d megatron/arguments.py.
"""

from __future__ import annotations

from app.render.facts import Facts
from app.render.flags import Flag, flag


def mds(f: Facts) -> bool:
    """Megatron-DeepSpeed's dialect; Megatron-LM's names serve Megatron-LM and the DeepSpeed trainer."""
    return f.framework == "megatron-deepspeed"


def _attention(f: Facts) -> list[Flag]:
    """Grouped-query attention and head size, or DeepSeek's multi-latent attention (Megatron-LM only)."""
    m = f.model
    out: list[Flag] = []
    if m.multi_latent_attention:
        out.append(flag("--multi-latent-attention"))
        if m.q_lora_rank is not None:
            out.append(flag("--q-lora-rank", m.q_lora_rank))
        return [
            *out,
            flag("--kv-lora-rank", m.kv_lora_rank),
            flag("--qk-head-dim", m.qk_head_dim),
            flag("--qk-pos-emb-head-dim", m.qk_pos_emb_head_dim),
            flag("--v-head-dim", m.v_head_dim),
        ]
    groups = m.num_query_groups or m.num_attention_heads
    if groups != m.num_attention_heads:
        if mds(f):
            out.append(flag("--num-key-value-heads", groups))
        else:
            out += [flag("--group-query-attention"), flag("--num-query-groups", groups)]
    if m.kv_channels and m.kv_channels * m.num_attention_heads != m.hidden_size:
        out.append(flag("--kv-channels", m.kv_channels))
    return out


def window_flags(f: Facts) -> list[Flag]:
    """Sliding-window attention: megatron-core's (left, right) window, the query itself not counted
    (TransformerConfig.window_size, --window-size as "left,right"), and every n-th layer global."""
    m = f.model
    if m.sliding_window is None:
        return []
    out = [flag("--window-size", f"{m.sliding_window - 1},0")]
    if m.window_attn_skip_freq:
        out.append(flag("--window-attn-skip-freq", m.window_attn_skip_freq))
    return out


def _shape(f: Facts) -> list[Flag]:
    m = f.model
    out = [
        flag("--num-layers", m.num_layers),
        flag("--hidden-size", m.hidden_size),
        flag("--ffn-hidden-size", m.ffn_hidden_size),
        flag("--num-attention-heads", m.num_attention_heads),
    ]
    out += _attention(f) + window_flags(f)
    out += [flag("--seq-length", m.seq_length), flag("--max-position-embeddings", m.seq_length)]
    return out


def rotary_base(f: Facts) -> int:
    """Megatron's --rotary-base (and Megatron-DeepSpeed's --rotary-position-embeddings-theta) are integers."""
    base = f.model.rotary_base
    if base != int(base):
        raise ValueError(f"model.rotary_base({base}): Megatron reads the RoPE base as an integer")
    return int(base)


def _rope(f: Facts) -> list[Flag]:
    """RoPE base, share and scaling: Llama-3.1's scaling is --use-rope-scaling --rope-scaling-factor (megatron-core
    fixes its other constants); MLA's YaRN is --rope-type yarn with its factor and mscales."""
    m = f.model
    if mds(f):
        return [flag("--rotary-position-embeddings-theta", rotary_base(f)), flag("--rotary-percent", m.rotary_percent)]
    out = [flag("--rotary-base", rotary_base(f)), flag("--rotary-percent", m.rotary_percent)]
    scaling = m.rope_scaling
    if m.multi_latent_attention:
        if scaling is None:
            return [*out, flag("--rope-type", "rope")]
        return [
            *out,
            flag("--rope-type", "yarn"),
            flag("--rotary-scaling-factor", scaling.factor),
            flag("--mscale", scaling.mscale),
            flag("--mscale-all-dim", scaling.mscale_all_dim),
        ]
    if scaling is not None:
        out += [flag("--use-rope-scaling"), flag("--rope-scaling-factor", scaling.factor)]
    return out


def _positions(f: Facts) -> list[Flag]:
    kind = f.model.position_embedding_type
    if not mds(f):
        out = [flag("--position-embedding-type", kind)]
        return out + _rope(f) if kind == "rope" else out
    if kind == "rope":
        return [flag("--use-rotary-position-embeddings"), flag("--no-position-embedding"), *_rope(f)]
    return [flag("--no-position-embedding")] if kind == "none" else []


def _layers(f: Facts) -> list[Flag]:
    m, megatron = f.model, not mds(f)
    norm = m.normalization if megatron else m.normalization.lower()
    out = [
        flag("--normalization", norm),
        flag("--norm-epsilon" if megatron else "--layernorm-epsilon", m.norm_epsilon),
        flag("--init-method-std", m.init_method_std),
    ]
    if m.swiglu:
        out.append(flag("--swiglu"))
    if m.untie_embeddings_and_output_weights:
        out.append(flag("--untie-embeddings-and-output-weights"))
    if not m.add_bias_linear:
        out.append(flag("--disable-bias-linear"))
    if m.add_qkv_bias:
        out.append(flag("--add-qkv-bias"))
    if m.qk_layernorm:
        out.append(flag("--qk-layernorm"))
    if m.mtp_num_layers:  # TransformerConfig.mtp_num_layers (arguments.py builds the flag from the config)
        out.append(flag("--mtp-num-layers", m.mtp_num_layers))
    out += [flag("--hidden-dropout", m.hidden_dropout), flag("--attention-dropout", m.attention_dropout)]
    flash = f.training.flash_attention
    if megatron:  # auto: Transformer Engine picks FlashAttention or cuDNN fused attention (no s x s scores kept)
        out.append(flag("--attention-backend", "auto" if flash else "unfused"))
    elif flash:
        out.append(flag("--use-flash-attn-v2"))
    out.append(flag("--make-vocab-size-divisible-by", f.decisions.make_vocab_size_divisible_by))
    return out


def fusion_flags(f: Facts) -> list[Flag]:
    """Kernels an expert turns on where they apply (Megatron-LM only): the fused cross-entropy, the fused MoE
    token permutation; RoPE fusion off for MLA (megatron-core's fused MLA RoPE is training-only experimental and
    needs YaRN, transformer_config.py L1530-1535 / MLATransformerConfig)."""
    if f.framework != "megatron":
        return []
    out = [flag("--cross-entropy-loss-fusion")]
    if f.model.is_moe:
        out.append(flag("--moe-permute-fusion"))
    if f.model.multi_latent_attention:
        out.append(flag("--no-rope-fusion"))
    return out


def model_flags(f: Facts) -> list[Flag]:
    return _shape(f) + _positions(f) + _layers(f)


def top1_softmax(f: Facts) -> bool:
    """A top-1 softmax router that the model normalises after the top-k: megatron-core refuses it ("Please use
    --moe-router-pre-softmax when topk is 1", transformer_config.py L1633-1641 at core_v0.16.1), since the one
    weight would always be 1.0; it is rendered with --moe-router-pre-softmax (render.notes says what changes)."""
    m = f.model
    return bool(m.is_moe and m.moe_router_topk == 1 and m.moe_router_score_function == "softmax") and not (
        m.moe_router_pre_softmax
    )


def _router(f: Facts) -> list[Flag]:
    m = f.model
    out = [
        flag("--moe-router-score-function", m.moe_router_score_function),
        flag("--moe-router-load-balancing-type", m.moe_router_load_balancing_type),
        flag("--moe-aux-loss-coeff", m.moe_aux_loss_coeff),
        flag("--moe-router-dtype", "fp32"),
    ]
    if m.moe_router_pre_softmax or top1_softmax(f):
        out.append(flag("--moe-router-pre-softmax"))
    if m.moe_router_topk_scaling_factor is not None:
        out.append(flag("--moe-router-topk-scaling-factor", m.moe_router_topk_scaling_factor))
    if m.moe_router_enable_expert_bias:  # DeepSeek-V3's bias update speed gamma = 0.001 (Megatron's default)
        out += [flag("--moe-router-enable-expert-bias"), flag("--moe-router-bias-update-rate", 0.001)]
    if m.moe_router_num_groups is not None:
        out += [
            flag("--moe-router-num-groups", m.moe_router_num_groups),
            flag("--moe-router-group-topk", m.moe_router_group_topk),
        ]
    return out


def moe_flags(f: Facts) -> list[Flag]:
    """Megatron-LM MoE: routed experts, shared experts, leading dense layers, the router, EP/ETP, the dispatcher."""
    m, par = f.model, f.par
    if not m.is_moe:
        return []
    out = [
        flag("--num-experts", m.num_experts),
        flag("--moe-router-topk", m.moe_router_topk),
        flag("--moe-ffn-hidden-size", m.moe_ffn_hidden_size),
    ]
    if m.moe_shared_expert_intermediate_size:
        out.append(flag("--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size))
        if m.moe_shared_expert_gate:
            out.append(flag("--moe-shared-expert-gate"))
    if m.moe_first_dense_layers:
        k = m.moe_first_dense_layers
        out.append(flag("--moe-layer-freq", f"[0]*{k}+[1]*{m.num_layers - k}"))
    out += _router(f)
    out += [
        flag("--expert-model-parallel-size", par.ep),
        flag("--expert-tensor-parallel-size", par.expert_tp),
        flag("--moe-token-dispatcher-type", par.moe_token_dispatcher),
        flag("--moe-grouped-gemm"),
    ]
    if par.moe_token_dispatcher == "flex":  # HybridEP is the backend that runs over multi-node NVLink (GB200 NVL72)
        backend = "hybridep" if f.cluster.nvlink_domain > f.gpus_per_node else "deepep"
        out.append(flag("--moe-flex-dispatcher-backend", backend))
    if m.moe_capacity_factor is not None:
        out.append(flag("--moe-expert-capacity-factor", m.moe_capacity_factor))
    return out
