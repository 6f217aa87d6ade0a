"""Where things land: layers per pipeline stage, micro-batches in flight, which groups cross nodes.

Rank order is Megatron's default `tp-cp-ep-dp-pp` (megatron/core/parallel_state.py): TP ranks are adjacent,
then CP, then DP (EP is carved out of CP x DP), and pipeline stages are outermost.
"""

from __future__ import annotations

import math

from app.planner.results import Layout
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


def stage_layers(num_layers: int, par: ParallelConfig) -> list[int]:
    """Transformer layers on each pipeline stage; first/last may be set (Megatron's uneven PP)."""
    p = par.pp
    if p == 1:
        return [num_layers]
    first, last = par.first_stage_layers, par.last_stage_layers
    if first is None and last is None:
        base, extra = divmod(num_layers, p)
        return [base + (1 if i < extra else 0) for i in range(p)]
    fixed = [x for x in (first, last) if x is not None]
    middle_stages = p - len(fixed)
    rest = num_layers - sum(fixed)
    per_middle = rest // middle_stages if middle_stages else 0
    layers = [per_middle] * p
    if first is not None:
        layers[0] = first
    if last is not None:
        layers[-1] = last
    return layers


def stage_layer_kinds(model: ModelSpec, par: ParallelConfig) -> tuple[tuple[int, int], ...]:
    """(dense layers, MoE layers) on each stage; the first `moe_first_dense_layers` layers are dense."""
    key = ("stage_layer_kinds", par.pp, par.first_stage_layers, par.last_stage_layers)
    return model.memo(key, lambda: _stage_layer_kinds(model, par))


def _stage_layer_kinds(model: ModelSpec, par: ParallelConfig) -> tuple[tuple[int, int], ...]:
    out, start = [], 0
    dense_total = model.num_layers - model.num_moe_layers
    for n in stage_layers(model.num_layers, par):
        dense = max(0, min(start + n, dense_total) - start)
        out.append((dense, n - dense))
        start += n
    return tuple(out)


def stage_groups(kinds: tuple[tuple[int, int], ...], pp: int) -> list[tuple[int, int, int, int]]:
    """Runs of identical middle stages as (first stage, count, dense, moe); the first stage (embedding) and
    the last (output layer) always stand alone."""
    groups: list[tuple[int, int, int, int]] = []
    for i, (dense, moe) in enumerate(kinds):
        prev = groups[-1] if groups else None
        mergeable = prev is not None and prev[0] != 0 and i != pp - 1 and prev[2:] == (dense, moe)
        if prev is not None and mergeable:
            groups[-1] = (prev[0], prev[1] + 1, dense, moe)
        else:
            groups.append((i, 1, dense, moe))
    return groups


def num_microbatches(training: TrainingSpec, par: ParallelConfig) -> int:
    return training.global_batch_size // (par.micro_batch_size * par.dp)


def microbatches_in_flight(par: ParallelConfig, stage: int, microbatches: int) -> float:
    """Micro-batches of activations a stage holds at its peak, in units of the stage's full layer set.

    1F1B: `min(p - r, m)` (Narayanan et al. 2021, sec. 2.2.1). Interleaved: Megatron's warm-up of
    `(p - r - 1)*2 + (v - 1)*p` model chunks plus the one in flight, each chunk holding 1/v of the stage's layers
    (schedules.py get_pp_rank_microbatches); for rank 0 this is Megatron's `1 + (p-1)/(p*v)` factor times p.
    """
    p, v, m = par.pp, par.vpp, microbatches
    if p == 1:
        return 1.0
    if v == 1:
        return float(min(p - stage, m))
    chunks = min((p - stage - 1) * 2 + (v - 1) * p + 1, m * v)
    return chunks / v


def crosses_nodes(group_size: int, stride: int, gpus_per_node: int) -> bool:
    """Whether a group of `group_size` ranks spaced `stride` apart spans more than one node."""
    return group_size > 1 and group_size * stride > gpus_per_node


def tp_crosses_nodes(par: ParallelConfig, cluster: ClusterSpec) -> bool:
    return crosses_nodes(par.tp, 1, min(cluster.gpus_per_node, cluster.nvlink_domain))


def cp_crosses_nodes(par: ParallelConfig, cluster: ClusterSpec) -> bool:
    return crosses_nodes(par.cp, par.tp, cluster.gpus_per_node)


def dp_crosses_nodes(par: ParallelConfig, cluster: ClusterSpec) -> bool:
    return crosses_nodes(par.dp, par.tp * par.cp, cluster.gpus_per_node)


def ep_crosses_nodes(par: ParallelConfig, cluster: ClusterSpec) -> bool:
    """EP groups take consecutive expert-TP blocks inside the TP x CP x DP plane."""
    return crosses_nodes(par.ep, par.expert_tp, cluster.gpus_per_node)


def pp_crosses_nodes(par: ParallelConfig, cluster: ClusterSpec) -> bool:
    return crosses_nodes(par.pp, par.tp * par.cp * par.dp, cluster.gpus_per_node)


def nodes_used(par: ParallelConfig, cluster: ClusterSpec) -> int:
    return math.ceil(par.world_size / cluster.gpus_per_node)


def make_layout(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig) -> Layout:
    """The numbers every artifact reads (derived once: habit 6 of docs/conventions.md)."""
    return Layout(
        world_size=par.world_size,
        num_nodes=nodes_used(par, cluster),
        gpus_per_node=min(cluster.gpus_per_node, par.world_size),
        num_microbatches=num_microbatches(training, par),
        global_batch_size=training.global_batch_size,
        stage_layers=stage_layers(model.num_layers, par),
    )
