"""Activation memory of one transformer layer for one micro-batch, in bytes (16-bit activations).

Generalises Korthikanti et al. 2022 (arXiv:2205.05198), sec. 4 and Table 2, to GQA, SwiGLU, flash attention,
context parallelism and MoE. With MHA, ffn = 4h, dropout and no flash attention it reduces to their
`sbh(34 + 5as/h)` (no parallelism), `sbh(10 + 24/t + 5as/(ht))` (TP), `sbh(34/t + 5as/(ht))` (TP + SP),
`sbh·34/t` (TP + SP + selective recompute) and `2sbh` (full recompute); tests check each case.
"""

from __future__ import annotations

from app.planner.attention import attention_shape
from app.planner.specs import ModelSpec, ParallelConfig, TrainingSpec

ACT = 2  # bytes per 16-bit activation element


def tokens(model: ModelSpec, par: ParallelConfig) -> int:
    """Tokens of one micro-batch on one GPU along the sequence (CP splits the sequence)."""
    return model.seq_length // par.cp * par.micro_batch_size


def _sp_div(par: ParallelConfig) -> int:
    return par.tp if par.sequence_parallel and par.tp > 1 else 1


def outside_tp_bytes(model: ModelSpec, par: ParallelConfig) -> float:
    """Tensors outside the TP region (Korthikanti's 10sbh): two norm inputs, the QKV and fc1 inputs, and
    the two dropout masks (1 byte each, only if dropout > 0). Sequence parallelism splits them by t."""
    sbh = tokens(model, par) * model.hidden_size
    masks = 2 * sbh if model.hidden_dropout > 0 else 0
    return (4 * ACT * sbh + masks) / _sp_div(par)


def attention_bytes(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, keep_scores: bool) -> float:
    """Q, K, V and the projection input (TP-split), plus the s x s scores unless flash attention or
    selective recompute drops them (softmax output 2 B, dropout mask 1 B and dropout output 2 B per score)."""
    sb = tokens(model, par)
    shape = attention_shape(model)
    widths = shape.q_width + shape.k_width + shape.v_width + shape.out_in
    qkv_proj = ACT * sb * (widths / par.tp + shape.latent_width)
    if training.flash_attention:
        # softmax statistics in fp32, one per head and query position
        return qkv_proj + 4 * sb * model.num_attention_heads / par.tp
    if not keep_scores:
        return qkv_proj
    per_score = ACT + (1 + ACT if model.attention_dropout > 0 else 0)
    scores = model.num_attention_heads * sb * (model.seq_length // par.cp)
    return qkv_proj + per_score * scores / par.tp


def mlp_bytes(model: ModelSpec, tokens_: float, ffn: int, tp: int) -> float:
    """fc1 output kept for the activation (x2 with SwiGLU) and the fc2 input, TP-split (Korthikanti's 16sbh/t)."""
    fc1_out = 2 * ffn if model.swiglu else ffn
    return ACT * tokens_ * (fc1_out + ffn) / tp


def moe_imbalance(model: ModelSpec, training: TrainingSpec) -> float:
    """Routed tokens on the busiest rank over the mean: the capacity factor when tokens are capped (and padded
    to capacity), else the training's load-imbalance margin for dropless routing."""
    if not model.is_moe:
        return 1.0
    return model.moe_capacity_factor or training.moe_load_imbalance


def moe_mlp_bytes(model: ModelSpec, par: ParallelConfig, imbalance: float) -> float:
    """Routed experts: each GPU processes its tokens x top-k (traded, not removed, by EP) times the load
    imbalance margin; it keeps the dispatched input and the combine input (h each) plus the expert MLP
    tensors split by expert-TP. Shared experts behave as a dense MLP. Router logits in fp32."""
    sb = tokens(model, par) / _sp_div(par) if par.expert_tp == 1 else tokens(model, par)
    routed = sb * model.moe_router_topk * imbalance
    assert model.moe_ffn_hidden_size is not None
    experts = 2 * ACT * routed * model.hidden_size + mlp_bytes(model, routed, model.moe_ffn_hidden_size, par.expert_tp)
    shared = 0.0
    if model.moe_shared_expert_intermediate_size:
        shared = mlp_bytes(model, tokens(model, par), model.moe_shared_expert_intermediate_size, par.tp)
    router = 4 * tokens(model, par) * (model.num_experts or 0) / _sp_div(par)
    return experts + shared + router


def layer_bytes(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, moe: bool) -> float:
    """Cached per model and training spec on the fields of `par` it reads."""
    key = ("layer_bytes", *par.layer_fields, moe)
    return model.memo(key, lambda: _layer_bytes(model, par, training, moe), training)


def _layer_bytes(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, moe: bool) -> float:
    """One layer, one micro-batch, kept for backward without any recomputation (selective drops scores)."""
    keep_scores = par.recompute == "none"
    if moe:
        mlp = moe_mlp_bytes(model, par, moe_imbalance(model, training))
    else:
        assert model.ffn_hidden_size is not None
        mlp = mlp_bytes(model, tokens(model, par), model.ffn_hidden_size, par.tp)
    return outside_tp_bytes(model, par) + attention_bytes(model, par, training, keep_scores) + mlp


def checkpoint_bytes(model: ModelSpec, par: ParallelConfig) -> float:
    """Full recompute keeps only each layer's input, 2sbh (split by t with sequence parallelism)."""
    return ACT * tokens(model, par) * model.hidden_size / _sp_div(par)


def embedding_stage_bytes(model: ModelSpec, par: ParallelConfig) -> float:
    """First stage: the embedding dropout mask and the int64 token ids."""
    sb = tokens(model, par)
    mask = sb * model.hidden_size / _sp_div(par) if model.hidden_dropout > 0 else 0
    return mask + 8 * sb


def output_stage_bytes(model: ModelSpec, par: ParallelConfig) -> float:
    """Last stage, for the micro-batch in its loss: final-norm input, output-layer input and the logits
    (16-bit GEMM output plus the fp32 copy the vocab-parallel cross entropy keeps), split by TP.
    Megatron's theoretical_memory_usage counts `4sbh(1 + V/h)` for this term."""
    sb = tokens(model, par)
    norm_in = ACT * sb * model.hidden_size / _sp_div(par)
    out_in = ACT * sb * model.hidden_size
    logits = (ACT + 4) * sb * model.vocab_size / par.tp
    return norm_in + out_in + logits
