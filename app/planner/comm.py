"""Collectives over groups placed on a real cluster, nccl-tests style (NVIDIA/nccl-tests doc/PERFORMANCE.md).

`t = latency + S x factor / busbw`; factor = 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter (S the
full n x per-rank size), 1 for point-to-point. Where the group lands decides `busbw`:

- inside one NVLink domain (a node, or a GB200 NVL72 rack of trays): the NVLink figure x `efficiency.nvlink`; on a
  full mesh without a switch (MI300X's Infinity Fabric, `GPUSpec.fabric_mesh`) only the share of the links that join
  the group's members of the domain (k - 1 of the domain's d - 1);
- across domains with k ranks of the group in each: on a rail-optimised cluster NCCL runs k rings (channels) that
  leave each domain through k NICs, so `busbw = min(k x NIC x efficiency.network, NVLink x efficiency.nvlink)`;
  a group with one rank per node (DP across TP=8 nodes) has one NIC.
- latency follows NCCL's own tuning model (src/graph/tuning.cc): a ring pays the NVLink step latency on its intra-node
  steps and the network step latency only on its `2(N-1)` (all-reduce) or `N-1` (all-gather, reduce-scatter)
  inter-node steps; an all-reduce may take the tree instead, `2((n/N - 1) x intra + log2(N) x inter)`, whichever is
  shorter.
- all-to-all: each rank sends `(n-1)/n` of its buffer; the `(n-k)/n` that leaves the domain goes through its own NIC,
  the rest over NVLink at the same time.

Overlap is a physical bound: communication that runs beside `window` seconds of compute hides up to the window;
what exceeds it is exposed, and the hidden part still costs `contention` of its time (SMs and HBM the NCCL kernels
take from compute; a constant of the software stack, data/stacks.json).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Literal

from app.planner.specs import ClusterSpec

TREE_ALLREDUCE_BW = 0.92  # NCCL's tree all-reduce bus bandwidth over the ring's (src/graph/tuning.cc)

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]


@dataclass(frozen=True, slots=True)
class Group:
    """A communicator: `size` ranks, `per_domain` of them in each NVLink domain, spanning `domains` domains."""

    size: int
    per_domain: int
    domains: int
    rails: int = 0  # NIC rails the group's rings use per domain (0: one per rank in the domain)

    @property
    def crosses(self) -> bool:
        return self.domains > 1

    @property
    def nics(self) -> int:
        return self.rails or self.per_domain


def group(size: int, stride: int, cluster: ClusterSpec, world: int | None = None) -> Group:
    """The group of `size` ranks spaced `stride` apart in rank order (Megatron's tp-cp-ep-dp-pp order puts TP
    ranks adjacent, then CP, then DP; pipeline stages outermost). Groups are tiled from rank 0 in steps of their
    span: where the span does not divide the NVLink domain (16, 32 or 64 GPUs of a 72-GPU GB200 rack) some group
    straddles two domains, and the collective waits for it (`straddle`). `world`: the job's GPUs (the cluster's by
    default), which set its NVLink segments (ClusterSpec.job_nvlink_domain)."""
    world = world or cluster.world_size
    domain = cluster.job_nvlink_domain(world)
    if size <= 1:
        return Group(max(size, 1), 1, 1)
    if size * stride <= domain:
        if world <= domain or domain % (size * stride) == 0:
            return Group(size, size, 1)
        return Group(size, straddle(size, stride, domain), 2)
    per_domain = max(1, domain // stride) if stride < domain else 1
    per_domain = min(per_domain, size)
    return Group(size, per_domain, math.ceil(size / per_domain))


@cache
def straddle(size: int, stride: int, domain: int) -> int:
    """Of the groups tiled from rank 0 in steps of their span (`size` ranks `stride` apart), the fewest ranks one
    that straddles a domain boundary has on either side: its traffic across leaves through that many NICs. EP64 on
    72-GPU racks: the group of ranks 64-127 has 8 in the first rack and 56 in the next."""
    span = size * stride
    fewest = size
    for start in range(0, math.lcm(span, domain), span):
        before = -(-(domain - start % domain) // stride)  # the group's ranks before the next boundary
        if before < size:
            fewest = min(fewest, before, size - before)
    return max(1, fewest)


def bus_factor(op: Op, n: int) -> float:
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "send_recv":
        return 1.0
    return (n - 1) / n


def _nvlink_bw(cluster: ClusterSpec, members: int = 0) -> float:
    """Bus bandwidth inside the domain of `members` ranks of a group there (0: every GPU of the domain). Behind a
    switch each GPU uses all of its links whatever the group; on a full mesh (`GPUSpec.fabric_mesh`, MI300X) only
    the k - 1 links to the group's other members of its domain - 1: a pair of MI300X shares one 64 GB/s link, where
    all eight were credited to it (practitioner review 2026-12-07)."""
    bw = cluster.intra_bw * cluster.gpu.efficiency.nvlink
    links = cluster.gpu.nvlink_domain - 1
    if cluster.gpu.fabric_mesh and members and links > 0:
        return bw * min(max(members - 1, 1), links) / links
    return bw


def _nic_bw(cluster: ClusterSpec) -> float:
    return cluster.inter_bw * cluster.gpu.efficiency.network


def bus_bandwidth(g: Group, cluster: ClusterSpec) -> float:
    """Achievable bus bandwidth in bytes/s per rank of the group."""
    if not g.crosses:
        return _nvlink_bw(cluster, g.size)
    return min(g.nics * _nic_bw(cluster), _nvlink_bw(cluster, g.per_domain))


def latency(op: Op, g: Group, cluster: ClusterSpec) -> float:
    """Fixed cost of one call (NCCL tuning model: base + per-step latencies, network steps only where the ring
    leaves a domain; all-reduce takes the tree where that is shorter)."""
    eff = cluster.gpu.efficiency
    base, intra, inter = eff.collective_latency_s, eff.intra_step_latency_s, eff.network_hop_latency_s
    n, nodes = g.size, g.domains
    if op == "send_recv":
        return base + (inter if g.crosses else intra)
    if op == "all_reduce":
        return min(_all_reduce_latencies(g, cluster))
    steps, inter_steps = n - 1, nodes - 1
    return base + (steps - inter_steps) * intra + inter_steps * inter


def _all_reduce_latencies(g: Group, cluster: ClusterSpec) -> tuple[float, float]:
    """(ring, tree) fixed cost of one all-reduce: the ring's 2(N-1) network steps against the tree's 2 log2(N)
    (the tree only where the group crosses domains)."""
    eff = cluster.gpu.efficiency
    base, intra, inter = eff.collective_latency_s, eff.intra_step_latency_s, eff.network_hop_latency_s
    n, nodes = g.size, g.domains
    steps, inter_steps = 2 * (n - 1), (2 * (nodes - 1) if nodes > 1 else 0)
    ring = base + (steps - inter_steps) * intra + inter_steps * inter
    if nodes == 1:
        return ring, ring
    return ring, base + 2 * ((n // nodes - 1) * intra + math.ceil(math.log2(nodes)) * inter)


def all_reduce_ring_and_tree(size_bytes: float, g: Group, cluster: ClusterSpec) -> tuple[float, float]:
    """Seconds of one all-reduce of `size_bytes` over `g` as a ring and as a tree, as NCCL's tuning model weighs
    them: the tree saves network steps and moves the bytes at TREE_ALLREDUCE_BW of the ring's bus bandwidth
    (src/graph/tuning.cc: `busBw = min(busBw * .92, nChannels * perChMaxTreeBw)` for a tree all-reduce)."""
    ring, tree = _all_reduce_latencies(g, cluster)
    wire = size_bytes * bus_factor("all_reduce", g.size) / bus_bandwidth(g, cluster)
    return ring + wire, tree + wire / TREE_ALLREDUCE_BW


def collective_time(op: Op, size_bytes: float, g: Group, cluster: ClusterSpec, calls: int = 1) -> float:
    """Seconds for `calls` collectives over group `g` moving `size_bytes` in total (the full buffer for
    all-gather / reduce-scatter / all-reduce; each rank's send buffer for all-to-all; the message for send_recv)."""
    if g.size <= 1 and op != "send_recv":
        return 0.0
    fixed = calls * latency(op, g, cluster)
    if op == "all_to_all":
        n, k = g.size, g.per_domain
        local = size_bytes * (k - 1) / n / _nvlink_bw(cluster, k)
        remote = size_bytes * (n - k) / n / (_nic_bw(cluster) * g.nics / k) if g.crosses else 0.0
        return fixed + max(local, remote)
    if op == "send_recv":  # one peer: on a mesh one link
        bw = _nic_bw(cluster) if g.crosses else _nvlink_bw(cluster, 2)
        return fixed + size_bytes / bw
    return fixed + size_bytes * bus_factor(op, g.size) / bus_bandwidth(g, cluster)


def exposed(comm_s: float, window_s: float, contention: float) -> float:
    """Communication running beside `window_s` of compute: the excess is exposed, and the hidden part still
    costs `contention` of its time."""
    hidden = min(comm_s, max(window_s, 0.0))
    return comm_s - hidden + contention * hidden
