"""Device compute time of one transformer layer for one micro-batch on one GPU, per software stack.

- GEMMs: a roofline of tensor-core throughput against HBM traffic plus a fixed per-kernel cost (Williams et al.
  2009, Roofline). The rate is the GPU's isolated large-GEMM rate (`gpu.efficiency.gemm`, hardware; measured by
  `launcher probe`) times the share the stack's GEMMs keep in training (`gemm_fraction`, data/stacks.json).
  Backward = dgrad + wgrad = 2 x forward (Narayanan et al. 2021, sec. 5.1). Under FP8 (Transformer Engine) the
  transformer layers' GEMMs run at the FP8 rate; attention and the output layer stay in 16-bit.
- Attention core: the stack's kernel (cuDNN/TE fused, FlashAttention-2, SDPA, Triton) at its rate for the tile
  lengths and head size it runs (`AttentionRate`), causal masking skipping half the scores; backward is 2.5x the
  forward FLOPs (FlashAttention-2: 5 matmuls against 2) at the backward rate. Sliding-window layers score each
  query against its window plus the query block's own length of keys, over that short span (`_window_keys`), where
  the kernel skips the blocks outside the window (never more than the same layer without a window); a kernel that
  takes the window as a mask (PyTorch SDPA) scores every query against every key. Without flash attention, two
  batched GEMMs over the full s x s scores plus memory-bound softmax and dropout.
- Element-wise kernels by bytes moved over HBM, per implementation (`elementwise`): fused Megatron/TE kernels,
  Hugging Face eager ops (unfused RMSNorm in fp32, RoPE by rotate_half, SiLU then mul), or llm-foundry's MPT.
  Backward moves about twice the forward bytes. Each implementation also counts its operator launches, which
  set the host (CPU) floor of a step at small micro-batches.
- Model FLOPs: Megatron-LM `num_floating_point_operations` (training.py): 6 x per-token forward FLOPs, causal
  attention counted as q*s, recomputation excluded.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.activations import moe_imbalance, op_sac, routed_tokens, selective_modules
from app.planner.attention import Linear, attention_shape
from app.planner.gpu import GPUSpec
from app.planner.specs import ModelSpec, ParallelConfig, TrainingSpec
from app.planner.stack import GenerationCosts, attention_kernel

ACT = 2
# Hugging Face's sparse MoE block (transformers 4.57 MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock), run eagerly:
# the router's gate, fp32 softmax, top-k, renormalisation, cast, zeros, one_hot, sum, greater and the nonzero of the
# experts hit (11 launches); per expert hit, torch.where (a nonzero), the gather of its tokens, w1, SiLU, w3, mul,
# w2, the weights' gather, their product and the index_add into the output (10). Per token-expert pair the
# gather reads and writes 2h B each way, the weighting 3 x 2h, the index_add 3 x 2h: 14h bytes.
HF_ROUTER_OPS = 11
HF_EXPERT_OPS = 10
HF_MOE_BYTES_PER_PAIR = 14
# transformers 5's default, grouped_mm_experts_forward (integrations/moe.py): the router (linear, float, softmax,
# top-k, sum, div) and sort, the gathers of tokens and weights, histc, cumsum, two grouped GEMMs, chunk, SiLU, mul,
# the fp32 weighting, the inverse permutation (empty, arange, index_put), its gather and the sum over top-k, the
# cast: 24 launches, no host sync (the offsets stay on the GPU). Per pair: the gather 2 x 2h B, the weighting
# 2h + 4h, the gather back 2 x 4h, the sum's read 4h: 22h bytes; per token the sum's write and the cast 6h.
HF_GROUPED_OPS = 24
HF_GROUPED_BYTES_PER_PAIR = 22
CAUSAL = 0.5  # causal masking computes half of the s x s scores
ATTN_BWD_FLOPS = 2.5  # FlashAttention-2: 5 matmuls in backward against 2 in forward
# PyTorch's context_parallel (torch/distributed/tensor/experimental/_attention.py, `_templated_ring_attention`): after
# each K/V block's SDPA call but the first, `_SDPAMerger.step` merges the block's output and LSE into fp32 running
# ones (read the fp32 output and the block's bf16 one, write fp32: ~10 B per output element); in the backward
# (`_templated_ring_attention_backward`), every block accumulates dQ in fp32 and dK/dV (the query heads' width, after
# repeat_kv) into the fp32 buffer it passes on, concatenated and made contiguous for the send: ~50 B per element
TORCH_CP_MERGE_BYTES = 10
TORCH_CP_GRAD_BYTES = 50
# Transformer Engine's ring attention (AttnFuncWithCPAndKVP2P, TransformerEngine@d0067d0
# transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py): after the ring's attention steps
# the forward merges each step's partial output into the bf16 output in one fused kernel per step
# (flash_attn_fwd_out_correction, L1980-2025: read the output and the step's, write the output: 6 B per element),
# beside the step's log-sum-exp merge (L1943-1962, one small kernel); the backward adds every step's dQ into the dQ
# buffer (L2663-2700) and its dK, dV into the ring's received dK/dV buffer (L2730-): 6 B per element of Q, K and V
# each, three kernels per step. The rank holding the last chunk merges whole outputs at every step (the others half
# of them on the steps past their own chunk), and the ring waits for it at the next layer
TE_CP_CORRECTION_BYTES = 6
BWD_BYTES = 2.0  # backward element-wise kernels read the saved tensors and the incoming gradient, write one more


@dataclass(frozen=True, slots=True)
class Gemm:
    m: float
    n: float
    k: float
    count: float = 1.0  # how many such GEMMs (batched heads, local experts)
    grouped: bool = False  # all `count` in one kernel (torch's grouped_mm): its fixed cost once


def gemm_rate(gpu: GPUSpec, costs: GenerationCosts, precision: str) -> float:
    """FLOP/s a stack's training GEMMs reach: isolated rate x the share kept in training."""
    if precision == "fp8":
        return gpu.peak_flops("fp8") * gpu.efficiency.gemm_fp8 * costs.gemm_fp8_fraction
    return gpu.peak_flops(precision) * gpu.efficiency.gemm * costs.gemm_fraction


REFERENCE_K = 8192  # the isolated-GEMM rate (gpu.efficiency.gemm) is measured on 8192^3


def k_factor(k: float, gpu: GPUSpec) -> float:
    """Share of the reference rate a GEMM with inner dimension k keeps: each output tile runs k/BK main-loop
    iterations plus a fixed prologue and epilogue (CUTLASS/cuBLAS tile pipelines), `k/(k + k_half)` normalised to
    the 8192 reference."""
    half = gpu.efficiency.gemm_k_half
    return (k / (k + half)) / (REFERENCE_K / (REFERENCE_K + half)) if half else 1.0


def gemm_time(g: Gemm, gpu: GPUSpec, costs: GenerationCosts, precision: str) -> float:
    in_bytes = 1 if precision == "fp8" else ACT
    flops = 2.0 * g.m * g.n * g.k
    traffic = in_bytes * (g.m * g.k + g.k * g.n) + ACT * g.m * g.n
    compute_s = flops / (gemm_rate(gpu, costs, precision) * k_factor(g.k, gpu))
    launches = 1.0 if g.grouped else g.count
    return g.count * max(compute_s, traffic / (gpu.hbm_bw * gpu.efficiency.hbm)) + launches * costs.kernel_overhead_s


def stream_time(num_bytes: float, kernels: float, gpu: GPUSpec, costs: GenerationCosts) -> float:
    return num_bytes / (gpu.hbm_bw * gpu.efficiency.hbm) + kernels * costs.kernel_overhead_s


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Seconds (device) and operator launches (host) for one layer and one micro-batch on one GPU."""

    fwd: float  # forward (GEMMs + attention + element-wise)
    bwd: float  # backward
    recompute: float  # extra forward work in backward (selective modules or full recomputation)
    attention_fwd: float  # attention core forward alone (what CP's exchange overlaps with)
    attention_bwd: float
    gemm_fwd: float  # the layer's GEMMs in forward (what TP communication overlap hides behind)
    mlp_fwd: float  # the MLP/expert part of the forward (what EP overlap and moe recompute read)
    ops_fwd: float  # operator launches in forward (backward: twice)


def _linear_gemms(
    model: ModelSpec, par: ParallelConfig, training: TrainingSpec, tokens: float, moe: bool
) -> list[Gemm]:
    t = par.tp
    gemms = [_gemm(tokens, lin, t) for lin in attention_shape(model).linears]
    return gemms + _mlp_part_gemms(model, par, training, tokens, moe)


def _mlp_part_gemms(
    model: ModelSpec, par: ParallelConfig, training: TrainingSpec, tokens: float, moe: bool
) -> list[Gemm]:
    t = par.tp
    if not moe:
        assert model.ffn_hidden_size is not None
        return _mlp_gemms(model, tokens, model.ffn_hidden_size, t)
    assert model.moe_ffn_hidden_size is not None and model.num_experts
    local_experts = model.num_experts // par.ep
    # the tokens this GPU's experts see, spread over its local experts (grouped GEMM)
    per_expert = routed_tokens(model, par, training) / moe_imbalance(model, par, training) * par.ep / model.num_experts
    sp = t if par.sequence_parallel and t > 1 else 1
    gemms = [Gemm(tokens / sp, model.num_experts, model.hidden_size)]  # router
    grouped = training.software.costs.hf_experts == "grouped_mm"
    for g in _mlp_gemms(model, per_expert, model.moe_ffn_hidden_size, par.expert_tp):
        gemms.append(Gemm(g.m, g.n, g.k, local_experts, grouped))
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


def attention_times(
    model: ModelSpec, par: ParallelConfig, training: TrainingSpec, gpu: GPUSpec, costs: GenerationCosts
) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core on one GPU."""
    s_q = model.seq_length / par.cp
    s_k = float(model.seq_length)
    shape = attention_shape(model)
    b, heads = par.micro_batch_size, model.num_attention_heads / par.tp
    d_qk, d_v = shape.score_dim, shape.value_dim
    precision = "bf16" if training.precision == "fp8" else training.precision
    if training.flash_attention:
        kernel = attention_kernel(training.software.costs.attention_kernel)
        rate = kernel.rate(gpu.generation)
        per_score = 2.0 * s_q * b * heads * (d_qk + d_v)  # FLOPs per key each query is scored against

        def timed(keys: float, tile: float) -> tuple[float, float]:
            """`keys` scored per query on average, over key spans of `tile` per query block."""
            shape_factor = tile / (tile + rate.seq_half) * _head_factor(d_qk, rate.head_dim_half)
            peak = gpu.peak_flops(precision) * gpu.efficiency.clock * shape_factor
            flops = per_score * keys
            fwd = flops / (peak * rate.forward) + costs.kernel_overhead_s
            return fwd, ATTN_BWD_FLOPS * flops / (peak * rate.backward) + 2 * costs.kernel_overhead_s

        # ring CP runs the kernel on s/ring-long query and key chunks; a2a and all_gather on the full keys
        ring = ring_size(par)
        full = timed(s_k * CAUSAL, s_k / ring)
        out = s_q * b * heads * d_v  # elements of this rank's attention output
        if par.cp > 1 and training.software.costs.context_parallel == "torch-ring":
            merge = stream_time(TORCH_CP_MERGE_BYTES * (par.cp - 1) * out, 3 * (par.cp - 1), gpu, costs)
            grads = stream_time(TORCH_CP_GRAD_BYTES * par.cp * out, 6 * par.cp, gpu, costs)
            full = (full[0] + merge, full[1] + grads)
        elif ring > 1:  # Transformer Engine's ring (p2p, and the p2p level of a2a+p2p)
            tokens = s_q * b / par.tp  # this rank's tokens, over the TP split of the heads
            qkv = tokens * (shape.q_width + shape.k_width + shape.v_width)
            merge = stream_time(TE_CP_CORRECTION_BYTES * ring * out, 2 * ring, gpu, costs)
            grads = stream_time(TE_CP_CORRECTION_BYTES * ring * qkv, 3 * ring, gpu, costs)
            full = (full[0] + merge, full[1] + grads)
        windowed = model.windowed_layers
        if not windowed:
            return full
        if kernel.window:  # it skips the blocks outside the window, never doing more than without one
            local = tuple(map(min, timed(*_window_keys(model, kernel.window_block, s_k)), full))
        else:  # the window is a mask: every query against every key
            local = timed(s_k, s_k)
        share = windowed / model.num_layers  # each layer is charged the model's mean (stages mix both kinds)
        fwd, bwd = (f + (w - f) * share for f, w in zip(full, local, strict=True))
        return fwd, bwd
    bmm = gemm_time(Gemm(s_q, s_k, d_qk, b * heads), gpu, costs, precision) + gemm_time(
        Gemm(s_q, d_v, s_k, b * heads), gpu, costs, precision
    )
    per_score = 4 + (5 if model.attention_dropout > 0 else 0)  # fused scale-mask-softmax, then dropout
    softmax = stream_time(per_score * s_q * s_k * b * heads, 2, gpu, costs)
    return bmm + softmax, 2 * bmm + 2 * softmax


def ring_size(par: ParallelConfig) -> int:
    """Ranks in the context-parallel ring: all of CP for p2p, the across level of a2a+p2p, none (1) for a2a and
    all_gather, which give each rank whole sequences (a2a) or whole keys (all_gather)."""
    if par.cp == 1 or par.cp_comm_type in ("a2a", "all_gather"):
        return 1
    if par.cp_comm_type == "a2a+p2p" and par.hierarchical_cp_sizes:
        return par.hierarchical_cp_sizes[1]
    return par.cp


def _window_keys(model: ModelSpec, block: int, s: float) -> tuple[float, float]:
    """(keys scored per query on average, key span per query block) of a sliding-window layer under a kernel that
    skips the key blocks outside the window (FlashAttention's `window_size`, cuDNN's sliding window). A block of
    `block` queries runs over the window and its own rows, `x = w + block` keys (the partly masked edge blocks
    computed whole), or its causal prefix where that is shorter: the first `x` queries see their prefix, so on
    average `x (1 - x / 2s)` keys, never more than causal attention's `s / 2`."""
    assert model.sliding_window is not None
    x = float(model.sliding_window + block)
    if x >= s:
        return s * CAUSAL, s
    return x * (1 - x * CAUSAL / s), x


def _head_factor(d: float, half: float) -> float:
    """Attention kernels run head-size-wide tiles: small heads reach a smaller share (normalised at d = 128)."""
    return (d / (d + half)) / (128 / (128 + half)) if half else 1.0


@dataclass(frozen=True, slots=True)
class Elementwise:
    """Forward bytes over HBM and operator launches of a layer's element-wise work, by module."""

    norm_bytes: float
    attention_bytes: float  # RoPE, layout copies around the attention core
    residual_bytes: float
    mlp_bytes: float  # activation function (and MoE permute/unpermute)
    ops: float

    @property
    def total(self) -> float:
        return self.norm_bytes + self.attention_bytes + self.residual_bytes + self.mlp_bytes


def elementwise(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, tokens: float, moe: bool) -> Elementwise:
    impl = training.software.costs.elementwise
    sp = par.tp if par.sequence_parallel and par.tp > 1 else 1
    h, shape = model.hidden_size, attention_shape(model)
    qk = (shape.q_width + shape.k_width) / par.tp
    rope = model.position_embedding_type == "rope"
    if moe:
        assert model.moe_ffn_hidden_size is not None
        routed = routed_tokens(model, par, training) / moe_imbalance(model, par, training)
        act_elems = routed * model.moe_ffn_hidden_size / par.expert_tp
        permute = 2 * 2 * ACT * routed * h  # permute + unpermute, read and write
    else:
        assert model.ffn_hidden_size is not None
        act_elems, permute = tokens * model.ffn_hidden_size / par.tp, 0.0
    if training.software.costs.repeat_kv and shape.q_width > shape.k_width:
        # repeat_kv: K and V read and written once per query head (the backward sums the copies back)
        repeated = ACT * (shape.k_width + shape.v_width) * (1 + shape.q_width / shape.k_width) / par.tp * tokens
    else:
        repeated = 0.0
    if impl == "hf-eager":
        # LlamaRMSNorm: to(fp32), pow, mean, rsqrt, mul, to(bf16), mul(weight): ~36 bytes per element, 7 kernels;
        # RoPE by rotate_half (mul, neg, cat, mul, add) ~20 bytes per q/k element; SiLU then mul ~10 bytes
        qk_norm = 36 * qk * tokens if model.qk_layernorm else 0.0
        moe_ops = 0.0
        if moe and training.software.costs.hf_experts == "grouped_mm":  # sort, gather, weigh, gather back, sum
            permute = HF_GROUPED_BYTES_PER_PAIR * routed * h + 6 * tokens * h
            moe_ops = HF_GROUPED_OPS
        elif moe:  # the loop: each expert's gather, weighting and index_add (per pair) instead of a permute
            permute = HF_MOE_BYTES_PER_PAIR * routed * h + ACT * tokens * h
            moe_ops = HF_ROUTER_OPS + HF_EXPERT_OPS * (model.num_experts or 0)
        return Elementwise(
            norm_bytes=2 * 36 * tokens * h / sp + qk_norm,
            attention_bytes=(20 * qk if rope else 0.0) * tokens + 4 * tokens * shape.out_in / par.tp + repeated,
            residual_bytes=2 * 6 * tokens * h / sp,
            mlp_bytes=(10 if model.swiglu else 4) * act_elems + permute,
            ops=14 + (10 if rope else 0) + 2 + 2 + 2 + 7 + (14 if model.qk_layernorm else 0) + moe_ops,
        )
    if impl == "mpt":
        return Elementwise(
            norm_bytes=2 * 4 * tokens * h,
            attention_bytes=0.0,
            residual_bytes=2 * 6 * tokens * h,
            mlp_bytes=(10 if model.swiglu else 4) * act_elems,
            ops=2 + 2 + 1 + 1 + 4,
        )
    # Megatron fused kernels: TE LayerNormLinear (read x, write the normalised GEMM input), fused RoPE, fused
    # bias-dropout-add (two inputs, one output), fused SwiGLU / GeLU (read fc1 output, write the fc2 input)
    gin = 1 if training.precision == "fp8" else ACT
    mask = 1 if model.hidden_dropout > 0 else 0
    # torch-compiled: Inductor leaves complex RoPE to eager fp32 kernels (~20 B per q/k element, as hf-eager's)
    rope_bytes = (20 if impl == "torch-compiled" else 2 * ACT) * qk if rope else 0.0
    return Elementwise(
        norm_bytes=2 * (ACT + gin) * tokens * h / sp,
        attention_bytes=rope_bytes * tokens + (ACT + gin) * tokens * shape.out_in / par.tp + repeated,
        residual_bytes=2 * (3 * ACT + mask) * tokens * h / sp,
        mlp_bytes=((2 if model.swiglu else 1) * ACT + gin) * act_elems + permute,
        ops=2 + ((4 if impl == "torch-compiled" else 1) if rope else 0) + 2 + 1 + (4 if moe else 0) + 5,
    )


def layer_time(
    model: ModelSpec, par: ParallelConfig, training: TrainingSpec, gpu: GPUSpec, costs: GenerationCosts, moe: bool
) -> LayerTime:
    """Cached per model, GPU and training spec on the fields of `par` one layer reads."""
    key = ("layer_time", par.layer_key, moe)
    return model.memo(key, lambda: _layer_time(model, par, training, gpu, costs, moe), gpu, training, costs)


def _layer_time(
    model: ModelSpec, par: ParallelConfig, training: TrainingSpec, gpu: GPUSpec, costs: GenerationCosts, moe: bool
) -> LayerTime:
    tokens = model.seq_length / par.cp * par.micro_batch_size
    precision = training.precision
    attn_gemms = [_gemm(tokens, lin, par.tp) for lin in attention_shape(model).linears]
    mlp_gemms = _mlp_part_gemms(model, par, training, tokens, moe)
    attn_t = [gemm_time(g, gpu, costs, precision) for g in attn_gemms]
    mlp_t = [gemm_time(g, gpu, costs, precision) for g in mlp_gemms]
    attn_g, mlp_g = sum(attn_t), sum(mlp_t)
    if moe:  # the busiest GPU processes `imbalance` x the mean routed tokens
        mlp_g *= 1.0 + (moe_imbalance(model, par, training) - 1.0) * _expert_share(model)
    attn_f, attn_b = attention_times(model, par, training, gpu, costs)
    ew = elementwise(model, par, training, tokens, moe)
    ew_f = stream_time(ew.total, ew.ops, gpu, costs)
    fwd = attn_g + mlp_g + attn_f + ew_f
    bwd = 2 * (attn_g + mlp_g) + attn_b + BWD_BYTES * ew_f
    mlp_f = mlp_g + stream_time(ew.mlp_bytes, 1, gpu, costs)
    shared_f = 0.0
    if moe and model.moe_shared_expert_intermediate_size:  # its two GEMMs (the last of mlp_t) and its activation
        per_elem = (2 if model.swiglu else 1) * ACT + (1 if precision == "fp8" else ACT)  # as elementwise() counts
        elems = tokens * model.moe_shared_expert_intermediate_size / par.tp
        shared_f = sum(mlp_t[-2:]) + stream_time(per_elem * elems, 1, gpu, costs)
    if moe and training.software.costs.hf_experts == "eager":
        waits = sparse_block_waits(model, costs, mlp_f - mlp_t[0])
        fwd, mlp_f = fwd + waits, mlp_f + waits
    return LayerTime(
        fwd=fwd,
        bwd=bwd,
        recompute=(
            _op_level_recompute(model, par, training, attn_t, mlp_t, attn_f, ew_f)
            if op_sac(training, par) and not moe
            else _recompute_time(par, fwd, attn_f, attn_g, mlp_f, shared_f, ew, gpu, costs, moe)
        ),
        attention_fwd=attn_f,
        attention_bwd=attn_b,
        gemm_fwd=attn_g + mlp_g,
        mlp_fwd=mlp_f,
        ops_fwd=ew.ops + len(attn_gemms) + len(mlp_gemms) + 1,
    )


def sparse_block_waits(model: ModelSpec, costs: GenerationCosts, experts_s: float) -> float:
    """Seconds a Hugging Face sparse MoE block's forward adds to its device time `experts_s`: the router's nonzero
    and each expert's torch.where copy a count to the host and wait for it, so the GPU has nothing queued when the
    host goes on: each of the E + 1 segments starts with one launch the GPU waits for, and an expert whose launches
    take longer than its kernels leaves the GPU idle for the difference (the host cannot run ahead across the
    sync). Backward has no such sync; its launches count against the host floor like any layer's."""
    experts = model.num_experts or 0
    launches = HF_EXPERT_OPS * costs.host_op_s
    return (experts + 1) * costs.host_op_s + experts * max(0.0, launches - experts_s / max(experts, 1))


def _recompute_time(
    par: ParallelConfig,
    fwd: float,
    attn_f: float,
    attn_g: float,
    mlp_f: float,
    shared_f: float,
    ew: Elementwise,
    gpu: GPUSpec,
    costs: GenerationCosts,
    moe: bool,
) -> float:
    """Extra forward work per layer that backward re-runs: the whole forward (full; partial full recompute is
    applied per stage by the caller) or the selected modules, each where Megatron applies it: "mlp" to dense MLPs
    only (transformer_layer.py, `if not self.is_moe_layer`), "moe", "moe_act" and "shared_experts" to the MoE
    block (moe_layer.py, experts.py, shared_experts.py), "moe" re-running the experts' activation with the block
    (as activations.kept_bytes drops it once)."""
    if par.recompute == "full":
        return fwd
    modules = selective_modules(par)
    extra = 0.0
    for m in modules:
        if m == "moe_act" and "moe" in modules:
            continue
        extra += {
            "core_attn": attn_f,
            "layernorm": stream_time(ew.norm_bytes, 2, gpu, costs),
            "mlp": 0.0 if moe else mlp_f,
            "moe": mlp_f if moe else 0.0,
            "moe_act": stream_time(ew.mlp_bytes, 1, gpu, costs) if moe else 0.0,
            "shared_experts": shared_f,
            "mla_up_proj": 0.5 * attn_g,
        }[m]
    return min(extra, fwd)


def _op_level_recompute(
    model: ModelSpec,
    par: ParallelConfig,
    training: TrainingSpec,
    attn_t: list[float],
    mlp_t: list[float],
    attn_f: float,
    ew_f: float,
) -> float:
    """What an operator-level policy re-runs in backward besides every element-wise operator of the forward.
    torchtitan's op-level checkpointing (activations.op_sac_bytes): the matmuls it did not save, wk, wo and w3 (the k
    share of the fused QKV GEMM, the output projection, the up half of the fused gate/up GEMM); SDPA's outputs are
    kept. MaxText's named checkpoints (activations.maxtext_remat_bytes): the attention core and the MLP's input
    GEMMs, and its output GEMM too where mlp is recomputed."""
    # MLA's down and up projections in place of one QKV GEMM: no stack with op-level recomputation runs MLA (the
    # rules refuse it), but an estimate of such a layout is still timed (it raised "too many values to unpack")
    *qkv_parts, out = attn_t
    qkv = sum(qkv_parts)
    fc1, fc2 = mlp_t[0], mlp_t[-1]
    if training.software.costs.activation_layout == "maxtext":
        return attn_f + fc1 + (fc2 if "mlp" in (par.recompute_modules or ()) else 0.0) + ew_f
    shape = attention_shape(model)
    k_share = shape.k_width / (shape.q_width + shape.k_width + shape.v_width)
    up_share = 0.5 if model.swiglu else 0.0
    return qkv * k_share + out + fc1 * up_share + ew_f


def _expert_share(model: ModelSpec) -> float:
    """Fraction of an MoE layer's MLP-part GEMM FLOPs spent in routed experts (what imbalance stretches)."""
    assert model.moe_ffn_hidden_size is not None
    expansion = 3 if model.swiglu else 2
    experts = model.moe_router_topk * model.moe_ffn_hidden_size * expansion
    shared = (model.moe_shared_expert_intermediate_size or 0) * expansion
    return experts / (experts + shared + (model.num_experts or 0) / model.hidden_size)


def output_layer_time(
    model: ModelSpec, par: ParallelConfig, training: TrainingSpec, gpu: GPUSpec, costs: GenerationCosts
) -> tuple[float, float]:
    """(forward, backward) of the final norm, output GEMM and cross entropy (fp32); cached per model, GPU and
    training spec on the fields of `par` it reads."""
    key = ("output_layer_time", par.tp, par.cp, par.micro_batch_size)
    return model.memo(key, lambda: _output_layer_time(model, par, training, gpu, costs), gpu, training, costs)


def _output_layer_time(
    model: ModelSpec, par: ParallelConfig, training: TrainingSpec, gpu: GPUSpec, costs: GenerationCosts
) -> tuple[float, float]:
    tokens = model.seq_length / par.cp * par.micro_batch_size
    precision = "bf16" if training.precision == "fp8" else training.precision  # TE keeps the head in 16-bit
    gemm = gemm_time(Gemm(tokens, model.vocab_size / par.tp, model.hidden_size), gpu, costs, precision)
    logits = tokens * model.vocab_size / par.tp
    if training.software.costs.logits in ("hf-fp32", "torch-fp32"):  # .float(), log_softmax, nll; backward three more
        return gemm + stream_time(18 * logits, 4, gpu, costs), 2 * gemm + stream_time(22 * logits, 4, gpu, costs)
    if training.software.costs.logits == "fused-ce":  # one pass over the 16-bit logits, gradient in place
        return gemm + stream_time(ACT * logits, 1, gpu, costs), 2 * gemm + stream_time(2 * ACT * logits, 1, gpu, costs)
    ce = stream_time((ACT + 3 * 4) * logits, 4, gpu, costs)
    return gemm + ce, 2 * gemm + ce


def mtp_proj_time(
    model: ModelSpec, par: ParallelConfig, training: TrainingSpec, gpu: GPUSpec, costs: GenerationCosts
) -> tuple[float, float]:
    """(forward, backward) of one MTP layer's eh_proj (2h -> h, split by TP) beyond its transformer layer; its
    logits and cross entropy run on the loss stage through the shared output layer (`output_layer_time`)."""
    tokens = model.seq_length / par.cp * par.micro_batch_size
    precision = "bf16" if training.precision == "fp8" else training.precision
    proj = gemm_time(Gemm(tokens, model.hidden_size / par.tp, 2 * model.hidden_size), gpu, costs, precision)
    return proj, 2 * proj


def model_flops_per_token(model: ModelSpec) -> float:
    """Megatron-LM `num_floating_point_operations` per token (forward + backward, no recompute): 6 x the
    matrix parameters a token passes through (top-k experts for MoE) + 6 x the causal attention core
    (`heads * (score_dim + value_dim) / 2 * s` per layer, i.e. q*s for MHA), a sliding-window layer's core over
    the keys its window holds (`causal_keys`; Megatron counts those layers as full ones)."""
    return model.memo("flops_per_token", lambda: _model_flops_per_token(model))


def causal_keys(model: ModelSpec) -> float:
    """Keys a token's query scores, summed over the layers (MTP ones included): s/2 on a full causal layer
    (Megatron's convention), `w - w^2 / 2s` on a layer with a window of w keys (each query sees min(i + 1, w)
    keys, averaged over the positions i), never more than s/2: a window of s keys or more is full causal attention
    (the formula went negative past 2s, and a stored plan read MFU -733.8 %, QA 2026-12-07)."""
    s, layers = float(model.seq_length), model.num_layers + model.mtp_num_layers
    windowed = model.windowed_layers
    if not windowed:
        return layers * s / 2
    w = min(float(model.sliding_window or s), s)
    return (layers - windowed) * s / 2 + windowed * min(s / 2, w - w * w / (2 * s))


def _model_flops_per_token(model: ModelSpec) -> float:
    h = model.hidden_size
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
    core = model.num_attention_heads * (shape.score_dim + shape.value_dim) * causal_keys(model)
    # MTP (Megatron-LM training.py num_floating_point_operations): each MTP layer is one more layer of the last
    # layer's kind, its norms and eh_proj (3h + 2h^2), and one more logits GEMM
    n_mtp = model.mtp_num_layers
    if n_mtp:
        if model.mtp_is_moe:
            assert model.moe_ffn_hidden_size is not None
            shared = model.moe_shared_expert_intermediate_size or 0
            mlp += (model.moe_ffn_hidden_size * model.moe_router_topk + shared) * expansion * n_mtp
        else:
            mlp += model.ffn_hidden_size * expansion * n_mtp
    mtp = n_mtp * (3 * h + 2 * h * h)
    layers = model.num_layers + n_mtp
    return 6.0 * (h * mlp + layers * attn_linear + core + mtp + h * model.vocab_size * (1 + n_mtp))


def recompute_flops_per_token(model: ModelSpec, recompute: str) -> float:
    """Extra FLOPs per token spent recomputing (for HFU): a forward of the layers for full recompute, the
    attention core's forward for selective."""
    if recompute == "none":
        return 0.0
    per_token = model_flops_per_token(model) - 6.0 * model.hidden_size * model.vocab_size * (1 + model.mtp_num_layers)
    shape = attention_shape(model)
    core = 6.0 * model.num_attention_heads * (shape.score_dim + shape.value_dim) * causal_keys(model)
    return per_token / 3 if recompute == "full" else core / 3
