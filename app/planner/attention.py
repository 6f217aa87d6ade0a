"""The attention block's shape: its linear layers and the widths of Q, K, V, for standard (MHA/GQA) and
multi-latent attention (DeepSeek-V2/V3, megatron-core `MLASelfAttention`).

MLA is modelled with its real matrices (query down/up projection, joint key-value down projection with the
decoupled RoPE key, key-value up projection, output projection; the down projections replicated across TP as in
megatron-core) and with full-width per-head Q, K, V after up-projection for activations and attention FLOPs;
the small latent tensors and their norms are counted, the absorbed-projection inference trick is not used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.planner.specs import ModelSpec

Split = Literal["column", "row", "none"]  # how TP splits a linear layer: its output, its input, or not at all


@dataclass(frozen=True, slots=True)
class Linear:
    n_in: int
    n_out: int
    split: Split
    bias: bool = False

    @property
    def params(self) -> int:
        return self.n_in * self.n_out + (self.n_out if self.bias else 0)

    def shard(self, tp: int) -> int:
        if self.split == "none":
            return self.params
        weight = self.n_in * self.n_out // tp
        bias = (self.n_out // tp if self.split == "column" else self.n_out) if self.bias else 0
        return weight + bias


@dataclass(frozen=True, slots=True)
class AttentionShape:
    linears: tuple[Linear, ...]
    q_width: int  # heads x per-head score dimension
    k_width: int  # key heads x per-head score dimension
    v_width: int  # value heads x per-head value dimension
    out_in: int  # output projection input: heads x value dimension
    score_dim: int
    value_dim: int
    latent_width: int  # MLA latents kept per token outside the TP split (0 for MHA/GQA)
    norm_params: int  # MLA's latent norms


def _shape(m: ModelSpec) -> AttentionShape:
    h, heads = m.hidden_size, m.num_attention_heads
    if not m.multi_latent_attention:
        q, kv = m.query_size, m.kv_size
        d = m.head_dim
        qkv_bias = m.add_bias_linear or m.add_qkv_bias  # Qwen2: biases on Q, K and V only (--add-qkv-bias)
        linears = (Linear(h, q + 2 * kv, "column", qkv_bias), Linear(q, h, "row", m.add_bias_linear))
        return AttentionShape(linears, q, kv, kv, q, d, d, 0, 0)
    score = m.qk_head_dim + m.qk_pos_emb_head_dim
    q_up = heads * score
    if m.q_lora_rank:
        q_linears: tuple[Linear, ...] = (Linear(h, m.q_lora_rank, "none"), Linear(m.q_lora_rank, q_up, "column"))
    else:
        q_linears = (Linear(h, q_up, "column"),)
    kv_linears = (
        Linear(h, m.kv_lora_rank + m.qk_pos_emb_head_dim, "none"),
        Linear(m.kv_lora_rank, heads * (m.qk_head_dim + m.v_head_dim), "column"),
    )
    out = Linear(heads * m.v_head_dim, h, "row")
    latent = (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_pos_emb_head_dim
    norms = (m.q_lora_rank or 0) + m.kv_lora_rank
    return AttentionShape(
        q_linears + kv_linears + (out,),
        q_up,
        q_up,
        heads * m.v_head_dim,
        heads * m.v_head_dim,
        score,
        m.v_head_dim,
        latent,
        norms,
    )


def attention_shape(m: ModelSpec) -> AttentionShape:
    return m.memo("attention_shape", lambda: _shape(m))  # depends on the model alone


def heads_per_rank(m: ModelSpec, tp: int) -> tuple[int, int]:
    """Query and key/value heads on one TP rank: K/V heads are replicated where TP exceeds the groups (megatron-core
    allows groups that divide TP); MLA has no grouping, each head has its own K and V."""
    q = m.num_attention_heads // tp
    if m.multi_latent_attention:
        return q, q
    return q, max((m.num_query_groups or m.num_attention_heads) // tp, 1)


def a2a_splits(m: ModelSpec, tp: int, size: int) -> bool:
    """All-to-all context parallelism over `size` ranks splits the heads of Q, K and V alike; Transformer Engine
    asserts that both counts per TP rank divide (dot_product_attention/context_parallel.py, AttnFuncWithCPAndQKVOA2A:
    "cp_comm_type='a2a' requires num_heads % cp_size == 0 for Q, K, V"; a2a+p2p views K and V the same way in
    flash_attn_a2a_communicate)."""
    q, kv = heads_per_rank(m, tp)
    return q % size == 0 and kv % size == 0
