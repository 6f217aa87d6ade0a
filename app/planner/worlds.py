"""The GPU counts a search tries: the whole cluster, a pinned node count, or (min_gpus) every size upwards, and the
smaller node counts that factor better (`fewer_nodes`); pinned sizes no count holds are input errors."""

from __future__ import annotations

import math

from app.planner.errors import InputError
from app.planner.specs import ClusterSpec, TrainingSpec


def _check_pins(cluster: ClusterSpec, training: TrainingSpec) -> None:
    """Pinned sizes that no part of the cluster holds are an input error, not an empty search."""
    p = training.pinned
    sizes = {"tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "ep": p.ep}
    for name, value in sizes.items():
        if value is not None and value > cluster.world_size:
            raise InputError(f"training.pinned.{name}", f"{value} > the cluster's {cluster.world_size} GPUs")
    product = (p.tp or 1) * (p.pp or 1) * (p.dp or 1) * (p.cp or 1)
    if product > cluster.world_size:
        raise InputError("training.pinned", f"tp x pp x dp x cp = {product} > the cluster's {cluster.world_size} GPUs")


def world_sizes(cluster: ClusterSpec, training: TrainingSpec) -> list[int]:
    """GPU counts to search: the whole cluster, the pinned node count, or (min_gpus) every size upwards."""
    _check_pins(cluster, training)
    g = cluster.gpus_per_node
    if training.pinned.num_nodes:
        if training.pinned.num_nodes > cluster.num_nodes:
            raise InputError(
                "training.pinned.num_nodes", f"{training.pinned.num_nodes} > cluster.num_nodes({cluster.num_nodes})"
            )
        worlds = [training.pinned.num_nodes * g]
    elif training.objective != "min_gpus":
        can = training.software.can
        split = can.tensor_parallel or can.pipeline is not None or bool(can.context_parallel)
        fewer = fewer_nodes(cluster.num_nodes, g, training.global_batch_size, model_parallel=split)
        worlds = [cluster.world_size] + [n * g for n in fewer]
    else:
        worlds = [d for d in range(1, g) if g % d == 0] + [n * g for n in range(1, cluster.num_nodes + 1)]
    _check_pins_divide(worlds, training)
    return worlds


def _check_pins_divide(worlds: list[int], training: TrainingSpec) -> None:
    """Pinned sizes whose product divides none of the GPU counts the search would try are an input error, not a
    search of nothing (tp 3 on nodes of 8 GPUs)."""
    p = training.pinned
    pins = [(name, value) for name, value in (("tp", p.tp), ("pp", p.pp), ("cp", p.cp), ("dp", p.dp)) if value]
    product = math.prod(value for _, value in pins)
    if product <= 1 or any(w % product == 0 for w in worlds):
        return
    field = f"training.pinned.{pins[0][0]}" if len(pins) == 1 else "training.pinned"
    named = f"{product}" if len(pins) == 1 else " x ".join(f"{name}({value})" for name, value in pins) + f" = {product}"
    counts = ", ".join(map(str, sorted(worlds)[:8])) + (", ..." if len(worlds) > 8 else "")
    raise InputError(field, f"{named} divides none of the GPU counts the search tries ({counts})")


def fewer_nodes(nodes: int, per_node: int = 8, batch: int = 0, model_parallel: bool = True) -> list[int]:
    """Node counts below the cluster's that factor well: the largest power of two, the largest multiples of 4 and
    8, and, where the whole cluster leaves TP x PP x CP an odd factor above 3 (times the odd part of a node's GPU
    count) or more than a node, from half the cluster up each count whose GPUs share more with the global batch
    than every larger count's (`math.gcd`) and leave no such factor:
    data-parallel replicas must divide the batch, so 6 nodes of 8 (48 GPUs, 48 replicas of a 1,536-sequence batch)
    can beat 7 (56 = 8 replicas of 7 GPUs) and 4. A cluster of 17 or 19 nodes may train faster on 16, leaving the
    rest idle. A stack without TP, PP or CP (`model_parallel` False) puts one replica on each GPU: the largest count
    whose GPUs divide the batch, however small (25 nodes of 8 and a batch of 96 train on 12)."""
    if nodes < 2:
        return []
    candidates = {1 << (nodes.bit_length() - 1), nodes - nodes % 4, nodes - nodes % 8}
    if batch and not model_parallel:
        if batch % (nodes * per_node):  # not every GPU a replica already
            candidates.add(next((n for n in range(nodes - 1, 0, -1) if batch % (n * per_node) == 0), 0))
    elif batch:
        # the odd factor TP x PP x CP may be left with: 1 or 3 (a PP of 3, 6, 12 ...) times the node's own, which
        # its TP absorbs anyway (nodes of 6 GPUs: up to 9, a PP of 9 on 6 of 7 nodes ran 1.42x the 4 nodes the
        # rule of 3 kept for Llama-3 8B, QA 2026-12-07)
        odd_limit = 3 * _odd_part(per_node)
        best = math.gcd(nodes * per_node, batch)
        rest = nodes * per_node // best
        # the whole cluster leaves TP x PP x CP an odd factor above that (7 nodes of 8 for a batch of 1,536: 7), or
        # more model parallelism than a node holds (a batch of 7 on 64 GPUs: 64-way), where fewer nodes may give
        # data parallelism room (7 nodes: 7 replicas of 8); the counts the batch divides better (128 nodes and
        # 1,536, whose rest is 2, search what they did)
        if _odd_part(rest) > odd_limit or rest > per_node:
            for n in range(nodes - 1, (nodes + 1) // 2 - 1, -1):
                shared = math.gcd(n * per_node, batch)
                if shared > best and _odd_part(n * per_node // shared) <= odd_limit:
                    candidates.add(n)
                    best = shared
    return sorted((n for n in candidates if 0 < n < nodes), reverse=True)


def _odd_part(n: int) -> int:
    return n // (n & -n)
