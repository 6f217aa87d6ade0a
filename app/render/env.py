"""The job's environment: NCCL exports from the cluster description, and what the framework requires.

Only what was asked for or derived is set; each variable carries the reason written beside it in the scripts.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner import layout as lay
from app.planner.results import Plan
from app.planner.specs import ClusterSpec, TrainingSpec
from app.render.options import RenderOptions

# NCCL_ALGO=Tree alone leaves AllGather/ReduceScatter/Broadcast without an algorithm on NCCL >= 2.24 (no implicit
# ring fallback any more): the distributed optimizer and ZeRO would fail at their first all-gather. The
# per-collective form pins the all-reduce only.
TREE_ALLREDUCE = "allreduce:tree"


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    value: str
    reason: str


def crossing_groups(plan: Plan, cluster: ClusterSpec) -> list[str]:
    """Which parallel groups of the plan span nodes (Megatron's tp-cp-ep-dp-pp rank order)."""
    par = plan.parallel
    checks = (
        ("tensor-parallel", lay.tp_crosses_nodes(par, cluster)),
        ("context-parallel", lay.cp_crosses_nodes(par, cluster)),
        ("expert-parallel", lay.ep_crosses_nodes(par, cluster)),
        ("data-parallel", lay.dp_crosses_nodes(par, cluster)),
        ("pipeline", lay.pp_crosses_nodes(par, cluster)),
    )
    return [name for name, crosses in checks if crosses]


def _algo(plan: Plan, cluster: ClusterSpec, options: RenderOptions) -> EnvVar | None:
    if options.nccl_algo == "default":
        return None
    if options.nccl_algo is not None:
        return EnvVar("NCCL_ALGO", options.nccl_algo, "set by the render option nccl_algo")
    nodes = plan.layout.num_nodes
    if nodes <= 1:
        return None
    groups = " and ".join(crossing_groups(plan, cluster)) or "no group's"
    return EnvVar("NCCL_ALGO", TREE_ALLREDUCE,
                  f"{groups} traffic crosses {nodes} nodes: tree all-reduce latency grows with log2(nodes), ring's "
                  f"with nodes; only AllReduce has a tree, so the other collectives keep NCCL's choice (NCCL >= 2.24)")


def nccl_env(plan: Plan, cluster: ClusterSpec, options: RenderOptions) -> tuple[EnvVar, ...]:
    out: list[EnvVar] = []
    if cluster.nics:
        out.append(EnvVar("NCCL_IB_HCA", "=" + ",".join(cluster.nics),
                          "InfiniBand HCAs from cluster.nics; '=' matches the names exactly (mlx5_1 is not mlx5_10)"))
        out.append(EnvVar("NCCL_NET_GDR_LEVEL", "PHB",
                          "GPUDirect RDMA between a GPU and an HCA under the same CPU's PCIe host bridge"))
    if cluster.socket_ifname:
        out.append(EnvVar("NCCL_SOCKET_IFNAME", cluster.socket_ifname,
                          "bootstrap and socket traffic on cluster.socket_ifname"))
    algo = _algo(plan, cluster, options)
    if algo is not None:
        out.append(algo)
    return tuple(out)


def worker_env(plan: Plan, training: TrainingSpec, options: RenderOptions) -> tuple[EnvVar, ...]:
    """What the training framework itself requires of every rank's environment."""
    par = plan.parallel
    if options.accelerator == "cpu":
        return (EnvVar("DS_ACCELERATOR", "cpu", "accelerator cpu: DeepSpeed runs on CPU processes with gloo"),)
    if training.framework != "deepspeed" and (par.tp > 1 or par.cp > 1):
        sizes = " and ".join(f"{name}({n})" for name, n in (("tp", par.tp), ("cp", par.cp)) if n > 1)
        reason = (f"{sizes} > 1: Megatron needs one CUDA connection so that its TP/CP communication is scheduled "
                  f"in issue order (asserted before Blackwell)")
        return (EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", "1", reason),)
    return ()
