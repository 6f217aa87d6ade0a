"""Parameter counts of a Megatron-style GPT, total and per GPU.

Layer structure follows megatron-core's GPT layer spec (attention: fused QKV + output projection; MLP: fc1
(two halves with SwiGLU) + fc2), the counting of Megatron-LM's `theoretical_memory_usage.py`
(`compute_weight_and_optimizer_memory`) and of Narayanan et al. 2021 eq. (2) `12·l·h²(1 + 13/(12h) + (V+s)/(12lh))`.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.attention import attention_shape
from app.planner.specs import ModelSpec


def _bias(m: ModelSpec, n: int) -> int:
    return n if m.add_bias_linear else 0


def norm_params(m: ModelSpec) -> int:
    """One normalization layer: weight (+ bias for LayerNorm)."""
    return m.hidden_size * (2 if m.normalization == "LayerNorm" else 1)


def attention_params(m: ModelSpec) -> int:
    """QKV + output projection (MHA/GQA), or MLA's down/up projections and latent norms (attention.py)."""
    shape = attention_shape(m)
    return sum(lin.params for lin in shape.linears) + shape.norm_params


def attention_shard(m: ModelSpec, tp: int) -> int:
    shape = attention_shape(m)
    return sum(lin.shard(tp) for lin in shape.linears) + shape.norm_params


def mlp_params(m: ModelSpec, ffn: int) -> int:
    """One MLP (or expert) of width `ffn`: fc1 (x2 with SwiGLU) and fc2."""
    h = m.hidden_size
    fc1_out = 2 * ffn if m.swiglu else ffn
    return h * fc1_out + _bias(m, fc1_out) + ffn * h + _bias(m, h)


def router_params(m: ModelSpec) -> int:
    return m.hidden_size * (m.num_experts or 0)


def shared_expert_params(m: ModelSpec) -> int:
    size = m.moe_shared_expert_intermediate_size
    return mlp_params(m, size) if size else 0


def expert_params(m: ModelSpec) -> int:
    """One routed expert."""
    assert m.moe_ffn_hidden_size is not None
    return mlp_params(m, m.moe_ffn_hidden_size)


def embedding_params(m: ModelSpec) -> int:
    """Word embedding (+ learned positions, + BLOOM's embedding LayerNorm) on the first stage."""
    n = m.vocab_size * m.hidden_size
    if m.position_embedding_type == "learned_absolute":
        n += m.seq_length * m.hidden_size
    if m.embedding_layernorm:
        n += norm_params(m)
    return n


def output_params(m: ModelSpec) -> int:
    """Final norm + the output layer when it is not tied to the embedding."""
    out = m.vocab_size * m.hidden_size if m.untie_embeddings_and_output_weights else 0
    return norm_params(m) + out


def dense_layer_params(m: ModelSpec) -> int:
    assert m.ffn_hidden_size is not None
    return attention_params(m) + mlp_params(m, m.ffn_hidden_size) + 2 * norm_params(m)


def moe_layer_params(m: ModelSpec) -> int:
    return (
        attention_params(m)
        + 2 * norm_params(m)
        + router_params(m)
        + (m.num_experts or 0) * expert_params(m)
        + shared_expert_params(m)
    )


def mtp_extra_params(m: ModelSpec) -> int:
    """One MTP layer beyond its transformer layer: enorm, hnorm, the final norm and eh_proj (2h -> h, no bias)
    (megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionLayer); it shares the embedding and the
    output layer with the main model."""
    return 3 * norm_params(m) + 2 * m.hidden_size * m.hidden_size


def mtp_layer_params(m: ModelSpec) -> int:
    return (moe_layer_params(m) if m.mtp_is_moe else dense_layer_params(m)) + mtp_extra_params(m)


def total_parameters(m: ModelSpec) -> int:
    dense_layers = m.num_layers - m.num_moe_layers
    layers = dense_layers * dense_layer_params(m) + m.num_moe_layers * (moe_layer_params(m) if m.is_moe else 0)
    return layers + embedding_params(m) + output_params(m) + m.mtp_num_layers * mtp_layer_params(m)


def active_parameters(m: ModelSpec) -> int:
    """Parameters one token touches: top-k routed experts instead of all (MFU on MoE is counted on these)."""
    if not m.is_moe:
        return total_parameters(m)
    inactive = (m.num_experts or 0) - m.moe_router_topk
    moe_layers = m.num_moe_layers + (m.mtp_num_layers if m.mtp_is_moe else 0)
    return total_parameters(m) - moe_layers * inactive * expert_params(m)


@dataclass(frozen=True, slots=True)
class LayerShard:
    """Parameters of one layer held by one GPU, split by what shards them."""

    dense: int  # sharded by TP, replicated over DP (attention, dense MLP, shared experts, norms)
    expert: int  # routed experts: sharded by EP x ETP, replicated over the expert-DP group

    @property
    def total(self) -> int:
        return self.dense + self.expert


def layer_shard(m: ModelSpec, tp: int, ep: int, etp: int, moe: bool) -> LayerShard:
    return m.memo(("layer_shard", tp, ep, etp, moe), lambda: _layer_shard(m, tp, ep, etp, moe))


def _layer_shard(m: ModelSpec, tp: int, ep: int, etp: int, moe: bool) -> LayerShard:
    """Parameters of one layer on one GPU under TP (attention, MLP), EP x ETP (experts).

    Norms and the router are replicated across TP (Megatron keeps them whole on every TP rank).
    """
    replicated = 2 * norm_params(m)
    attention = attention_shard(m, tp)
    if not moe:
        assert m.ffn_hidden_size is not None
        return LayerShard(dense=attention + -(-mlp_params(m, m.ffn_hidden_size) // tp) + replicated, expert=0)
    dense = attention + -(-shared_expert_params(m) // tp) + replicated + router_params(m)
    local_experts = (m.num_experts or 0) // ep
    return LayerShard(dense=dense, expert=local_experts * -(-expert_params(m) // etp))


def embedding_shard(m: ModelSpec, tp: int) -> int:
    """The first stage's embedding on one GPU: the vocabulary is split across TP (VocabParallelEmbedding)."""
    return embedding_params(m) - m.vocab_size * m.hidden_size + -(-m.vocab_size * m.hidden_size // tp)


def mtp_shard(m: ModelSpec, tp: int) -> int:
    """One MTP layer's parameters on one GPU beyond its transformer layer: the norms and eh_proj (a
    ColumnParallelLinear, split by TP)."""
    return 3 * norm_params(m) + -(-2 * m.hidden_size * m.hidden_size // tp)


def output_shard(m: ModelSpec, tp: int, pp: int) -> int:
    """The last stage's final norm + output layer on one GPU.

    With tied weights and PP > 1 Megatron keeps a copy of the word embedding on the last stage
    (`setup_embeddings_and_output_layer`), so the output matrix is there either way unless PP == 1 and tied.
    """
    has_matrix = m.untie_embeddings_and_output_weights or pp > 1
    return norm_params(m) + (-(-m.vocab_size * m.hidden_size // tp) if has_matrix else 0)
