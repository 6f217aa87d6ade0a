"""Activation memory of one transformer layer for one micro-batch, in bytes, per model implementation.

The stack names the implementation (data/stacks.json `activation_layout`); each counts the tensors autograd keeps:

- `megatron` (Megatron-core/TE, Megatron-DeepSpeed): generalises Korthikanti et al. 2022 (arXiv:2205.05198) sec. 4
  and Table 2 to GQA, SwiGLU, flash attention, CP, MLA and MoE. With MHA, ffn = 4h, dropout and no flash attention it
  reduces to their `sbh(34 + 5as/h)` (no parallelism), `sbh(10 + 24/t + 5as/(ht))` (TP), `sbh(34/t + 5as/(ht))` (TP +
  SP), `sbh·34/t` (TP + SP + selective) and `2sbh` (full recompute); tests check each case. With FP8, Transformer
  Engine saves the FP8 cast of each GEMM input for the weight gradient (1 byte instead of 2; transformer_engine/pytorch/
  module/linear.py and layernorm_mlp.py save `inputmat`/`ln_out`/`act_out` as Float8Tensor).
- `hf-eager` (a Hugging Face transformers Llama-style model in eager PyTorch, SDPA attention): the unfused RMSNorm
  keeps its fp32 upcast, the pre-weight normalised tensor and its output (4h + 2h + 2h bytes per token, twice per
  layer); SDPA keeps q, k, v, its output and the log-sum-exp, the output projection its own contiguous copy of the
  attention output; SiLU·mul keeps gate, SiLU(gate), up and their product (8f bytes). That is ~1.5x the Megatron
  count for a Llama shape, as the H200 rows measure (modeling_llama.py LlamaRMSNorm, LlamaMLP, sdpa_attention_forward).
- `mpt` (llm-foundry's MPT with flash attention): LayerNorm input and output twice, q, k, v, attention output and the
  rearranged copy the output projection keeps, fc1 output and GELU output (llmfoundry/models/layers/blocks.py).
- `torchtitan` (torchtitan's Llama): eager, the tensors of `_torchtitan_eager`; under torch.compile Inductor fuses
  the element-wise work as Megatron's kernels do and keeps what they keep (`megatron`). Its selective recomputation is
  op-level (`op_sac_bytes`), not module-level.
- `maxtext` (MaxText under XLA): XLA fuses the element-wise work and keeps what Megatron's fused kernels keep; its
  selective recomputation is its named-checkpoint remat policy (`maxtext_remat_bytes`).

Selective recomputation drops the tensors of the modules it re-runs (megatron-core `recompute_modules`): core_attn
the s x s scores (nothing with fused attention), layernorm the norm outputs, mlp the MLP internals, moe/moe_act/
shared_experts the routed/activation/shared-expert tensors, mla_up_proj the up-projected q, k, v.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.attention import attention_shape
from app.planner.specs import ModelSpec, ParallelConfig, TrainingSpec

ACT = 2  # bytes per 16-bit activation element
FP32 = 4


def tokens(model: ModelSpec, par: ParallelConfig) -> int:
    """Tokens of one micro-batch on one GPU along the sequence (CP splits the sequence)."""
    return model.seq_length // par.cp * par.micro_batch_size


def _sp_div(par: ParallelConfig) -> int:
    return par.tp if par.sequence_parallel and par.tp > 1 else 1


def _gemm_in(training: TrainingSpec) -> int:
    """Bytes of a saved GEMM input: FP8 under Transformer Engine's FP8 recipes, else 16-bit."""
    return 1 if training.precision == "fp8" and training.software.costs.activation_layout == "megatron" else ACT


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes one layer keeps for one micro-batch, by the module that holds them (what recompute can drop)."""

    residual: float  # the two norm inputs (the residual stream): never recomputed
    layernorm: float  # norm outputs = QKV and fc1 inputs
    attention: float  # q, k, v, softmax statistics (and the s x s scores without flash attention)
    attention_out: float  # the output projection's input
    mlp: float  # dense MLP or routed experts' internals
    scores: float = 0.0  # the part of `attention` that core_attn recompute drops
    mla_up_proj: float = 0.0  # MLA: up-projected q, k, v (the part of `attention` that mla_up_proj drops)
    moe_act: float = 0.0  # the experts' activation tensors (part of mlp)
    shared_experts: float = 0.0
    router: float = 0.0
    masks: float = 0.0  # dropout masks

    @property
    def total(self) -> float:
        return (
            self.residual
            + self.layernorm
            + self.attention
            + self.attention_out
            + self.mlp
            + self.shared_experts
            + self.router
            + self.masks
        )


def moe_imbalance(model: ModelSpec, par: ParallelConfig, training: TrainingSpec) -> float:
    """Routed tokens on the busiest rank over the mean. Dropless routing: the training's load-imbalance margin across
    an EP group; with every expert on each GPU (EP 1) each GPU processes exactly its own tokens' pairs, 1. A capacity
    factor caps each expert at that many times its mean share and drops the rest; the experts' inputs are not padded
    up to it (megatron-core's default: --moe-pad-expert-input-to-capacity off, which the renderer never sets), so it
    caps the busiest rank's load and never raises it (a factor of 4 was costed as 4x the routed tokens, QA
    2026-12-07)."""
    if not model.is_moe:
        return 1.0
    dropless = training.moe_load_imbalance if par.ep > 1 else 1.0
    return min(dropless, model.moe_capacity_factor) if model.moe_capacity_factor else dropless


def routed_tokens(model: ModelSpec, par: ParallelConfig, training: TrainingSpec) -> float:
    """Token-expert pairs one GPU's experts process per micro-batch: the tokens entering the MoE layer on this rank
    (sequence-parallel shards of 1/t when experts are not tensor-parallel) x top-k, spread over the EP group and
    gathered again over expert-TP, times the load-imbalance margin of the busiest rank."""
    entering = tokens(model, par) * par.expert_tp / par.tp
    return entering * model.moe_router_topk * moe_imbalance(model, par, training)


def _megatron(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, moe: bool) -> LayerActivations:
    sb, h, t = tokens(model, par), model.hidden_size, par.tp
    sp, gin = _sp_div(par), _gemm_in(training)
    shape = attention_shape(model)
    masks = 2 * sb * h / sp if model.hidden_dropout > 0 else 0.0
    qkv = ACT * sb * (shape.q_width + shape.k_width + shape.v_width) / t
    latent = ACT * sb * shape.latent_width
    if training.flash_attention:
        stats = FP32 * sb * model.num_attention_heads / t
        attention, scores = qkv + latent + stats, 0.0
    else:
        per_score = ACT + (1 + ACT if model.attention_dropout > 0 else 0)
        scores = per_score * model.num_attention_heads * sb * (model.seq_length // par.cp) / t
        attention = qkv + latent + scores
    mla = qkv if model.multi_latent_attention else 0.0
    mlp = moe_act = shared = router = 0.0
    if moe:
        assert model.moe_ffn_hidden_size is not None
        routed = routed_tokens(model, par, training)
        f = model.moe_ffn_hidden_size / par.expert_tp
        fc1 = 2 * f if model.swiglu else f
        moe_act = ACT * routed * fc1 + gin * routed * f  # activation input (fc1 output) and fc2 input
        # the grouped fc1's input and the expert output the probability-weighted combine keeps (permute and the
        # all-to-alls save only indices; megatron-core moe_utils.permute/unpermute, token_dispatcher.py)
        mlp = gin * routed * h + ACT * routed * h + moe_act
        if model.moe_shared_expert_intermediate_size:
            shared = _mlp_internals(model, sb, model.moe_shared_expert_intermediate_size / t, gin) + gin * sb * h / sp
        router = FP32 * sb * (model.num_experts or 0) / sp
    else:
        assert model.ffn_hidden_size is not None
        mlp = _mlp_internals(model, sb, model.ffn_hidden_size / t, gin)
    return LayerActivations(
        residual=2 * ACT * sb * h / sp,
        layernorm=2 * gin * sb * h / sp,
        attention=attention,
        scores=scores,
        attention_out=gin * sb * shape.out_in / t,
        mla_up_proj=mla,
        mlp=mlp,
        moe_act=moe_act,
        shared_experts=shared,
        router=router,
        masks=masks,
    )


def _mlp_internals(model: ModelSpec, sb: float, ffn_local: float, gin: int) -> float:
    """fc1 output kept for the activation (x2 with SwiGLU) and the fc2 input (Korthikanti's 16sbh/t for 4h)."""
    fc1_out = 2 * ffn_local if model.swiglu else ffn_local
    return ACT * sb * fc1_out + gin * sb * ffn_local


def _hf_eager(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, moe: bool) -> LayerActivations:
    sb, h = tokens(model, par), model.hidden_size
    shape = attention_shape(model)
    norm_parts = 2 * (FP32 + ACT) * sb * h  # fp32 upcast + pre-weight normalised tensor, two norms
    attention = ACT * sb * (shape.q_width + shape.k_width + shape.v_width) + FP32 * sb * model.num_attention_heads
    if model.qk_layernorm:  # Qwen3's per-head q_norm / k_norm: fp32 upcast, normalised tensor, rsqrt per head
        heads = model.num_attention_heads + (model.num_query_groups or model.num_attention_heads)
        attention += (FP32 + ACT) * sb * (shape.q_width + shape.k_width) + FP32 * sb * heads
    router = shared = 0.0
    if moe:
        mlp, router, shared = _hf_sparse_moe(model, sb, training.software.costs.hf_experts)
    else:
        assert model.ffn_hidden_size is not None
        mlp = (4 if model.swiglu else 2) * ACT * sb * model.ffn_hidden_size
    return LayerActivations(
        residual=norm_parts,
        layernorm=2 * ACT * sb * h,
        attention=attention,
        attention_out=2 * ACT * sb * shape.out_in,  # SDPA's saved output + o_proj's contiguous input copy
        mlp=mlp,
        shared_experts=shared,
        router=router,
    )


def _hf_sparse_moe(model: ModelSpec, sb: float, experts_implementation: str | None) -> tuple[float, float, float]:
    """(experts, router, shared expert) bytes a Hugging Face sparse MoE block keeps. Every expert is local, so the
    `sb x top-k` token-expert pairs are exactly the tokens' (no imbalance). Per pair:
    - `grouped_mm` (transformers 5's default, integrations/moe.py grouped_mm_experts_forward): the gathered input
      and the down projection's output (2 x 2h B), gate_up's output, SiLU's and the product (4 x 2f B), the fp32
      routing weight and three int64 indices (the sort permutation, its token index, the inverse); per layer the
      experts' int32 offsets; per token the router's fp32 softmax (4 B per expert), top-k indices, weights and sum;
    - `eager` (transformers 4.57 MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock): the gathered input, the expert's
      output and its probability-weighted copy (3 x 2h B), w1's and w3's outputs, SiLU's and the product (4 x 2f B),
      the int64 token index and the bf16 weight (10 B); per token the router logits in bf16 as well.
    Qwen2-MoE's shared expert keeps a dense SwiGLU MLP's tensors, its output and the sigmoid gate's. Measured against
    autograd's saved tensors of the transformers blocks (tests/planner/test_hf_moe.py)."""
    assert model.moe_ffn_hidden_size is not None and model.num_experts and model.moe_router_topk
    h, f, k, experts = model.hidden_size, model.moe_ffn_hidden_size, model.moe_router_topk, model.num_experts
    pairs = sb * k
    if experts_implementation == "grouped_mm":
        kept = pairs * (2 * ACT * h + 4 * ACT * f + FP32 + 3 * 8) + 4 * experts
        router = sb * (experts * FP32 + k * (8 + FP32) + FP32)
    else:
        kept = pairs * (3 * ACT * h + 4 * ACT * f + 8 + ACT)
        router = sb * (experts * (ACT + FP32) + k * (8 + FP32) + FP32)
    shared = 0.0
    if model.moe_shared_expert_intermediate_size:
        shared = 4 * ACT * sb * model.moe_shared_expert_intermediate_size + ACT * sb * h + ACT * sb
    return kept, router, shared


def _mpt(model: ModelSpec, par: ParallelConfig) -> LayerActivations:
    sb, h = tokens(model, par), model.hidden_size
    shape = attention_shape(model)
    assert model.ffn_hidden_size is not None
    f = model.ffn_hidden_size
    return LayerActivations(
        residual=2 * ACT * sb * h,
        layernorm=2 * ACT * sb * h,
        attention=ACT * sb * (shape.q_width + shape.k_width + shape.v_width) + FP32 * sb * model.num_attention_heads,
        attention_out=ACT * sb * shape.out_in,  # flash saves its output, which out_proj keeps as its input
        mlp=(3 if model.swiglu else 2) * ACT * sb * f,
    )


def _torchtitan_eager(model: ModelSpec, par: ParallelConfig) -> LayerActivations:
    """torchtitan's Llama without torch.compile (models/llama/model.py, models/norms.py): each RMSNorm keeps its fp32
    upcast and the normalised 16-bit tensor (on the sequence shard under SP), a column-parallel linear its input
    (once for wq/wk/wv, once for w1/w3), SDPA its q and the k and v that repeat_kv expanded to every query head, its
    output and log-sum-exp, wo the contiguous copy of that output, and SiLU·mul w1's output, SiLU's, w3's and the
    product."""
    sb, h, t = tokens(model, par), model.hidden_size, par.tp
    sp = _sp_div(par)
    shape = attention_shape(model)
    assert model.ffn_hidden_size is not None
    f = model.ffn_hidden_size / t
    return LayerActivations(
        residual=2 * (FP32 + ACT) * sb * h / sp,  # fp32 upcast and the normalised tensor the weight multiplies
        layernorm=2 * ACT * sb * h,  # the column linears' inputs: whole sequences (all-gathered under SP)
        attention=ACT * sb * 3 * shape.q_width / t + FP32 * sb * model.num_attention_heads / t,
        attention_out=2 * ACT * sb * shape.out_in / t,
        mlp=(4 if model.swiglu else 2) * ACT * sb * f,
    )


def op_sac_bytes(model: ModelSpec, par: ParallelConfig) -> float:
    """torchtitan's op-level selective activation checkpointing (`selective_ac_option = "op"`,
    parallelisms/parallelize_llama.py `_save_list`): a block keeps its input (the checkpoint's) and the outputs of
    every other matmul in call order (wq, wv, w1 and w2 of wq, wk, wv, wo, w1, w3, w2), of SDPA (output and
    log-sum-exp) and of the reduce-scatters sequence parallelism ends wo and w2 with; all else is recomputed in
    backward. Under TP w2's saved matmul output is its partial sum over the whole sequence, before the
    reduce-scatter."""
    sb, h, t = tokens(model, par), model.hidden_size, par.tp
    sp = _sp_div(par)
    shape = attention_shape(model)
    assert model.ffn_hidden_size is not None
    f = model.ffn_hidden_size / t
    kept = ACT * sb * h / sp  # the block's input
    kept += ACT * sb * (shape.q_width + shape.v_width) / t  # wq, wv
    kept += ACT * sb * shape.out_in / t + FP32 * sb * model.num_attention_heads / t  # SDPA
    kept += ACT * sb * f + ACT * sb * h  # w1, w2
    if sp > 1:
        kept += 2 * ACT * sb * h / sp  # the reduce-scatters after wo and w2
    return kept


def maxtext_remat_bytes(model: ModelSpec, par: ParallelConfig) -> float:
    """MaxText's named-checkpoint remat as NVIDIA's recipes set it (`remat_policy=custom` with query_proj, key_proj,
    value_proj, qkv_proj and out_proj on the device; mlpwo too unless `recompute_modules` holds mlp, MaxText's
    save_dot_except_mlp): a layer keeps its input (the scan carry), q, k and v, the output projection's output and
    the MLP output; the norms, the attention core, the MLP's input GEMMs and the activation are recomputed."""
    sb, h = tokens(model, par), model.hidden_size
    shape = attention_shape(model)
    kept = ACT * sb * (h + shape.q_width + shape.k_width + shape.v_width + h)
    if "mlp" not in (par.recompute_modules or ()):
        kept += ACT * sb * h  # mlpwo's output
    return kept


def layer_activations(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, moe: bool) -> LayerActivations:
    """Cached per model and training spec on the fields of `par` one layer reads."""
    key = ("layer_activations", par.layer_key, moe)
    return model.memo(key, lambda: _layer_activations(model, par, training, moe), training)


def _layer_activations(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, moe: bool) -> LayerActivations:
    layout = training.software.costs.activation_layout
    if layout == "hf-eager":
        return _hf_eager(model, par, training, moe)
    if layout == "mpt":
        return _mpt(model, par)
    if layout == "torchtitan" and training.software.costs.elementwise == "hf-eager":
        return _torchtitan_eager(model, par)
    return _megatron(model, par, training, moe)


def selective_modules(par: ParallelConfig) -> tuple[str, ...]:
    """What selective recomputation re-runs: the plan's modules, or Megatron's default core_attn."""
    if par.recompute != "selective":
        return ()
    return par.recompute_modules or ("core_attn",)


def kept_bytes(a: LayerActivations, modules: tuple[str, ...]) -> float:
    """A layer's activations once the selectively recomputed modules drop theirs."""
    drop = 0.0
    for m in modules:
        drop += {
            "core_attn": a.scores,
            "layernorm": a.layernorm,
            "mlp": 0.0 if a.router else a.mlp,
            "moe": a.mlp + a.router + a.shared_experts if a.router else 0.0,
            "moe_act": a.moe_act,
            "shared_experts": a.shared_experts,
            "mla_up_proj": a.mla_up_proj,
        }[m]
    if "moe" in modules and "moe_act" in modules:
        drop -= a.moe_act  # moe already covers the activation
    return a.total - drop


def op_level_selective(training: TrainingSpec) -> bool:
    """The stack's selective recomputation is a policy over operators (torchtitan's op-level checkpointing,
    MaxText's named checkpoints: its activation layout), not Megatron's modules."""
    return training.software.costs.activation_layout in ("torchtitan", "maxtext")


def op_sac(training: TrainingSpec, par: ParallelConfig) -> bool:
    """This plan recomputes op-level (`op_level_selective` and selective recomputation)."""
    return par.recompute == "selective" and op_level_selective(training)


def _op_level_kept(model: ModelSpec, par: ParallelConfig, training: TrainingSpec) -> float:
    if training.software.costs.activation_layout == "maxtext":
        return maxtext_remat_bytes(model, par)
    return op_sac_bytes(model, par)


def layer_bytes(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, moe: bool) -> float:
    """One layer, one micro-batch, kept for backward without full recomputation (selective modules dropped)."""
    if op_sac(training, par):
        return _op_level_kept(model, par, training)
    return kept_bytes(layer_activations(model, par, training, moe), selective_modules(par))


def recompute_working_bytes(model: ModelSpec, par: ParallelConfig, training: TrainingSpec, moe: bool) -> float:
    """What op-level selective recomputation materialises again for the one layer in backward: the layer's tensors
    beyond those it kept (0 for other recomputation, whose working set `_stage_activations` counts itself)."""
    if not op_sac(training, par):
        return 0.0
    return max(0.0, layer_activations(model, par, training, moe).total - _op_level_kept(model, par, training))


def checkpoint_bytes(model: ModelSpec, par: ParallelConfig) -> float:
    """Full recompute keeps only each recomputed layer's input, 2sbh (split by t with sequence parallelism)."""
    return ACT * tokens(model, par) * model.hidden_size / _sp_div(par)


def embedding_stage_bytes(model: ModelSpec, par: ParallelConfig) -> float:
    """First stage: the embedding dropout mask and the int64 token ids."""
    sb = tokens(model, par)
    mask = sb * model.hidden_size / _sp_div(par) if model.hidden_dropout > 0 else 0
    return mask + 8 * sb


def mtp_input_bytes(model: ModelSpec, par: ParallelConfig) -> float:
    """One MTP layer's tensors before its transformer layer (multi_token_prediction.py): the enorm and hnorm
    inputs (h each) and their concatenation, eh_proj's input (2h), split by SP."""
    return ACT * tokens(model, par) * 4 * model.hidden_size / _sp_div(par)


def output_stage_bytes(model: ModelSpec, par: ParallelConfig, training: TrainingSpec) -> float:
    """Last stage, for the micro-batch in its loss: final-norm input, output-layer input and the logits.

    Megatron's vocab-parallel cross entropy keeps the 16-bit logits and an fp32 softmax, split by TP
    (theoretical_memory_usage counts `4sbh(1 + V/h)` for this term); Hugging Face upcasts the logits to fp32 for
    the loss and, at the start of backward, holds the 16-bit logits, the fp32 log-softmax it saved and the fp32
    gradient of the loss; a fused cross-entropy kernel (flash-attn's xentropy, llm-foundry's `fused_crossentropy`)
    keeps the 16-bit logits and writes their gradient in place. torchtitan (train.py: `cross_entropy(pred.float())`,
    then `del pred` before backward; with TP over vocabulary shards, loss_parallel) frees the 16-bit logits, and its
    peak is in the loss's backward: the fp32 log-softmax saved, nll_loss's gradient and log-softmax's gradient."""
    sb = tokens(model, par)
    logits_bytes = {"hf-fp32": 10, "torch-fp32": 3 * FP32, "fused-ce": ACT, "vocab-parallel": ACT + FP32}[
        training.software.costs.logits
    ]
    norm_in = ACT * sb * model.hidden_size / _sp_div(par)
    out_in = ACT * sb * model.hidden_size
    return norm_in + out_in + logits_bytes * sb * model.vocab_size / par.tp
