"""FLOPs and compute time of one transformer layer for one micro-batch on one GPU.

- GEMMs: a roofline of tensor-core throughput (`efficiency.gemm` x dense peak) against HBM traffic
  (`efficiency.hbm` x bandwidth), plus a fixed per-kernel cost (Williams et al. 2009, Roofline; the same
  size-dependent efficiency idea as Calculon's matrix efficiency tables). Backward = dgrad + wgrad = 2 x forward
  (Narayanan et al. 2021, sec. 5.1).
- Attention core: flash attention at `efficiency.attention` x peak with causal masking skipping half the
  scores, backward 2.5 x forward (Dao 2023, FlashAttention-2: 5 matmuls in backward vs 2 forward); without
  flash, two batched GEMMs over the full s x s scores plus memory-bound softmax and dropout.
- Element-wise kernels (norms, bias-dropout-add, activation, RoPE, softmax): bytes moved / HBM bandwidth;
  backward moves about twice the forward bytes.
- Model FLOPs: Megatron-LM `num_floating_point_operations` (training.py): 6 x per-token forward FLOPs,
  causal attention counted as q*s, recomputation excluded.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.activations import moe_imbalance
from app.planner.attention import Linear, attention_shape
from app.planner.gpu import GPUSpec
from app.planner.specs import ModelSpec, ParallelConfig, TrainingSpec

ACT = 2


@dataclass(frozen=True, slots=True)
class Gemm:
    m: float
    n: float
    k: float
    count: float = 1.0  # how many such GEMMs (batched heads, local experts)


def gemm_time(g: Gemm, gpu: GPUSpec, precision: str) -> float:
    eff = gpu.efficiency
    fp8 = precision == "fp8"
    peak = gpu.peak_flops(precision) * (eff.gemm_fp8 if fp8 else eff.gemm)
    in_bytes = 1 if fp8 else ACT
    flops = 2.0 * g.m * g.n * g.k
    traffic = in_bytes * (g.m * g.k + g.k * g.n) + ACT * g.m * g.n
    return g.count * (max(flops / peak, traffic / (gpu.hbm_bw * eff.hbm)) + eff.kernel_overhead_s)


def stream_time(num_bytes: float, kernels: int, gpu: GPUSpec) -> float:
    eff = gpu.efficiency
    return num_bytes / (gpu.hbm_bw * eff.hbm) + kernels * eff.kernel_overhead_s


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Seconds for one layer and one micro-batch on one GPU."""

    fwd: float  # forward (GEMMs + attention + element-wise)
    bwd: float  # backward
    recompute: float  # extra forward work in backward (selective or full recomputation)
    attention_fwd: float  # attention core forward alone (what CP's KV exchange overlaps with)


def _linear_gemms(model: ModelSpec, par: ParallelConfig, tokens: float, moe: bool) -> list[Gemm]:
    t = par.tp
    gemms = [_gemm(tokens, lin, t) for lin in attention_shape(model).linears]
    if not moe:
        assert model.ffn_hidden_size is not None
        return gemms + _mlp_gemms(model, tokens, model.ffn_hidden_size, t)
    assert model.moe_ffn_hidden_size is not None and model.num_experts
    local_experts = model.num_experts // par.ep
    per_expert = tokens * model.moe_router_topk * par.ep / model.num_experts
    gemms.append(Gemm(tokens, model.num_experts, model.hidden_size))  # router
    for g in _mlp_gemms(model, per_expert, model.moe_ffn_hidden_size, par.expert_tp):
        gemms.append(Gemm(g.m, g.n, g.k, local_experts))
    if model.moe_shared_expert_intermediate_size:
        gemms += _mlp_gemms(model, tokens, model.moe_shared_expert_intermediate_size, t)
    return gemms


def _gemm(tokens: float, lin: Linear, tp: int) -> Gemm:
    """Column-parallel layers split their output across TP, row-parallel ones their input."""
    n = lin.n_out / tp if lin.split == "column" else lin.n_out
    k = lin.n_in / tp if lin.split == "row" else lin.n_in
    return Gemm(tokens, n, k)


def _mlp_gemms(model: ModelSpec, tokens: float, ffn: int, tp: int) -> list[Gemm]:
    fc1_out = 2 * ffn if model.swiglu else ffn
    return [Gemm(tokens, fc1_out / tp, model.hidden_size), Gemm(tokens, model.hidden_size, ffn / tp)]


def _attention_time(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, gpu: GPUSpec) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core."""
    s_q = model.seq_length / par.cp
    s_k = float(model.seq_length)
    shape = attention_shape(model)
    b, heads = par.micro_batch_size, model.num_attention_heads / par.tp
    d_qk, d_v = shape.score_dim, shape.value_dim
    precision = "bf16" if training.precision == "fp8" else training.precision
    if training.flash_attention:
        causal = 0.5
        flops = 2.0 * s_q * s_k * b * heads * (d_qk + d_v) * causal
        fwd = flops / (gpu.peak_flops(precision) * gpu.efficiency.attention) + gpu.efficiency.kernel_overhead_s
        return fwd, 2.5 * fwd
    bmm = gemm_time(Gemm(s_q, s_k, d_qk, b * heads), gpu, precision) + gemm_time(
        Gemm(s_q, d_v, s_k, b * heads), gpu, precision
    )
    per_score = 4 + (5 if model.attention_dropout > 0 else 0)  # fused scale-mask-softmax, then dropout
    softmax = stream_time(per_score * s_q * s_k * b * heads, 2, gpu)
    return bmm + softmax, 2 * bmm + 2 * softmax


def _elementwise_fwd(model: ModelSpec, par: ParallelConfig, tokens: float, gpu: GPUSpec, moe: bool) -> float:
    """Norms and bias-dropout-adds on the hidden state (split by t only with SP), the MLP activation and
    RoPE inside the TP region."""
    sp = par.tp if par.sequence_parallel and par.tp > 1 else 1
    sbh = tokens * model.hidden_size / sp
    mask = 1 if model.hidden_dropout > 0 else 0
    hidden_bytes = 2 * (4 * ACT) * sbh + 2 * (3 * ACT + mask) * sbh
    permute = 0.0
    if moe:
        assert model.moe_ffn_hidden_size is not None
        ffn = model.moe_ffn_hidden_size * model.moe_router_topk / par.expert_tp
        permute = 2 * 2 * ACT * tokens * model.moe_router_topk * model.hidden_size  # permute + unpermute
    else:
        assert model.ffn_hidden_size is not None
        ffn = model.ffn_hidden_size / par.tp
    act_bytes = (3 if model.swiglu else 2) * ACT * tokens * ffn + permute
    shape = attention_shape(model)
    rope = 2 * ACT * tokens * (shape.q_width + shape.k_width) / par.tp if model.position_embedding_type == "rope" else 0
    return stream_time(hidden_bytes + act_bytes + rope, 8, gpu)


def layer_time(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, gpu: GPUSpec, moe: bool) -> LayerTime:
    """Cached per model, GPU and training spec on the fields of `par` it reads."""
    key = ("layer_time", *par.layer_fields, moe)
    return model.memo(key, lambda: _layer_time(model, par, training, gpu, moe), gpu, training)


def _layer_time(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, gpu: GPUSpec, moe: bool) -> LayerTime:
    tokens = model.seq_length / par.cp * par.micro_batch_size
    gemms = sum(gemm_time(g, gpu, training.precision) for g in _linear_gemms(model, par, tokens, moe))
    if moe:  # the busiest GPU processes `imbalance` x the mean routed tokens
        gemms *= 1.0 + (moe_imbalance(model, training) - 1.0) * _expert_share(model)
    attn_f, attn_b = _attention_time(model, par, training, gpu)
    elem = _elementwise_fwd(model, par, tokens, gpu, moe)
    fwd = gemms + attn_f + elem
    bwd = 2 * gemms + attn_b + 2 * elem
    recompute = {"none": 0.0, "selective": attn_f, "full": fwd}[par.recompute]
    return LayerTime(fwd=fwd, bwd=bwd, recompute=recompute, attention_fwd=attn_f)


def _expert_share(model: ModelSpec) -> float:
    """Fraction of an MoE layer's GEMM FLOPs spent in routed experts (what imbalance stretches)."""
    assert model.moe_ffn_hidden_size is not None
    expansion = 3 if model.swiglu else 2
    experts = model.moe_router_topk * model.moe_ffn_hidden_size * expansion
    attention = sum(lin.n_in * lin.n_out for lin in attention_shape(model).linears) / model.hidden_size
    shared = (model.moe_shared_expert_intermediate_size or 0) * expansion
    return experts / (experts + attention + shared)


def output_layer_time(
    model: ModelSpec, par: ParallelConfig, training: TrainingSpec, gpu: GPUSpec
) -> tuple[float, float]:
    """(forward, backward) of the final norm, output GEMM and vocab-parallel cross entropy (fp32)."""
    tokens = model.seq_length / par.cp * par.micro_batch_size
    precision = "bf16" if training.precision == "fp8" else training.precision  # TE keeps the head in bf16
    gemm = gemm_time(Gemm(tokens, model.vocab_size / par.tp, model.hidden_size), gpu, precision)
    ce = stream_time((ACT + 3 * 4) * tokens * model.vocab_size / par.tp, 4, gpu)
    return gemm + ce, 2 * gemm + ce


def model_flops_per_token(model: ModelSpec) -> float:
    """Megatron-LM `num_floating_point_operations` per token (forward + backward, no recompute): 6 x the
    matrix parameters a token passes through (top-k experts for MoE) + 6 x the causal attention core
    (`heads * (score_dim + value_dim) / 2 * s` per layer, i.e. q*s for MHA)."""
    return model.memo("flops_per_token", lambda: _model_flops_per_token(model))


def _model_flops_per_token(model: ModelSpec) -> float:
    h, s = model.hidden_size, model.seq_length
    shape = attention_shape(model)
    expansion = 3 if model.swiglu else 2
    dense_layers = model.num_layers - model.num_moe_layers
    assert model.ffn_hidden_size is not None
    mlp = model.ffn_hidden_size * expansion * dense_layers
    if model.is_moe:
        assert model.moe_ffn_hidden_size is not None
        shared = model.moe_shared_expert_intermediate_size or 0
        mlp += (model.moe_ffn_hidden_size * model.moe_router_topk + shared) * expansion * model.num_moe_layers
    attn_linear = sum(lin.n_in * lin.n_out for lin in shape.linears)
    core = model.num_attention_heads * (shape.score_dim + shape.value_dim) / 2 * s
    return 6.0 * (h * mlp + model.num_layers * (attn_linear + core) + h * model.vocab_size)


def recompute_flops_per_token(model: ModelSpec, recompute: str) -> float:
    """Extra FLOPs per token spent recomputing (for HFU): a forward of the layers for full recompute, the
    attention core's forward for selective."""
    if recompute == "none":
        return 0.0
    per_token = model_flops_per_token(model) - 6.0 * model.hidden_size * model.vocab_size
    shape = attention_shape(model)
    core = (
        6.0 * model.num_layers * model.num_attention_heads * (shape.score_dim + shape.value_dim) / 2 * model.seq_length
    )
    return per_token / 3 if recompute == "full" else core / 3
