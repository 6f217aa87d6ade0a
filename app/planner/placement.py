"""Placements: the flat generators of the search's outer loop (TP, CP and its communication type, PP, VPP, the layer
split, EP, expert TP over the world), and the candidate configurations a placement makes with a micro-batch size, a
recomputation level and a sharding (`make_config`, built without pydantic's validation: the generators make only
valid values).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial

from app.planner import pipeline, space, splits
from app.planner.specs import PARALLEL_DEFAULTS, ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


@dataclass
class Placement:
    """How the world is split (TP, CP, PP, DP, EP, VPP, expert TP, the layer split, the CP communication type), with
    the configurations made for it kept for the bounds, rule checks and memory evaluation that ask for them again."""

    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    vpp: int
    etp: int | None = None
    split: splits.Split = field(default_factory=splits.Split)
    cp_comm: tuple[str, tuple[int, int] | None] = ("p2p", None)
    _fields: dict[str, dict[str, object]] = field(default_factory=dict, repr=False, compare=False)
    # configs made for this placement, by (micro-batch, recomputation, id of the sharding dict): the bounds, the
    # rule checks and the memory evaluation ask for the same ones (the sharding dicts live in the model's memo)
    _configs: dict[tuple[object, ...], ParallelConfig] = field(default_factory=dict, repr=False, compare=False)
    # every field's value but the micro-batch and recomputation ones, and the names set, per (recompute, sharding)
    _bases: dict[tuple[str, int], tuple[dict[str, object], frozenset[str]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def fields(
        self, model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, recompute: str
    ) -> dict[str, object]:
        """The ParallelConfig fields the placement fixes, with its overlaps (which depend on full recompute)."""
        cached = self._fields.get(recompute)
        if cached is not None:
            return cached
        sp = (
            self.tp > 1
            and training.software.can.sequence_parallel
            and space.sequence_parallel_fits(model, self.tp, self.cp)
        )
        if training.pinned.sequence_parallel is not None:
            sp = training.pinned.sequence_parallel
        overlap = space.overlap_options(
            model, training, cluster, self.tp, self.ep, self.pp, self.vpp, recompute, self.etp
        )
        if not sp:
            overlap["tp_comm_overlap"] = False
        out: dict[str, object] = dict(
            tp=self.tp,
            pp=self.pp,
            vpp=self.vpp,
            dp=self.dp,
            cp=self.cp,
            ep=self.ep,
            etp=self.etp,
            sequence_parallel=sp,
            first_stage_layers=self.split.first,
            last_stage_layers=self.split.last,
            account_for_embedding_in_pipeline_split=self.split.account,
            account_for_loss_in_pipeline_split=self.split.account,
            pipeline_layout=self.split.layout,
            partition_method=self.split.partition,
            cp_comm_type=self.cp_comm[0],
            hierarchical_cp_sizes=self.cp_comm[1],
            schedule="interleaved" if self.vpp > 1 else "1f1b",
            **overlap,
        )
        self._fields[recompute] = out
        return out


def placements(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, world: int) -> Iterator[Placement]:
    for tp in space.tp_options(model, cluster, training):
        if world % tp:
            continue
        for cp in space.cp_options(model, training, world // tp):
            if (world // tp) % cp:
                continue  # a pinned CP that this world does not hold (min_gpus and the hint try smaller worlds)
            for pp in space.pp_options(model, training, world // (tp * cp)):
                if (world // (tp * cp)) % pp:
                    continue
                dp = world // (tp * cp * pp)
                if training.pinned.dp and dp != training.pinned.dp:
                    continue
                yield from _inner(model, cluster, training, tp, cp, pp, dp)


def _inner(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, tp: int, cp: int, pp: int, dp: int
) -> Iterator[Placement]:
    microbatches = max(1, training.global_batch_size // dp)  # at micro-batch 1: the most the bubble can shrink
    for ep, vpp, etp, cp_comm in itertools.product(
        space.ep_options(model, training, tp * cp * dp),
        space.vpp_options(model, training, pp, microbatches),
        space.etp_options(model, training, tp),
        space.cp_comm_options(model, cluster, training, tp, cp),
    ):
        layer_splits = model.memo(
            ("splits", pp, vpp), partial(splits.split_options, model, training, pp, vpp), training
        )
        for split in layer_splits:
            yield Placement(tp, cp, pp, dp, ep, vpp, etp, split, cp_comm)


def make_config(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    pl: Placement,
    mbs: int,
    rc: space.Recompute,
    sharding: dict[str, object],
) -> ParallelConfig:
    key = (mbs, rc.recompute, rc.modules, rc.method, rc.layers, rc.offload, id(sharding))  # flat: no Python __hash__
    made = pl._configs.get(key)
    if made is not None:
        return made
    base_key = (rc.recompute, id(sharding))
    base = pl._bases.get(base_key)
    if base is None:
        dist = bool(sharding.get("distributed_optimizer", False))
        fixed = pl.fields(model, cluster, training, rc.recompute)
        values = {**PARALLEL_DEFAULTS, **fixed, "fp8_param_gather": space.fp8_param_gather(training, dist), **sharding}
        base = pl._bases[base_key] = (values, frozenset(fixed) | frozenset(sharding) | _PER_CANDIDATE)
    values, names = base
    if values["moe_ep_overlap"] and training.pinned.moe_ep_overlap is None:
        # off where it pairs nothing (it cannot help) and beside activation offload (rules activation_offload)
        microbatches = max(1, training.global_batch_size // (pl.dp * mbs))
        if rc.offload or pipeline.pairs_none(pl.pp, pl.vpp, microbatches):
            values = {**values, "moe_ep_overlap": False}
    # the generators produce only valid values: skip pydantic's validation (a third of the search's time)
    made = pl._configs[key] = ParallelConfig.from_values(
        {
            **values,
            "micro_batch_size": mbs,
            "recompute": rc.recompute,
            "recompute_modules": rc.modules,
            "recompute_method": rc.method,
            "recompute_num_layers": rc.layers,
            "cpu_offloading_num_layers": rc.offload,
        },
        set(names),
    )
    return made


_PER_CANDIDATE = frozenset(
    {
        "micro_batch_size",
        "recompute",
        "recompute_modules",
        "recompute_method",
        "recompute_num_layers",
        "cpu_offloading_num_layers",
        "fp8_param_gather",
    }
)
