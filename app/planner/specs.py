"""Typed, frozen, validated inputs of the planner.

Every spec validates on construction; errors are ``ValueError``s that name the field and the numbers, so
that the CLI and the API can show them as they are. Field descriptions are the one source of help text for
the OpenAPI schema and the web form.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from app.planner import catalog, strict
from app.planner.gpu import GPUSpec
from app.planner.hf_import import from_hf_config
from app.planner.network import RopeScaling, check_label, router_errors
from app.planner.profile import ClusterProfile

if TYPE_CHECKING:
    from app.planner.stack import Stack

T = TypeVar("T")
Precision = Literal["bf16", "fp16", "fp8"]
Framework = Literal["megatron", "deepspeed", "megatron-deepspeed", "pytorch-fsdp"]
Objective = Literal["throughput", "min_gpus", "headroom"]
Recompute = Literal["none", "selective", "full"]
RecomputeMethod = Literal["uniform", "block"]
# megatron-core TransformerConfig.recompute_modules (transformer_config.py): what selective recompute re-runs.
RecomputeModule = Literal["core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts"]
OffloadDevice = Literal["none", "cpu", "nvme"]
Schedule = Literal["1f1b", "interleaved"]
CPCommType = Literal["p2p", "all_gather", "a2a", "a2a+p2p"]
MoETokenDispatcher = Literal["alltoall", "flex"]
GradReduceDtype = Literal["fp32", "bf16"]
OptimizerStates = Literal["fp32", "bf16"]
FP8Recipe = Literal["delayed", "tensorwise", "blockwise", "mxfp8"]
PartitionMethod = Literal["parameters", "uniform", "type:transformer", "type:transformer|embedding"]
MegatronFSDP = Literal["optim", "optim_grads", "optim_grads_params"]

# Names that end up in shell scripts (host names, NIC names, paths) must be plain: no quotes, no `;`,
# no `$`, no backticks, no whitespace or newlines. Everything allowed is still quoted in every script.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$")
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/\-]*$")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    _no_bool_confusion = field_validator("*", mode="before")(strict.check)


def check_safe_name(field: str, value: str) -> str:
    if not SAFE_NAME.fullmatch(value) or len(value) > 253:
        raise ValueError(
            f"{field}: {value!r} is not a plain name (letters, digits, '.', '_', ':', '-'; "
            f"no spaces, quotes, ';', '$', backticks or newlines)"
        )
    return value


def check_safe_path(field: str, value: str) -> str:
    if not SAFE_PATH.fullmatch(value) or ".." in value.split("/") or len(value) > 1024:
        raise ValueError(
            f"{field}: {value!r} is not a plain absolute path (letters, digits, '.', '_', '-', '/'; "
            f"no '..', spaces, quotes, ';', '$', backticks or newlines)"
        )
    return value


def default_ffn_hidden_size(hidden_size: int, swiglu: bool) -> int:
    """Megatron-LM's default: 4h, or int(8h/3/64)*64 with SwiGLU (arguments.py, validate_args)."""
    return int(8 * hidden_size / 3 / 64) * 64 if swiglu else 4 * hidden_size


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
        False, description="Softmax over all experts before top-k, no renormalisation (--moe-router-pre-softmax)."
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
                raise ValueError(
                    f"hidden_size({h}) is not divisible by num_attention_heads({heads}); "
                    f"set kv_channels to give the head dimension"
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
            raise ValueError(f"num_attention_heads({heads}) must be a multiple of num_query_groups({groups})")
        if self.ffn_hidden_size < 1:
            raise ValueError(f"ffn_hidden_size({self.ffn_hidden_size}) must be >= 1")
        if self.num_experts is not None:
            if self.moe_router_topk > self.num_experts:
                raise ValueError(f"moe_router_topk({self.moe_router_topk}) > num_experts({self.num_experts})")
            if self.moe_first_dense_layers >= self.num_layers:
                raise ValueError(
                    f"moe_first_dense_layers({self.moe_first_dense_layers}) must be < num_layers({self.num_layers})"
                )
        elif self.moe_first_dense_layers or self.moe_shared_expert_intermediate_size:
            raise ValueError("MoE fields are set but num_experts is not")
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
        if self.rope_scaling is not None and self.position_embedding_type != "rope":
            raise ValueError(f"rope_scaling needs position_embedding_type rope, not {self.position_embedding_type}")
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
    def num_parameters(self) -> int:
        from app.planner.params import total_parameters

        return total_parameters(self)

    @property
    def num_active_parameters(self) -> int:
        from app.planner.params import active_parameters

        return active_parameters(self)


class ClusterSpec(Frozen):
    """Nodes of identical GPUs; bandwidths per GPU and per direction, in GB/s (bytes)."""

    num_nodes: int = Field(description="Number of nodes.", ge=1, le=100_000)
    gpus_per_node: int = Field(8, description="GPUs in each node.", ge=1, le=256)
    gpu: GPUSpec = Field(description="GPU type: a catalogue name or custom numbers.")
    intra_node_GBps: float | None = Field(
        None,
        ge=0.01,
        le=100_000,
        description="GPU-to-GPU bandwidth inside a node, per GPU and direction, GB/s "
        "(default: the catalogue's NVLink figure).",
    )
    inter_node_GBps: float | None = Field(
        None,
        ge=0.001,
        le=10_000,
        description="Network bandwidth between nodes per GPU and direction, GB/s "
        "(a 400 Gb/s NIC per GPU is 50 GB/s; default from the catalogue).",
    )
    nics: tuple[str, ...] = Field((), description="InfiniBand HCA names (e.g. mlx5_0 … mlx5_7), used for NCCL_IB_HCA.")
    socket_ifname: str | None = Field(
        None, description="Network interface for NCCL's bootstrap and sockets (NCCL_SOCKET_IFNAME), e.g. eth0."
    )
    hosts: tuple[str, ...] = Field((), description="Host names, one per node, head node first (optional).")
    cpu_memory_GiB: float = Field(1024.0, ge=1, le=1_048_576, description="CPU memory per node, GiB (for offload).")
    nvme_path: str | None = Field(None, description="Local NVMe mount for ZeRO-Infinity offload, e.g. /local_nvme.")
    nvme_GBps: float = Field(6.0, ge=0.01, le=10_000, description="NVMe read/write bandwidth per node, GB/s.")
    host_to_device_GBps: float | None = Field(
        None,
        ge=0.01,
        le=10_000,
        description="Pinned host↔GPU copy bandwidth per GPU, GB/s (default: the catalogue's PCIe).",
    )
    cpu_adam_params_per_s: float = Field(
        1.0e9,
        ge=1e3,
        le=1e15,
        description="CPU Adam updates per second per node (DeepSpeedCPUAdam), for offload plans.",
    )
    mtbf_hours: float | None = Field(
        None,
        ge=0.01,
        le=10_000_000,
        description="Mean time between failures of the whole job, hours (for the checkpoint interval and goodput; "
        "default: 50,677 GPU-hours per failure, Llama 3's rate on 16,384 H100, divided by the job's GPUs).",
    )
    checkpoint_storage_GBps: float | None = Field(
        None,
        ge=0.001,
        le=100_000,
        description="Aggregate bandwidth of the checkpoint storage for the whole job, GB/s (default: 1 GB/s per "
        "node, what Llama 3's 2 TB/s store gave each of its 2,048 nodes).",
    )
    restart_overhead_s: float | None = Field(
        None,
        ge=0,
        le=86_400,
        description="Seconds a restart costs besides loading the checkpoint: detection, rescheduling, start-up "
        "and initialisation (default 300).",
    )
    profile: ClusterProfile | None = Field(
        None,
        description="A cluster profile from `python -m launcher probe`: measured GEMM, NCCL and copy "
        "rates used in place of the catalogue's.",
    )

    @field_validator("gpu", mode="before")
    @classmethod
    def _resolve_gpu(cls, gpu: object) -> object:
        """`gpu` may be a catalogue name, or {"preset": name, ...overrides}, or all GPUSpec fields."""
        if isinstance(gpu, str):
            return catalog.gpu(gpu)
        if isinstance(gpu, dict) and "preset" in gpu:
            base = catalog.gpu(str(gpu["preset"])).model_dump()
            return {**base, **{k: v for k, v in gpu.items() if k != "preset"}}
        return gpu

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        for nic in self.nics:
            check_safe_name("cluster.nics", nic)
        for host in self.hosts:
            check_safe_name("cluster.hosts", host)
        if self.socket_ifname is not None:
            check_safe_name("cluster.socket_ifname", self.socket_ifname)
        if self.nvme_path is not None:
            check_safe_path("cluster.nvme_path", self.nvme_path)
        if self.hosts and len(self.hosts) != self.num_nodes:
            raise ValueError(f"cluster.hosts lists {len(self.hosts)} hosts but num_nodes is {self.num_nodes}")
        if len(set(self.hosts)) != len(self.hosts):
            raise ValueError("cluster.hosts has duplicates")
        return self

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def nvlink_domain(self) -> int:
        """GPUs that share the NVLink fabric: the node (or part of it), or a multi-node NVLink domain such as a
        GB200 NVL72 rack of 18 trays, capped at the cluster."""
        domain = self.gpu.nvlink_domain
        if domain <= 1:
            return 1
        if self.gpu.nvlink_spans_nodes:
            return min(domain, self.world_size)
        return min(self.gpus_per_node, domain)

    @property
    def intra_bw(self) -> float:
        """Bytes/s per GPU inside the NVLink domain."""
        return (self.intra_node_GBps or self.gpu.nvlink_GBps) * 1e9

    @property
    def inter_bw(self) -> float:
        """Bytes/s per GPU across nodes (or across NVLink domains)."""
        return (self.inter_node_GBps or self.gpu.network_GBps) * 1e9

    @property
    def h2d_bw(self) -> float:
        return (self.host_to_device_GBps or self.gpu.pcie_GBps) * 1e9


class ParallelPins(Frozen):
    """Dimensions the user fixes; the search only varies the rest."""

    tp: int | None = Field(None, ge=1, le=4096, description="Tensor-parallel size.")
    pp: int | None = Field(None, ge=1, le=1024, description="Pipeline-parallel size.")
    vpp: int | None = Field(None, ge=1, le=1024, description="Virtual pipeline stages per rank (interleaving).")
    dp: int | None = Field(None, ge=1, le=10_000_000, description="Data-parallel size.")
    cp: int | None = Field(None, ge=1, le=4_194_304, description="Context-parallel size.")
    ep: int | None = Field(None, ge=1, le=65_536, description="Expert-parallel size.")
    zero_stage: int | None = Field(None, ge=0, le=3, description="DeepSpeed ZeRO stage.")
    distributed_optimizer: bool | None = Field(None, description="Megatron's distributed optimizer.")
    micro_batch_size: int | None = Field(None, ge=1, le=10_000_000, description="Sequences per micro-batch.")
    recompute: Recompute | None = Field(None, description="Activation recomputation.")
    sequence_parallel: bool | None = Field(None, description="Megatron sequence parallelism (needs TP > 1).")
    offload_optimizer: OffloadDevice | None = Field(None, description="ZeRO optimizer offload.")
    offload_param: OffloadDevice | None = Field(None, description="ZeRO-3 parameter offload.")
    num_nodes: int | None = Field(None, ge=1, le=100_000, description="Use exactly this many nodes.")
    cp_comm_type: CPCommType | None = Field(None, description="Context-parallel communication (--cp-comm-type).")
    recompute_num_layers: int | None = Field(None, ge=1, le=1024, description="Layers per stage fully recomputed.")
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        None, description="Modules selective recomputation re-runs (--recompute-modules)."
    )
    cpu_offloading_num_layers: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Layers whose activations are offloaded to the host (--cpu-offloading-num-layers).",
    )
    fp8_param_gather: bool | None = Field(None, description="FP8 primary weights (--fp8-param-gather).")
    tp_comm_overlap: bool | None = Field(None, description="Overlap TP communication (--tp-comm-overlap).")
    moe_token_dispatcher: MoETokenDispatcher | None = Field(
        None, description="MoE token dispatcher: alltoall, or flex (DeepEP/HybridEP; needs the deep_ep package)."
    )
    megatron_fsdp: MegatronFSDP | None = Field(
        None, description="Megatron-FSDP sharding (--data-parallel-sharding-strategy)."
    )


class TrainingSpec(Frozen):
    global_batch_size: int = Field(description="Sequences per optimizer step.", ge=1, le=10_000_000)
    precision: Precision = Field("bf16", description="Mixed-precision mode: bf16, fp16 or fp8 (TE).")
    optimizer: Literal["adam"] = Field("adam", description="Optimizer (Adam/AdamW: two fp32 moments).")
    framework: Framework = Field("megatron", description="What will run the job.")
    stack: str | None = Field(
        None,
        description="Software stack whose costs to model (data/stacks.json); default: the framework's usual stack "
        "(megatron: Megatron-core with Transformer Engine; megatron-deepspeed; deepspeed: a Hugging Face model).",
    )
    grad_reduce_dtype: GradReduceDtype | None = Field(
        None,
        description="Gradient buffer and data-parallel reduction dtype: fp32 main grads (Megatron's default "
        "with bf16) or bf16 (--grad-reduce-in-bf16, as NVIDIA's tuned recipes run); default: the stack's.",
    )
    optimizer_states: OptimizerStates = Field(
        "fp32",
        description="Adam's moments (exp_avg, exp_avg_sq): fp32, or bf16 with Megatron's precision-aware optimizer "
        "(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; the fp32 master weights "
        "are then kept as the 16-bit remainders of the bf16 weights; needs the distributed optimizer).",
    )
    fp8_recipe: FP8Recipe | None = Field(
        None,
        description="FP8 scaling recipe (--fp8-recipe): delayed, tensorwise (current scaling), blockwise, "
        "mxfp8 (Blackwell); default: tensorwise on Hopper, mxfp8 on Blackwell.",
    )
    objective: Objective = Field(
        "throughput", description="Rank by tokens/s, by fewest GPUs that fit, or by most memory headroom."
    )
    pinned: ParallelPins = Field(default_factory=ParallelPins, description="Dimensions fixed by you.")
    memory_headroom: float = Field(
        0.0,
        ge=0.0,
        le=0.5,
        description="Extra fraction of GPU memory a plan must leave free, beyond the upper end of its predicted "
        "memory interval (which already carries the model's measured error).",
    )
    moe_load_imbalance: float = Field(
        1.1,
        ge=1.0,
        le=4.0,
        description="MoE: busiest expert rank's routed tokens over the mean (dropless "
        "routing); a model's capacity factor replaces it.",
    )
    flash_attention: bool = Field(True, description="Fused/flash attention (no s×s scores kept).")
    overlap_grad_reduce: bool = Field(True, description="Overlap data-parallel gradient reduction with backward.")
    overlap_p2p_comm: bool = Field(
        True, description="Overlap pipeline sends with compute (Megatron's default with interleaving)."
    )
    allow_tp_across_nodes: bool = Field(False, description="Let a TP group span nodes (slow; off by default).")
    train_tokens: float | None = Field(None, gt=0, le=1e17, description="Tokens to train on, for time-to-train.")
    max_plans: int = Field(10, ge=1, le=200, description="How many ranked plans to return.")
    search_time_limit_s: float = Field(20.0, gt=0, le=600, description="Cap on search time.")

    _software: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check_stack(self) -> TrainingSpec:
        from app.planner import stack

        software = stack.stack_of(self.stack, self.framework)
        self._software = software
        if software.framework != self.framework:
            raise ValueError(
                f"training.stack {software.name!r} runs framework {software.framework!r}, not {self.framework!r}"
            )
        if self.grad_reduce_dtype is not None and self.grad_reduce_dtype not in software.can.grad_reduce_dtypes:
            raise ValueError(
                f"training.grad_reduce_dtype {self.grad_reduce_dtype!r}: {software.label} reduces gradients in "
                f"{' or '.join(software.can.grad_reduce_dtypes)}"
            )
        if self.flash_attention and not software.can.flash_attention:
            if "flash_attention" in self.model_fields_set:
                raise ValueError(
                    f"training.flash_attention: {software.label} has no fused (flash) attention kernel; it keeps the "
                    "s x s attention scores (set flash_attention false or choose another stack)"
                )
            self.__dict__["flash_attention"] = False  # the stack's attention: softmax kernels, scores kept
        if self.optimizer_states == "bf16" and not software.can.precision_aware_optimizer:
            raise ValueError(
                f"training.optimizer_states 'bf16': {software.label} keeps Adam's moments in fp32 (bf16 moments need "
                "Megatron-core's precision-aware optimizer)"
            )
        if self.optimizer_states == "bf16" and self.precision == "fp16":
            raise ValueError("training.optimizer_states 'bf16' is planned with bf16 or fp8 training, not fp16")
        return self

    @property
    def software(self) -> Stack:
        """The software stack this training runs on (data/stacks.json), resolved once at validation."""
        software: Stack = self.__pydantic_private__["_software"]  # type: ignore[index]  # a dict: no __getattr__
        return software

    @property
    def reduce_dtype(self) -> str:
        return self.grad_reduce_dtype or self.software.can.default_grad_reduce_dtype


class ParallelConfig(Frozen):
    """One fully specified parallel layout (what `estimate` evaluates and `plan` returns)."""

    _layer_key: tuple[object, ...] | None = PrivateAttr(default=None)
    _state_key: tuple[object, ...] | None = PrivateAttr(default=None)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ParallelConfig:
        """A copy without the cached layer key (updated fields would make it stale); a new vpp brings the schedule
        it implies unless the update names one."""
        if update and "vpp" in update and "schedule" not in update:
            update = {**update, "schedule": "interleaved" if update["vpp"] > 1 else "1f1b"}
        copy = super().model_copy(update=update, deep=deep)
        copy.__pydantic_private__ = {"_layer_key": None, "_state_key": None}
        return copy

    @classmethod
    def trusted(cls, **fields: Any) -> ParallelConfig:
        """A config from values the search's own generators produced (valid by construction, schedule included),
        without pydantic's validation: the search builds tens of thousands per request."""
        return cls.from_values({**PARALLEL_DEFAULTS, **fields}, set(fields))

    @classmethod
    def from_values(cls, values: dict[str, Any], fields_set: set[str]) -> ParallelConfig:
        """`trusted` from every field's value (`values` becomes the config's own: the caller passes a new dict) and
        the names the caller set."""
        obj = cls.__new__(cls)
        object.__setattr__(obj, "__dict__", values)
        object.__setattr__(obj, "__pydantic_fields_set__", fields_set)
        object.__setattr__(obj, "__pydantic_extra__", None)
        object.__setattr__(obj, "__pydantic_private__", {"_layer_key": None, "_state_key": None})
        return obj

    def __eq__(self, other: object) -> bool:
        """Equal fields are equal layouts (the cached keys are not part of the value)."""
        if not isinstance(other, ParallelConfig):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.values()))

    tp: int = Field(1, ge=1, description="Tensor-parallel size.")
    pp: int = Field(1, ge=1, description="Pipeline-parallel size.")
    vpp: int = Field(1, ge=1, description="Virtual pipeline stages per rank (1 = no interleaving).")
    dp: int = Field(1, ge=1, description="Data-parallel size.")
    cp: int = Field(1, ge=1, description="Context-parallel size.")
    ep: int = Field(1, ge=1, description="Expert-parallel size (carved out of DP×CP, as in Megatron).")
    etp: int | None = Field(None, ge=1, description="Expert tensor-parallel size (default = tp).")
    zero_stage: int = Field(0, ge=0, le=3, description="DeepSpeed ZeRO stage (0 = off).")
    distributed_optimizer: bool = Field(False, description="Megatron's distributed optimizer (sharded Adam).")
    micro_batch_size: int = Field(1, ge=1, description="Sequences per micro-batch.")
    recompute: Recompute = Field("none", description="Activation recomputation: none, selective, full.")
    sequence_parallel: bool = Field(False, description="Megatron sequence parallelism.")
    offload_optimizer: OffloadDevice = Field("none", description="ZeRO optimizer-state offload.")
    offload_param: OffloadDevice = Field("none", description="ZeRO-3 parameter offload.")
    first_stage_layers: int | None = Field(
        None, ge=1, description="Layers on the first pipeline stage (--decoder-first-pipeline-num-layers)."
    )
    last_stage_layers: int | None = Field(
        None, ge=1, description="Layers on the last pipeline stage (--decoder-last-pipeline-num-layers)."
    )
    schedule: Schedule | None = Field(
        None, description="Pipeline schedule: 1f1b, or interleaved (vpp > 1); default follows vpp."
    )
    account_for_embedding_in_pipeline_split: bool = Field(
        False, description="Count the embedding as one layer of the first stage's share (Megatron)."
    )
    account_for_loss_in_pipeline_split: bool = Field(
        False, description="Count the output layer and loss as one layer of the last stage's share (Megatron)."
    )
    pipeline_layout: str | None = Field(
        None,
        max_length=4096,
        description="Megatron's --pipeline-model-parallel-layout, e.g. 'Et*2|(t*2|)*34,t*3|(t*2|)*3,tL'.",
    )
    partition_method: PartitionMethod | None = Field(
        None, description="DeepSpeed PipelineModule partition_method (Megatron-DeepSpeed with PP)."
    )
    recompute_method: RecomputeMethod | None = Field(
        None, description="Full recompute method (--recompute-method): uniform or block."
    )
    recompute_num_layers: int | None = Field(
        None, ge=1, description="Full recompute: layers per stage (block) or per group (uniform) recomputed."
    )
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        None, description="Selective recompute: modules re-run in backward (default core_attn)."
    )
    cpu_offloading_num_layers: int | None = Field(
        None,
        ge=1,
        description="Layers whose activations go to host memory after their forward and come back for their "
        "backward (--cpu-offloading-num-layers; Megatron-core, PP 1, no recomputation).",
    )
    cp_comm_type: CPCommType = Field("p2p", description="Context-parallel communication (--cp-comm-type).")
    hierarchical_cp_sizes: tuple[int, int] | None = Field(
        None,
        description="a2a+p2p: (a2a group inside the node, p2p ring across) (--hierarchical-context-parallel-sizes).",
    )
    grad_reduce_dtype: GradReduceDtype | None = Field(
        None, description="Main-grad buffer and DP reduction dtype the plan uses (default: the training's)."
    )
    fp8_recipe: FP8Recipe | None = Field(None, description="FP8 scaling recipe (--fp8-recipe), FP8 plans only.")
    fp8_param_gather: bool = Field(False, description="FP8 primary weights (--fp8-param-gather).")
    tp_comm_overlap: bool = Field(False, description="Overlap TP communication with GEMMs (--tp-comm-overlap).")
    moe_ep_overlap: bool = Field(
        False, description="Overlap EP all-to-all with compute (--overlap-moe-expert-parallel-comm)."
    )
    moe_token_dispatcher: MoETokenDispatcher = Field(
        "alltoall",
        description="MoE token dispatcher (--moe-token-dispatcher-type): alltoall (a copy per expert), or flex "
        "(DeepEP/HybridEP: one copy per GPU and per node reached; needs the deep_ep package).",
    )
    megatron_fsdp: MegatronFSDP | None = Field(
        None, description="Megatron-FSDP strategy (--use-megatron-fsdp --data-parallel-sharding-strategy)."
    )

    @model_validator(mode="after")
    def _fill_schedule(self) -> ParallelConfig:
        expected = "interleaved" if self.vpp > 1 else "1f1b"
        if self.schedule is None:
            object.__setattr__(self, "schedule", expected)  # frozen: set once, during validation
        elif self.schedule != expected:
            raise ValueError(f"schedule({self.schedule}) does not match vpp({self.vpp}): expected {expected}")
        if self.cp_comm_type == "a2a+p2p":
            sizes = self.hierarchical_cp_sizes
            if sizes is None or sizes[0] * sizes[1] != self.cp:
                raise ValueError(f"cp_comm_type a2a+p2p needs hierarchical_cp_sizes whose product is cp({self.cp})")
        elif self.hierarchical_cp_sizes is not None:
            raise ValueError("hierarchical_cp_sizes is set but cp_comm_type is not a2a+p2p")
        return self

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def layer_key(self) -> int:
        """Key of the per-layer caches (one layer, one micro-batch): every field but the placement's pure counts
        that a layer's cost cannot read (PP, VPP, DP and the stage split), as a small interned number (`_intern`).
        Derived from the spec itself, so a new field is part of the key unless it is listed here as not read by a
        layer."""
        private = self.__pydantic_private__  # a dict: private attributes without pydantic's __getattr__
        cached = private["_layer_key"]  # type: ignore[index]
        if cached is None:
            cached = private["_layer_key"] = _intern(_layer_values(self.__dict__))  # type: ignore[index]
        return cached  # type: ignore[no-any-return]

    @property
    def state_key(self) -> int:
        """Key of the per-stage model-state caches: what weights, gradients, optimizer states and buckets depend on
        (not the micro-batch size, the recomputation or the overlaps), interned like `layer_key`."""
        private = self.__pydantic_private__
        cached = private["_state_key"]  # type: ignore[index]
        if cached is None:
            cached = private["_state_key"] = _intern(_state_values(self.__dict__))  # type: ignore[index]
        return cached  # type: ignore[no-any-return]


# Cache keys made of many fields, each given a number once (the search looks its per-layer costs up tens of thousands
# of times per request; hashing a 30-field tuple each time was a tenth of its time). Numbers are never reused: when
# the table is cleared (it is bounded), an old number can only miss, never find another key's value.
_KEY_NUMBERS: dict[tuple[object, ...], int] = {}
_KEY_NUMBERS_MAX = 200_000
_next_number = itertools.count()


def _intern(key: tuple[object, ...]) -> int:
    number = _KEY_NUMBERS.get(key)
    if number is None:
        if len(_KEY_NUMBERS) >= _KEY_NUMBERS_MAX:
            _KEY_NUMBERS.clear()
        number = _KEY_NUMBERS[key] = next(_next_number)
    return number


PARALLEL_DEFAULTS = {name: f.get_default(call_default_factory=True) for name, f in ParallelConfig.model_fields.items()}
# Fields a single layer's memory and time cannot depend on (pipeline position and data-parallel replication).
_NOT_LAYER_FIELDS = frozenset(
    {
        "pp",
        "vpp",
        "dp",
        "schedule",
        "first_stage_layers",
        "last_stage_layers",
        "pipeline_layout",
        "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split",
        "partition_method",
    }
)
_LAYER_KEY_FIELDS = tuple(name for name in ParallelConfig.model_fields if name not in _NOT_LAYER_FIELDS)
_layer_values = operator.itemgetter(*_LAYER_KEY_FIELDS)  # the values of a config's __dict__, as one tuple
# Fields the model states of a stage cannot depend on (activations and overlaps only).
_NOT_STATE_FIELDS = frozenset(
    {
        "micro_batch_size",
        "recompute",
        "recompute_modules",
        "recompute_method",
        "recompute_num_layers",
        "sequence_parallel",
        "tp_comm_overlap",
        "moe_ep_overlap",
        "moe_token_dispatcher",
        "cp_comm_type",
        "hierarchical_cp_sizes",
    }
)
_STATE_KEY_FIELDS = tuple(name for name in ParallelConfig.model_fields if name not in _NOT_STATE_FIELDS)
_state_values = operator.itemgetter(*_STATE_KEY_FIELDS)


class PlanRequest(Frozen):
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec

    @field_validator("model", mode="before")
    @classmethod
    def _resolve_model(cls, model: object) -> object:
        """`model` may be a preset name, {"preset": name, ...overrides}, {"hf_config": {...config.json...},
        ...overrides} or the ModelSpec fields."""
        if isinstance(model, str):
            return catalog.model_fields(model)
        if isinstance(model, dict) and "preset" in model:
            overrides = {k: v for k, v in model.items() if k != "preset"}
            return {**catalog.model_fields(str(model["preset"])), **overrides}
        if isinstance(model, dict) and "hf_config" in model:
            overrides = {k: v for k, v in model.items() if k != "hf_config"}
            return {**from_hf_config(model["hf_config"]), **overrides}
        return model


class EstimateRequest(PlanRequest):
    parallel: ParallelConfig
