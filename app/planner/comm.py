"""Communication time, nccl-tests style (NVIDIA/nccl-tests doc/PERFORMANCE.md).

`busbw = algbw x factor`, factor = 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and
all-to-all (S the full n x per-rank size), 1 for point-to-point; so `t = latency + S x factor / busbw`.
A group inside one NVLink domain runs at the NVLink figure x `efficiency.nvlink`; a group that spans nodes
at the per-GPU network figure x `efficiency.network` (rail-optimised: each GPU drives its own NIC).
"""

from __future__ import annotations

import math
from typing import Literal

from app.planner.specs import ClusterSpec

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]


def bus_factor(op: Op, n: int) -> float:
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "send_recv":
        return 1.0
    return (n - 1) / n


def bus_bandwidth(cluster: ClusterSpec, crosses_nodes: bool) -> float:
    """Achievable bus bandwidth in bytes/s per GPU for a group inside a node or across nodes."""
    eff = cluster.gpu.efficiency
    if crosses_nodes:
        return cluster.inter_bw * eff.network
    return cluster.intra_bw * eff.nvlink


def latency(cluster: ClusterSpec, crosses_nodes: bool, op: Op = "send_recv", n: int = 2) -> float:
    """Fixed cost of one call: launch, plus one network hop per ring step across nodes (n-1 steps for
    all-gather, reduce-scatter and all-to-all; all-reduce runs NCCL's tree across nodes, 2*log2(n) steps)."""
    eff = cluster.gpu.efficiency
    if not crosses_nodes:
        return eff.collective_latency_s
    if op == "send_recv":
        steps = 1.0
    elif op == "all_reduce":
        steps = 2.0 * math.ceil(math.log2(max(n, 2)))
    else:
        steps = float(n - 1)
    return eff.collective_latency_s + steps * eff.network_hop_latency_s


def collective_time(
    op: Op, size_bytes: float, n: int, cluster: ClusterSpec, crosses_nodes: bool, calls: int = 1
) -> float:
    """Seconds for `calls` collectives over `n` ranks moving `size_bytes` in total (the full buffer for
    all-gather/reduce-scatter)."""
    if n <= 1 and op != "send_recv":
        return 0.0
    factor = bus_factor(op, max(n, 2))
    return calls * latency(cluster, crosses_nodes, op, n) + size_bytes * factor / bus_bandwidth(cluster, crosses_nodes)


def overlapped(comm_s: float, compute_s: float, cluster: ClusterSpec) -> float:
    """Exposed part of communication that runs alongside `compute_s` of compute: only `efficiency.overlap`
    of the shorter of the two hides (the rest is lost to SM and memory contention)."""
    return comm_s - cluster.gpu.efficiency.overlap * min(comm_s, compute_s)
