"""What to train and how: batch, precision, framework and stack, objective, and the dimensions the user pins."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from app.planner.specs.common import (
    HEADROOM_WITHIN,
    CPCommType,
    FP8Recipe,
    Framework,
    Frozen,
    GradReduceDtype,
    MegatronFSDP,
    MoETokenDispatcher,
    Objective,
    OffloadDevice,
    OptimizerStates,
    Precision,
    Recompute,
    RecomputeModule,
)

if TYPE_CHECKING:
    from app.planner.stack import Stack


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
    moe_ep_overlap: bool | None = Field(
        None,
        description="Overlap the EP all-to-all with another micro-batch's compute (--overlap-moe-expert-parallel-comm, "
        "combined 1F1B): on wherever Megatron can run it, or off; default: where it can run and pairs passes.",
    )
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
        "throughput",
        description="Rank by tokens/s, by fewest GPUs that fit, or by most memory headroom among the plans within "
        f"{100 * HEADROOM_WITHIN:.0f} % of the fastest.",
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
        "routing); a model's capacity factor caps it (tokens past an expert's capacity are dropped).",
    )
    flash_attention: bool = Field(True, description="Fused/flash attention (no s×s scores kept).")
    overlap_grad_reduce: bool = Field(True, description="Overlap data-parallel gradient reduction with backward.")
    overlap_p2p_comm: bool = Field(
        True, description="Overlap pipeline sends with compute (Megatron's default with interleaving)."
    )
    allow_tp_across_nodes: bool = Field(False, description="Let a TP group span nodes (slow; off by default).")
    train_tokens: float | None = Field(
        None,
        gt=0,
        le=1e17,
        description="Tokens to train on, for time-to-train: at least one step's (global_batch_size x seq_length).",
    )
    max_plans: int = Field(10, ge=1, le=200, description="How many ranked plans to return.")
    search_time_limit_s: float = Field(
        20.0,
        gt=0,
        le=600,
        description="Cap on the search's CPU time (the same plans on a busy machine), and on 1.5x as many wall-clock "
        "seconds.",
    )

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
        if self.grad_reduce_dtype is not None and self.precision == "fp16":
            # Megatron's --fp16 keeps and reduces the gradients in fp16 (arguments.py changes
            # accumulate_allreduce_grads_in_fp32 only under --bf16), DeepSpeed's fp16 optimizer alike: plan.json
            # labelled them bf16 or fp32 while the rendered job ran fp16 (QA 2026-12-07)
            raise ValueError(
                f"training.grad_reduce_dtype {self.grad_reduce_dtype!r} with precision 'fp16': fp16 training keeps "
                "and reduces its gradients in fp16; leave grad_reduce_dtype unset"
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
