"""Model-shape and mixture-of-experts flags, in Megatron-LM's and Megatron-DeepSpeed's dialects."""

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
        return [*out, flag("--kv-lora-rank", m.kv_lora_rank), flag("--qk-head-dim", m.qk_head_dim),
                flag("--qk-pos-emb-head-dim", m.qk_pos_emb_head_dim), flag("--v-head-dim", m.v_head_dim)]
    groups = m.num_query_groups or m.num_attention_heads
    if groups != m.num_attention_heads:
        if mds(f):
            out.append(flag("--num-key-value-heads", groups))
        else:
            out += [flag("--group-query-attention"), flag("--num-query-groups", groups)]
    if m.kv_channels and m.kv_channels * m.num_attention_heads != m.hidden_size:
        out.append(flag("--kv-channels", m.kv_channels))
    return out


def _shape(f: Facts) -> list[Flag]:
    m = f.model
    out = [
        flag("--num-layers", m.num_layers), flag("--hidden-size", m.hidden_size),
        flag("--ffn-hidden-size", m.ffn_hidden_size), flag("--num-attention-heads", m.num_attention_heads),
    ]
    out += _attention(f)
    out += [flag("--seq-length", m.seq_length), flag("--max-position-embeddings", m.seq_length)]
    return out


def _positions(f: Facts) -> list[Flag]:
    kind = f.model.position_embedding_type
    if not mds(f):
        return [flag("--position-embedding-type", kind)]
    if kind == "rope":
        return [flag("--use-rotary-position-embeddings"), flag("--no-position-embedding")]
    return [flag("--no-position-embedding")] if kind == "none" else []


def _layers(f: Facts) -> list[Flag]:
    m, megatron = f.model, not mds(f)
    norm = m.normalization if megatron else m.normalization.lower()
    out = [flag("--normalization", norm)]
    if m.swiglu:
        out.append(flag("--swiglu"))
    if m.untie_embeddings_and_output_weights:
        out.append(flag("--untie-embeddings-and-output-weights"))
    if not m.add_bias_linear:
        out.append(flag("--disable-bias-linear"))
    out += [flag("--hidden-dropout", m.hidden_dropout), flag("--attention-dropout", m.attention_dropout)]
    flash = f.training.flash_attention
    if megatron:  # auto: Transformer Engine picks FlashAttention or cuDNN fused attention (no s x s scores kept)
        out.append(flag("--attention-backend", "auto" if flash else "unfused"))
    elif flash:
        out.append(flag("--use-flash-attn-v2"))
    return out


def model_flags(f: Facts) -> list[Flag]:
    return _shape(f) + _positions(f) + _layers(f)


def moe_flags(f: Facts) -> list[Flag]:
    """Megatron-LM MoE: routed experts, shared experts, leading dense layers, EP/ETP and the dispatcher."""
    m, par = f.model, f.par
    if not m.is_moe:
        return []
    out = [flag("--num-experts", m.num_experts), flag("--moe-router-topk", m.moe_router_topk),
           flag("--moe-ffn-hidden-size", m.moe_ffn_hidden_size)]
    if m.moe_shared_expert_intermediate_size:
        out.append(flag("--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size))
    if m.moe_first_dense_layers:
        k = m.moe_first_dense_layers
        out.append(flag("--moe-layer-freq", f"[0]*{k}+[1]*{m.num_layers - k}"))
    out += [
        flag("--expert-model-parallel-size", par.ep), flag("--expert-tensor-parallel-size", par.expert_tp),
        flag("--moe-token-dispatcher-type", "alltoall"), flag("--moe-router-load-balancing-type", "aux_loss"),
        flag("--moe-aux-loss-coeff", 0.01), flag("--moe-router-dtype", "fp32"), flag("--moe-grouped-gemm"),
    ]
    if m.moe_capacity_factor is not None:
        out.append(flag("--moe-expert-capacity-factor", m.moe_capacity_factor))
    return out
