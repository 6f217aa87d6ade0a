"""The model to train: its shape, from a preset, a Hugging Face config.json or numbers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

from pydantic import Field, PrivateAttr, field_validator, model_validator

from app.planner.errors import InputError
from app.planner.network import RopeScaling, check_label, router_errors
from app.planner.specs.common import Frozen, default_ffn_hidden_size

T = TypeVar("T")


class ModelSpec(Frozen):
    """A decoder-only transformer, with Megatron-LM's argument names. Parameter counts are derived."""

    name: str = Field("custom", description="A label for the model (a preset name or your own).")
    num_layers: int = Field(description="Number of transformer layers (--num-layers).", ge=1, le=1024)
    hidden_size: int = Field(description="Model width h (--hidden-size).", ge=8, le=262144)
    num_attention_heads: int = Field(description="Attention heads (--num-attention-heads).", ge=1, le=4096)
    num_query_groups: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Key/value heads for grouped-query attention (--num-query-groups); default = heads.",
    )
    kv_channels: int | None = Field(
        None, ge=1, le=65_536, description="Head dimension (--kv-channels); default hidden_size / num_attention_heads."
    )
    ffn_hidden_size: int | None = Field(
        None,
        ge=1,
        le=4_194_304,
        description="MLP width (--ffn-hidden-size); default 4h, or int(8h/3/64)*64 with SwiGLU.",
    )
    vocab_size: int = Field(description="Vocabulary size, padded as trained (--vocab-size).", ge=1, le=4_000_000)
    seq_length: int = Field(description="Training sequence length in tokens (--seq-length).", ge=1, le=4_194_304)
    swiglu: bool = Field(False, description="Gated SiLU MLP as in Llama (--swiglu): three MLP matrices.")
    untie_embeddings_and_output_weights: bool = Field(
        False, description="Separate input embedding and output layer (--untie-embeddings-and-output-weights)."
    )
    position_embedding_type: Literal["learned_absolute", "rope", "alibi", "none"] = Field(
        "rope", description="Position embedding (--position-embedding-type); learned ones add seq*h parameters."
    )
    normalization: Literal["LayerNorm", "RMSNorm"] = Field("RMSNorm", description="--normalization.")
    add_bias_linear: bool = Field(False, description="Biases in linear layers (GPT-3/BLOOM: yes, Llama: no).")
    embedding_layernorm: bool = Field(False, description="A LayerNorm after the word embedding (BLOOM).")
    hidden_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="--hidden-dropout (stores a mask if > 0).")
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="--attention-dropout.")
    multi_latent_attention: bool = Field(
        False, description="DeepSeek-style multi-latent attention (--multi-latent-attention)."
    )
    q_lora_rank: int | None = Field(None, ge=1, le=262_144, description="MLA query low-rank dimension (--q-lora-rank).")
    kv_lora_rank: int = Field(512, ge=1, le=262_144, description="MLA key/value low-rank dimension (--kv-lora-rank).")
    qk_head_dim: int = Field(128, ge=1, le=65_536, description="MLA per-head query/key dimension (--qk-head-dim).")
    qk_pos_emb_head_dim: int = Field(
        64, ge=0, le=65_536, description="MLA per-head RoPE dimension (--qk-pos-emb-head-dim)."
    )
    v_head_dim: int = Field(128, ge=1, le=65_536, description="MLA per-head value dimension (--v-head-dim).")
    num_experts: int | None = Field(
        None, description="Routed experts per MoE layer (--num-experts); none for a dense model.", ge=1, le=65_536
    )
    moe_router_topk: int = Field(2, description="Experts each token is routed to (--moe-router-topk).", ge=1, le=65_536)
    moe_ffn_hidden_size: int | None = Field(
        None,
        ge=1,
        le=4_194_304,
        description="MLP width of each routed expert (--moe-ffn-hidden-size); default ffn_hidden_size.",
    )
    moe_shared_expert_intermediate_size: int | None = Field(
        None,
        ge=1,
        le=16_777_216,
        description="Total width of the shared experts (--moe-shared-expert-intermediate-size).",
    )
    moe_first_dense_layers: int = Field(
        0, ge=0, le=1024, description="Leading layers with a dense MLP instead of MoE (DeepSeek's first_k_dense)."
    )
    moe_capacity_factor: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="Token capacity factor per expert (--moe-expert-capacity-factor); none = dropless.",
    )
    rotary_base: float = Field(
        10000.0, gt=0, le=1e12, description="RoPE base θ (--rotary-base): Llama-2 1e4, Llama-3 5e5, Mixtral/Qwen 1e6."
    )
    rope_scaling: RopeScaling | None = Field(
        None, description="RoPE frequency scaling (Llama-3.1 llama3: --use-rope-scaling; MLA yarn: --rope-type)."
    )
    rotary_percent: float = Field(1.0, gt=0, le=1, description="Share of each head rotated (--rotary-percent).")
    qk_layernorm: bool = Field(False, description="Norm on queries and keys (--qk-layernorm; Qwen3, MLA latents).")
    add_qkv_bias: bool = Field(False, description="Biases on the Q/K/V projections only (--add-qkv-bias; Qwen2).")
    norm_epsilon: float = Field(1e-5, gt=0, le=0.1, description="Norm epsilon (--norm-epsilon; config rms_norm_eps).")
    init_method_std: float = Field(
        0.02, gt=0, le=1, description="Std of the weight initialisation (--init-method-std; config initializer_range)."
    )
    moe_router_score_function: Literal["softmax", "sigmoid"] = Field(
        "softmax", description="MoE router scores (--moe-router-score-function): softmax, or sigmoid (DeepSeek-V3)."
    )
    moe_router_pre_softmax: bool = Field(
        False,
        description="Softmax over all experts before top-k, no renormalisation (--moe-router-pre-softmax). Softmax "
        "routers only: with sigmoid scores megatron-core always renormalises the top-k and ignores it (moe_utils.py "
        "topk_routing_with_score_function); the DeepSeek-V3 presets keep it, as Megatron-Bridge's bridge sets it.",
    )
    moe_router_topk_scaling_factor: float | None = Field(
        None, gt=0, le=100, description="Routed-weight scale (--moe-router-topk-scaling-factor; DeepSeek-V3 2.5)."
    )
    moe_router_enable_expert_bias: bool = Field(
        False, description="Aux-loss-free load balancing with a per-expert bias (--moe-router-enable-expert-bias)."
    )
    moe_router_num_groups: int | None = Field(
        None,
        ge=1,
        le=65_536,
        description="Group-limited routing: expert groups (--moe-router-num-groups; DeepSeek-V3 8).",
    )
    moe_router_group_topk: int | None = Field(
        None, ge=1, le=65_536, description="Group-limited routing: groups chosen per token (--moe-router-group-topk)."
    )
    moe_router_load_balancing_type: Literal["aux_loss", "seq_aux_loss", "none"] = Field(
        "aux_loss", description="Load-balancing loss (--moe-router-load-balancing-type)."
    )
    moe_aux_loss_coeff: float = Field(
        0.01, ge=0, le=1, description="Load-balancing loss weight (--moe-aux-loss-coeff; config router_aux_loss_coef)."
    )
    moe_shared_expert_gate: bool = Field(False, description="Sigmoid gate on the shared experts (Qwen2-MoE).")
    parallel_residual: bool = Field(
        False, description="Attention and MLP side by side on one residual (GPT-NeoX); Megatron's layer is sequential."
    )
    mtp_num_layers: int = Field(
        0,
        ge=0,
        le=16,
        description="Multi-token prediction depth (--mtp-num-layers; DeepSeek-V3: 1): each MTP layer is a transformer "
        "layer of the last layer's kind with two norms, a 2h x h projection and its own logits, on one stage.",
    )
    sliding_window: int | None = Field(
        None,
        ge=1,
        le=4_194_304,
        description="Sliding-window attention: keys each query sees, itself included (config.json sliding_window; "
        "Megatron --window-size sliding_window-1,0). None: every layer attends to the whole causal prefix.",
    )
    window_attn_skip_freq: int | None = Field(
        None,
        ge=2,
        le=1024,
        description="With sliding_window: every n-th layer attends to the whole sequence (--window-attn-skip-freq; "
        "gpt-oss and Gemma-2 2, Gemma-3 6). None: every layer is windowed.",
    )
    source: str = Field("", description="Where the shape comes from (paper, model card, config.json).")
    # Derived quantities, computed once per instance (the spec is frozen, so they never go stale).
    _memo: dict[object, object] = PrivateAttr(default_factory=dict)
    _owners: dict[int, object] = PrivateAttr(default_factory=dict)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ModelSpec:
        """A copy with its own (empty) memo: derived values of the original may not hold for the copy."""
        copy = super().model_copy(update=update, deep=deep)
        copy.__pydantic_private__ = {"_memo": {}, "_owners": {}}
        return copy

    def memo(self, key: object, compute: Callable[[], T], *owners: object) -> T:
        """The cached value of `compute()` for `key` on this spec. `owners` are other objects the value depends
        on, keyed by identity: the spec keeps every owner it has seen alive, so while an id is in a key no other
        object can have it."""
        private = self.__pydantic_private__  # the slot, not pydantic's __getattr__
        memo = private["_memo"]  # type: ignore[index]
        # the search asks tens of thousands of times per request, nearly always with one to three owners: those
        # keys are spelled out (unpacking `map(id, owners)` into the tuple took half of each lookup)
        n = len(owners)
        full_key: object
        if n == 2:
            full_key = (key, id(owners[0]), id(owners[1]))
        elif n == 3:
            full_key = (key, id(owners[0]), id(owners[1]), id(owners[2]))
        elif n == 1:
            full_key = (key, id(owners[0]))
        else:
            full_key = (key, *map(id, owners)) if owners else key
        try:
            return memo[full_key]  # type: ignore[no-any-return]
        except KeyError:
            pass
        value = memo[full_key] = compute()
        alive = private["_owners"]  # type: ignore[index]
        for owner in owners:
            alive.setdefault(id(owner), owner)
        return value

    def memo_size(self) -> int:
        """How many derived values the spec holds (interning.py bounds it)."""
        return len(self.__pydantic_private__["_memo"])  # type: ignore[index]

    @model_validator(mode="after")
    def _fill_defaults(self) -> ModelSpec:
        """Megatron's defaults for the optional shape fields, filled after the numbers are validated."""
        h, heads = self.hidden_size, self.num_attention_heads
        defaults: dict[str, int] = {}
        if self.num_query_groups is None:
            defaults["num_query_groups"] = heads
        if self.ffn_hidden_size is None:
            defaults["ffn_hidden_size"] = default_ffn_hidden_size(h, self.swiglu)
        if self.kv_channels is None:
            if h % heads:
                raise InputError(
                    "model.num_attention_heads",
                    f"hidden_size({h}) is not divisible by num_attention_heads({heads}); "
                    f"set kv_channels to give the head dimension",
                )
            defaults["kv_channels"] = h // heads
        if self.num_experts and self.moe_ffn_hidden_size is None:
            defaults["moe_ffn_hidden_size"] = defaults.get("ffn_hidden_size", self.ffn_hidden_size or 0)
        for name, value in defaults.items():
            object.__setattr__(self, name, value)  # frozen: set once, during validation
        return self

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        heads, groups = self.num_attention_heads, self.num_query_groups
        assert groups is not None and self.ffn_hidden_size is not None  # filled above
        if groups < 1 or heads % groups:
            raise InputError(
                "model.num_query_groups",
                f"num_attention_heads({heads}) must be a multiple of num_query_groups({groups})",
            )
        if self.ffn_hidden_size < 1:
            raise ValueError(f"ffn_hidden_size({self.ffn_hidden_size}) must be >= 1")
        if self.num_experts is not None:
            if self.moe_router_topk > self.num_experts:
                raise InputError(
                    "model.moe_router_topk",
                    f"moe_router_topk({self.moe_router_topk}) > num_experts({self.num_experts})",
                )
            if self.moe_first_dense_layers >= self.num_layers:
                raise InputError(
                    "model.moe_first_dense_layers",
                    f"moe_first_dense_layers({self.moe_first_dense_layers}) must be < num_layers({self.num_layers})",
                )
        elif self.moe_first_dense_layers or self.moe_shared_expert_intermediate_size:
            given = [
                (name, value)
                for name in ("moe_first_dense_layers", "moe_shared_expert_intermediate_size")
                if (value := getattr(self, name))
            ]
            named = ", ".join(f"{name}({value})" for name, value in given)
            raise InputError(
                f"model.{given[0][0]}",
                f"{named} {'is' if len(given) == 1 else 'are'} set but num_experts is not: set num_experts or "
                "leave them out",
            )
        errors = router_errors(
            self.num_experts,
            self.moe_router_topk,
            self.moe_router_num_groups,
            self.moe_router_group_topk,
            self.moe_router_score_function,
            self.moe_router_enable_expert_bias,
        )
        if errors:
            raise ValueError("; ".join(errors))
        if self.window_attn_skip_freq is not None and self.sliding_window is None:
            raise InputError(
                "model.window_attn_skip_freq",
                f"window_attn_skip_freq({self.window_attn_skip_freq}) is set but sliding_window is not",
            )
        if self.rope_scaling is not None and self.position_embedding_type != "rope":
            raise InputError(
                "model.rope_scaling",
                f"rope_scaling needs position_embedding_type rope, not {self.position_embedding_type}",
            )
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_label("model.name", v, 100)

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return check_label("model.source", v, 1000)

    # Derived sizes ------------------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def query_size(self) -> int:
        return self.head_dim * self.num_attention_heads

    @property
    def kv_size(self) -> int:
        return self.head_dim * (self.num_query_groups or self.num_attention_heads)

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None and self.num_experts > 1

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.moe_first_dense_layers if self.is_moe else 0

    @property
    def mtp_is_moe(self) -> bool:
        """An MTP layer takes the decoder's last layer spec (Megatron's get_gpt_mtp_block_spec): MoE when that is."""
        return self.num_moe_layers > 0

    @property
    def windowed_layers(self) -> int:
        """Layers that attend within the sliding window: every layer but each `window_attn_skip_freq`-th, counted
        from 1 (megatron-core transformer/utils.py is_layer_window_attention); 0 without a window."""
        if self.sliding_window is None:
            return 0
        n = self.window_attn_skip_freq
        return self.num_layers - (self.num_layers // n if n else 0)

    @property
    def num_parameters(self) -> int:
        from app.planner.params import total_parameters

        return total_parameters(self)

    @property
    def num_active_parameters(self) -> int:
        from app.planner.params import active_parameters

        return active_parameters(self)
