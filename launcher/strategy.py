"""plan.json's optional `strategy` section: how the plan arranges what `parallel` sizes (stdlib only).

The pipeline split (schedule, uneven stages, layout string), recomputation, sharding and offload, context-parallel
communication and precision, as megatron_args.txt / ds_config.json set them; `launcher show` and `bench` read them,
and the renderer's tests check that they agree with the files. Every field is optional with today's default, so a
plan.json without the section (or from an older renderer) still loads (schema_version 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.fields import PlanError, need_bool, need_int, need_opt, need_str, need_str_tuple

# What each field may be (module constants, not ClassVars: `run` starts without importing typing, and without it
# dataclasses would take a ClassVar annotation for a field; docs/launcher.md "Overhead")
SCHEDULES = ("1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full")
OFFLOAD = ("none", "cpu", "nvme")
CP_COMM = ("p2p", "all_gather", "a2a", "a2a+p2p")
PRECISION = ("bf16", "fp16", "fp8")
DISPATCHERS = ("alltoall", "flex")


@dataclass(frozen=True)
class Strategy:
    """How the plan arranges what `parallel` sizes (optional; what megatron_args.txt / ds_config.json set): the
    pipeline split, recomputation, sharding, context-parallel communication and precision."""

    schedule: str = "1f1b"
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    pipeline_layout: str | None = None
    # the embedding and the loss as pipeline units (Megatron's --account-for-embedding/loss-in-pipeline-split): a
    # virtual stage may then hold one of them and no transformer layer (NVIDIA's 126-layer 405B on PP16 x VPP8)
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    megatron_fsdp: str | None = None
    offload_optimizer: str = "none"
    offload_param: str = "none"
    recompute: str = "none"
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] = ()
    cpu_offloading_num_layers: int | None = None
    cp_comm_type: str = "p2p"
    hierarchical_cp_sizes: tuple[int, ...] = ()
    precision: str = "bf16"
    grad_reduce_dtype: str = "fp32"
    fp8_recipe: str | None = None
    fp8_param_gather: bool = False
    optimizer_states: str = "fp32"
    tp_comm_overlap: bool = False
    moe_ep_overlap: bool = False
    moe_token_dispatcher: str = "alltoall"

    def __post_init__(self) -> None:
        for name, choices in (
            ("schedule", SCHEDULES),
            ("recompute", RECOMPUTE),
            ("cp_comm_type", CP_COMM),
            ("offload_optimizer", OFFLOAD),
            ("offload_param", OFFLOAD),
            ("precision", PRECISION),
            ("grad_reduce_dtype", ("fp32", "bf16", "fp16")),
            ("optimizer_states", ("fp32", "bf16")),
            ("moe_token_dispatcher", DISPATCHERS),
        ):
            need_str(f"strategy.{name}", getattr(self, name), choices)
        for name in ("first_stage_layers", "last_stage_layers", "recompute_num_layers", "cpu_offloading_num_layers"):
            need_opt(f"strategy.{name}", getattr(self, name), need_int, 1)
        for name in ("pipeline_layout", "megatron_fsdp", "recompute_method", "fp8_recipe"):
            need_opt(f"strategy.{name}", getattr(self, name), need_str)
        for name in (
            "account_for_embedding_in_pipeline_split",
            "account_for_loss_in_pipeline_split",
            "sequence_parallel",
            "distributed_optimizer",
            "fp8_param_gather",
            "tp_comm_overlap",
            "moe_ep_overlap",
        ):
            need_bool(f"strategy.{name}", getattr(self, name))
        object.__setattr__(
            self, "recompute_modules", need_str_tuple("strategy.recompute_modules", self.recompute_modules)
        )
        sizes = self.hierarchical_cp_sizes
        if isinstance(sizes, str) or not isinstance(sizes, list | tuple):
            raise PlanError(f"strategy.hierarchical_cp_sizes: expected a list of integers, got {sizes!r}")
        object.__setattr__(
            self,
            "hierarchical_cp_sizes",
            tuple(need_int(f"strategy.hierarchical_cp_sizes[{i}]", v, 1) for i, v in enumerate(sizes)),
        )
