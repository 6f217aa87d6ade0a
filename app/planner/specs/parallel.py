"""One fully specified parallel layout, and the interned keys the cost model's caches read off it."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping
from typing import Any

from pydantic import Field, PrivateAttr, model_validator

from app.planner.specs.common import (
    CPCommType,
    FP8Recipe,
    Frozen,
    GradReduceDtype,
    MegatronFSDP,
    MoETokenDispatcher,
    OffloadDevice,
    PartitionMethod,
    Recompute,
    RecomputeMethod,
    RecomputeModule,
    Schedule,
)


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
# Fields a single layer's memory and time cannot depend on (pipeline position, data-parallel replication, and how
# many of the layers are recomputed or offloaded).
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
        # how many layers are fully recomputed or offloaded, read per stage (memory._stage_activations,
        # traffic.recomputed_fraction), never by one layer's cost
        "recompute_method",
        "recompute_num_layers",
        "cpu_offloading_num_layers",
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
