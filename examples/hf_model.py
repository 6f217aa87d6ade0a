"""The Hugging Face transformers network for a Megatron-style shape: what the planner's `deepspeed-hf` stack models
(eager PyTorch, SDPA attention, fp32 logits for the loss), built from a config, no weights downloaded.

- dense: LlamaForCausalLM, or Qwen3ForCausalLM with per-head q/k norms (`qk_layernorm`);
- MoE: MixtralForCausalLM's sparse block (every expert on each GPU, experts run one after another), or
  Qwen3MoeForCausalLM's with q/k norms; top-k weights renormalised as both do. DeepSpeed ZeRO-3 gathers either
  block whole (its `zero_optimization.leaf_module` defaults name both classes).

Used by examples/train_gpt.py with `--model-impl hf`. Refuses, naming the argument, what these classes cannot
build (LayerNorm, GELU MLPs, sliding windows, shared experts, leading dense layers, partial recomputation).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from gpt_model import GPTConfig
from torch import nn


@dataclass(frozen=True)
class HFShape(GPTConfig):
    """The example GPT's shape and what transformers' classes add: the head size, q/k norms and the experts."""

    swiglu: bool = True  # transformers' Llama, Qwen3 and MoE MLPs are SwiGLU
    kv_channels: int | None = None
    qk_layernorm: bool = False
    num_experts: int | None = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    max_position_embeddings: int | None = None


def unsupported(shape: HFShape, recompute_layers: int | None) -> list[str]:
    """Why these transformers classes cannot build `shape` (empty: they can)."""
    out = []
    if shape.position_embedding_type != "rope":
        out.append(f"--position-embedding-type {shape.position_embedding_type}: these classes use rope")
    if not shape.swiglu:
        out.append("--swiglu is required: transformers' Llama, Qwen3, Mixtral and Qwen3-MoE MLPs are SwiGLU")
    if shape.normalization != "RMSNorm":
        out.append(f"--normalization {shape.normalization}: these classes use RMSNorm")
    if shape.window_size is not None:
        out.append("--window-size: sliding windows are not built by the Hugging Face implementation here")
    if shape.num_experts and not shape.moe_ffn_hidden_size:
        out.append("--moe-ffn-hidden-size is required with --num-experts")
    if recompute_layers not in (None, 1):
        out.append(
            f"--recompute-num-layers {recompute_layers}: gradient checkpointing in transformers recomputes each "
            f"decoder layer (uniform, 1)"
        )
    return out


def transformers_config(shape: HFShape) -> object:
    import transformers

    common = dict(
        head_dim=shape.kv_channels or shape.hidden_size // shape.num_attention_heads,
        num_hidden_layers=shape.num_layers,
        hidden_size=shape.hidden_size,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_query_groups or shape.num_attention_heads,
        vocab_size=shape.vocab_size,
        max_position_embeddings=shape.max_position_embeddings or shape.seq_length,
        tie_word_embeddings=not shape.untie_embeddings_and_output_weights,
        attn_implementation="sdpa",
        use_cache=False,
    )
    if shape.num_experts:
        moe = dict(num_experts_per_tok=shape.moe_router_topk)
        if shape.qk_layernorm:
            return transformers.Qwen3MoeConfig(
                **common,
                **moe,
                num_experts=shape.num_experts,
                moe_intermediate_size=shape.moe_ffn_hidden_size,
                intermediate_size=shape.ffn_hidden_size or shape.moe_ffn_hidden_size,
                norm_topk_prob=True,
                decoder_sparse_step=1,
                mlp_only_layers=[],
            )
        return transformers.MixtralConfig(
            **common, **moe, num_local_experts=shape.num_experts, intermediate_size=shape.moe_ffn_hidden_size
        )
    ffn = shape.ffn_hidden_size or 4 * shape.hidden_size
    if shape.qk_layernorm:
        return transformers.Qwen3Config(**common, intermediate_size=ffn)
    return transformers.LlamaConfig(**common, intermediate_size=ffn)


class HFCausalLM(nn.Module):
    """`forward(tokens, labels)` -> mean cross-entropy on fp32 logits, as transformers' own loss computes it."""

    def __init__(self, shape: HFShape, recompute: bool) -> None:
        super().__init__()
        import transformers

        config = transformers_config(shape)
        self.model = transformers.AutoModelForCausalLM.from_config(config)
        if recompute:  # each decoder layer's input kept, the layer run again in backward
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.train()

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=tokens).logits
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
