"""What makes a network the one named beyond its shape: RoPE base and scaling, QK norms, biases, MoE routing.

Megatron-LM defaults differ from most released models (RoPE base 10000, softmax routing after top-k, no QK norm,
init std 0.02, norm epsilon 1e-5), so a plan that leaves these out trains a different network. Field names follow
Megatron-LM's arguments (core_v0.16.1 megatron/training/arguments.py and megatron-core's TransformerConfig).
Also the one check for free text that ends up in files (names, sources): printable, bounded.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# megatron-core's Llama-3 RoPE scaling has only the factor as a parameter; the rest is fixed in
# RotaryEmbedding._apply_scaling (models/common/embeddings/rotary_pos_embedding.py, core_v0.16.1).
MEGATRON_LLAMA3_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def check_label(field: str, value: str, limit: int) -> str:
    """Free text that is shown in files and pages: printable characters only (no line or paragraph separators
    such as U+2028, U+2029 or U+0085, which YAML reads as line breaks; no control or format characters) and at
    most `limit` characters."""
    if len(value) > limit:
        raise ValueError(f"{field}: {len(value)} characters, at most {limit} are allowed")
    bad = sorted({f"U+{ord(c):04X}" for c in value if not c.isprintable()})
    if bad:
        raise ValueError(f"{field}: {value[:40]!r} contains characters that are not printable text ({', '.join(bad)})")
    return value


class RopeScaling(BaseModel):
    """RoPE frequency scaling of a long-context model: Llama-3.1's `llama3` or DeepSeek's `yarn`
    (Hugging Face config.json `rope_scaling`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["llama3", "yarn"] = Field(description="Scaling method (config.json rope_type).")
    factor: float = Field(gt=1.0, le=1024.0, description="Context extension factor (--rope-scaling-factor).")
    original_max_position_embeddings: int = Field(
        8192, ge=1, le=4_194_304, description="Context length the frequencies were trained for."
    )
    low_freq_factor: float = Field(1.0, gt=0, le=1024, description="llama3: low-frequency wavelength divisor.")
    high_freq_factor: float = Field(4.0, gt=0, le=1024, description="llama3: high-frequency wavelength divisor.")
    beta_fast: float = Field(32.0, gt=0, le=1024, description="yarn: fast rotation boundary (--beta-fast).")
    beta_slow: float = Field(1.0, gt=0, le=1024, description="yarn: slow rotation boundary (--beta-slow).")
    mscale: float = Field(1.0, ge=0, le=100, description="yarn: attention temperature scale (--mscale).")
    mscale_all_dim: float = Field(0.0, ge=0, le=100, description="yarn: mscale of all dims (--mscale-all-dim).")

    @model_validator(mode="after")
    def _check(self) -> RopeScaling:
        if self.type == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                f"rope_scaling: high_freq_factor({self.high_freq_factor}) must be > "
                f"low_freq_factor({self.low_freq_factor})"
            )
        return self

    def megatron_llama3_mismatch(self) -> list[str]:
        """What megatron-core's fixed Llama-3 scaling cannot express (empty: it trains this scaling)."""
        return [f"{k}({getattr(self, k)}) != {v}" for k, v in MEGATRON_LLAMA3_FIXED.items() if getattr(self, k) != v]


def router_errors(
    num_experts: int | None, topk: int, groups: int | None, group_topk: int | None, score: str, expert_bias: bool
) -> list[str]:
    """megatron-core TransformerConfig checks of group-limited routing (transformer_config.py, core_v0.16.1)."""
    out: list[str] = []
    if num_experts is None:
        given = [
            f"{name}({value})"
            for name, value, unset in (
                ("moe_router_num_groups", groups, None),
                ("moe_router_group_topk", group_topk, None),
                ("moe_router_enable_expert_bias", expert_bias, False),
                ("moe_router_score_function", score, "softmax"),
            )
            if value not in (unset, 0)
        ]
        if given:
            out.append(f"MoE router fields {', '.join(given)} are set but num_experts is not")
        return out
    if (groups is None) != (group_topk is None):
        out.append(f"moe_router_num_groups({groups}) and moe_router_group_topk({group_topk}) go together")
    elif groups is not None and group_topk is not None:
        if num_experts % groups:
            out.append(f"num_experts({num_experts}) % moe_router_num_groups({groups}) != 0")
        if group_topk > groups:
            out.append(f"moe_router_group_topk({group_topk}) > moe_router_num_groups({groups})")
        elif topk > group_topk * (num_experts // groups):
            out.append(
                f"moe_router_topk({topk}) > group_topk({group_topk}) x experts per group ({num_experts // groups})"
            )
    if expert_bias and score != "sigmoid":
        out.append("moe_router_enable_expert_bias needs moe_router_score_function sigmoid (aux-loss-free routing)")
    return out
