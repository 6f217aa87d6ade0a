"""A software stack as an object: what it can run (capabilities) and what it costs (a profile per GPU generation).

Stacks live in data/stacks.json, each constant with its evidence; `framework` strings in requests only pick the
default stack of a framework (`TrainingSpec.stack` names another). Consumers ask the stack (`stack.can.cp`,
`stack.costs.attention_kernel`, `stack.generation(gpu)`) instead of comparing framework names.

Adding a stack is a data change (a new entry, or one that `extends` another and names what differs) plus, at most,
one new cost function (a new activation layout or element-wise implementation in activations.py / compute.py,
selected by name from the data).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.planner import catalog

if TYPE_CHECKING:
    from app.planner.specs import ModelSpec

Sharding = Literal["distributed_optimizer", "megatron_fsdp", "zero", "fsdp"]
PipelineEngine = Literal["megatron", "deepspeed", "torch"]
ActivationLayout = Literal["megatron", "hf-eager", "mpt", "torchtitan", "maxtext"]
Elementwise = Literal["fused", "torch-compiled", "hf-eager", "mpt"]
Logits = Literal["vocab-parallel", "fused-ce", "hf-fp32", "torch-fp32"]
Rails = Literal["all", "one"]


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Capabilities(_Data):
    """What the stack runs (and the renderer writes); the search generates only these."""

    tensor_parallel: bool
    sequence_parallel: bool
    pipeline: PipelineEngine | None = Field(description="Which engine runs pipeline stages (none: no PP).")
    interleaving: bool
    uneven_stages: bool = Field(description="First/last-stage layer counts, layout strings, account-for flags.")
    partition_methods: tuple[str, ...] = Field((), description="DeepSpeed PipelineModule partition methods.")
    context_parallel: tuple[str, ...] = Field((), description="cp_comm_type values (empty: no CP).")
    expert_parallel: bool
    sharding: tuple[Sharding, ...]
    zero_stages: tuple[int, ...] = ()
    offload: bool
    fp8: bool
    moe: bool
    mla: bool
    alibi: bool
    mtp: bool = Field(False, description="Multi-token prediction layers (--mtp-num-layers).")
    flash_attention: bool = Field(
        True, description="A fused (flash) attention kernel: no s x s scores kept (False: softmax kernels only)."
    )
    recompute_modules: tuple[str, ...] = Field((), description="--recompute-modules it supports (selective).")
    partial_recompute: bool = Field(description="--recompute-num-layers with uniform/block methods.")
    tp_comm_overlap: bool
    ep_overlap: bool
    flex_dispatcher: bool = Field(
        False,
        description="megatron-core's flex MoE dispatcher over DeepEP/HybridEP (--moe-token-dispatcher-type flex).",
    )
    grad_reduce_dtypes: tuple[str, ...]
    default_grad_reduce_dtype: str
    fp8_param_gather: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    activation_offload: bool = Field(
        False, description="Layers' activations offloaded to the host (--cpu-offloading-num-layers, TE's offload)."
    )
    sliding_window: bool = Field(
        False, description="Builds sliding-window attention layers (megatron-core --window-size; Hugging Face models)."
    )
    precision_aware_optimizer: bool = Field(
        False, description="Adam moments in bf16 (--use-precision-aware-optimizer, Transformer Engine's FusedAdam)."
    )


class GenerationCosts(_Data):
    """Constants of this stack on one GPU generation (physical rates; see `evidence`)."""

    gemm_fraction: float = Field(
        gt=0, le=1, description="Share of the GPU's isolated large-GEMM rate this stack's GEMMs keep in training."
    )
    gemm_fp8_fraction: float = Field(gt=0, le=1, description="The same for FP8 GEMMs (casts and scaling included).")
    kernel_overhead_s: float = Field(ge=0, description="Fixed device cost per kernel (launch gap, tail), seconds.")
    overlap_contention: float = Field(
        ge=0, le=1, description="Share of overlapped communication time that still slows compute (SMs, HBM)."
    )
    allocator_fragmentation: float = Field(
        ge=0, le=1, description="Reserved over allocated memory of the caching allocator (fraction of allocated)."
    )
    allocator_slack_bytes: float = Field(ge=0, description="Reserved memory beyond that, at any size.")
    host_op_s: float = Field(
        ge=0, description="CPU time to dispatch one operator (eager PyTorch + framework): the host launch floor."
    )
    host_step_s: float = Field(
        ge=0, description="Host time per optimizer step that the device waits for (Python loops, syncs)."
    )
    evidence: str


class Costs(_Data):
    activation_layout: ActivationLayout = Field(description="Which tensors the model implementation keeps.")
    elementwise: Elementwise = Field(description="Which element-wise kernels the model implementation runs.")
    attention_kernel: str = Field(description="Key into attention_kernels.")
    logits: Logits
    pipeline_microbatch_overhead_s: float = Field(0.0, ge=0, description="Engine time per micro-batch slot (PP).")
    zero3_module_hook_s: float = Field(0.0, ge=0, description="Host time of ZeRO-3's fetch/release per module call.")
    fsdp_unit: Literal["module", "layer"] = Field("layer", description="Granularity of sharded-parameter gathers.")
    optimizer: Literal["fused-adam", "torch-adamw", "per-tensor-adamw"] = Field(
        description="The Adam implementation: fused multi-tensor (Megatron, TE), torch's foreach AdamW (a temporary as "
        "large as the shard), or a per-tensor loop (Composer's DecoupledAdamW: one tensor's temporary at a time)."
    )
    hf_experts: Literal["grouped_mm", "eager"] | None = Field(
        None,
        description="How the stack's Hugging Face sparse MoE blocks run their experts (transformers' "
        "experts_implementation): grouped_mm, transformers 5's default (two grouped GEMMs over token-expert pairs "
        "sorted by expert, no host sync), or eager, transformers 4's loop over the experts hit (a host sync per "
        "expert); None for a stack that does not run Hugging Face models.",
    )
    repeat_kv: bool = Field(
        False,
        description="The model copies K and V to every query head before its attention call (grouped-query "
        "attention by repeat_kv, as torchtitan's Llama does; its backward sums the copies' gradients back).",
    )
    context_parallel: Literal["te", "torch-ring"] = Field(
        "te",
        description="How context parallelism runs attention: Transformer Engine's (p2p ring overlapped with the "
        "attention blocks; all_gather / a2a as Megatron's cp_comm_type), or PyTorch's experimental context_parallel "
        "(torch.distributed.tensor.experimental._attention: an SDPA call per K/V block, K and V gathered after "
        "repeat_kv, fp32 dK/dV passed round a ring in the backward; torchtitan).",
    )
    network_rails: Rails = Field(
        "all",
        description="NIC rails a group's collectives use across nodes: all the rails its ranks on a node sit on "
        "(NCCL rings per channel), or one per rank (what the 2021 DeepSpeed ZeRO-3 runs measure).",
    )


class Unmodelled(_Data):
    """An effect the stack's cost model leaves out that published runs show, sized by them: the step-time interval
    of a model it applies to reaches as far as those runs did (uncertainty.spread), and says why."""

    name: str = Field(description="What is not modelled, in a few words.")
    moe_hidden_below: int = Field(
        ge=1, description="Applies to MoE models whose hidden size is below this (narrow expert layers)."
    )
    step_q10: float = Field(
        gt=-1, le=0, description="predicted / measured step - 1 of the worst published run it applies to."
    )
    evidence: str

    def applies(self, model: ModelSpec) -> bool:
        return model.is_moe and model.hidden_size < self.moe_hidden_below


class Stack(_Data):
    name: str
    framework: str
    label: str
    source: str
    capabilities: Capabilities
    costs: Costs
    generations: dict[str, GenerationCosts]
    unmodelled: tuple[Unmodelled, ...] = Field((), description="Effects left out, with the runs that size them.")
    residuals_of: str | None = Field(
        None,
        description="The stack whose measured residuals this one's intervals use: the same code path for every "
        "model those runs cover (their `covers` still widens what they do not).",
    )

    @property
    def can(self) -> Capabilities:
        return self.capabilities

    def generation(self, generation: str) -> GenerationCosts:
        """Costs on a GPU generation; a generation the stack has no entry for uses its `default` entry."""
        return self.generations.get(generation) or self.generations["default"]

    def measured_on(self, generation: str) -> bool:
        return generation in self.generations


class AttentionRate(_Data):
    """Fused attention throughput as a fraction of the dense 16-bit peak: `peak x s/(s + seq_half) x
    d/(d + head_dim_half)`, normalised to 1 at head dim 128, for query/key tiles of length s and head dim d."""

    forward: float = Field(gt=0, le=1)
    backward: float = Field(gt=0, le=1, description="Backward runs 2.5x the forward FLOPs at this rate.")
    seq_half: float = Field(ge=0, description="Sequence length at which the kernel reaches half its rate.")
    head_dim_half: float = Field(ge=0)


class AttentionKernel(_Data):
    label: str
    source: str
    flash: bool = Field(description="Keeps no s x s scores (FlashAttention-style).")
    window: bool = Field(
        description="Takes a sliding window and skips the key blocks outside it (False: the window is a mask over "
        "every score)."
    )
    window_block: int = Field(
        128, ge=1, description="Query rows per block: a block of a sliding-window layer runs over window + block keys."
    )
    window_source: str = Field(description="Evidence for `window` and `window_block`.")
    generations: dict[str, AttentionRate]

    def rate(self, generation: str) -> AttentionRate:
        return self.generations.get(generation) or self.generations["default"]


@cache
def _stacks() -> dict[str, Stack]:
    rows = catalog.load_data("stacks.json")["stacks"]
    return {name: Stack(name=name, **_resolved(rows, name)) for name in rows}


def _resolved(rows: dict[str, Any], name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A stack's row with what it `extends` filled in: the other stack's row, this one's entries merged over it
    (objects key by key, anything else replaced)."""
    row = rows[name]
    base = row.get("extends")
    if base is None:
        return dict(row)
    if base not in rows or base in seen:
        raise ValueError(f"stacks.json: stack {name!r} extends {base!r}, which is unknown or extends it back")
    return _merged(_resolved(rows, base, (*seen, name)), {k: v for k, v in row.items() if k != "extends"})


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@cache
def _kernels() -> dict[str, AttentionKernel]:
    data = catalog.load_data("stacks.json")
    return {name: AttentionKernel(**row) for name, row in data["attention_kernels"].items()}


@cache
def _defaults() -> dict[str, str]:
    defaults: dict[str, str] = catalog.load_data("stacks.json")["framework_defaults"]
    return defaults


def stacks() -> list[Stack]:
    return list(_stacks().values())


def get(name: str) -> Stack:
    table = _stacks()
    if name not in table:
        raise ValueError(f"unknown stack {name!r}; known: {', '.join(sorted(table))}")
    return table[name]


def default_for(framework: str) -> str:
    return _defaults()[framework]


def stack_of(stack: str | None, framework: str) -> Stack:
    """The stack a training spec runs on: the named one, or the framework's default."""
    return get(stack or default_for(framework))


def attention_kernel(name: str) -> AttentionKernel:
    return _kernels()[name]
