"""The job's environment: NCCL exports from the cluster description and the plan's decisions, and what the
framework requires. Only what was asked for or decided is set; each variable carries its reason.

- NCCL_IB_HCA: `=` prefix, exact HCA names (NCCL docs, env.html#nccl-ib-hca: "mlx5_1" would also select mlx5_10).
- NCCL_SOCKET_IFNAME: `=eth0` for a full interface name (exact match), the bare prefix otherwise (NCCL docs,
  #nccl-socket-ifname); GLOO_SOCKET_IFNAME with the same interface, since Megatron and DeepSpeed also build gloo
  groups (torch's gloo takes exact interface names only, so a prefix cannot be passed on).
- NCCL_NET_GDR_LEVEL is never set: NCCL documents it among the debugging variables, and its default follows the
  PCI topology it detects.
- NCCL_ALGO: the plan's decision (app/planner/decisions.py), written only for an NCCL that parses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.planner.results import Decisions
from app.planner.specs import ClusterSpec
from app.render.options import RenderOptions

FULL_IFNAME = re.compile(r".*\d$")  # eth0, ib0, ens1f0np0, enp5s0: a full name ends in its index


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    value: str
    reason: str


def version_at_least(have: tuple[int, int] | None, need: str) -> bool | None:
    """None when the version is unknown."""
    if have is None:
        return None
    major, minor = (int(x) for x in need.split(".")[:2])
    return have >= (major, minor)


def algo(decisions: Decisions, options: RenderOptions) -> tuple[EnvVar | None, str | None]:
    """(NCCL_ALGO, a note when the plan's choice is not written)."""
    if options.nccl_algo == "default":
        return None, None
    if options.nccl_algo is not None:
        if options.nccl_algo == "allreduce:tree" and version_at_least(options.nccl_version_tuple, "2.24") is False:
            raise ValueError(
                f"nccl_algo: allreduce:tree needs NCCL >= 2.24 (per-collective syntax), but "
                f"nccl_version is {options.nccl_version}: older NCCL enables no algorithm at all"
            )
        return EnvVar("NCCL_ALGO", options.nccl_algo, "set by the render option nccl_algo"), None
    nccl = decisions.nccl
    if nccl.all_reduce_algo is None:
        return None, None
    assert nccl.min_nccl_version is not None
    ok = version_at_least(options.nccl_version_tuple, nccl.min_nccl_version)
    if ok:
        return EnvVar("NCCL_ALGO", nccl.all_reduce_algo, nccl.reason), None
    why = "is unknown (render option nccl_version)" if ok is None else f"is {options.nccl_version}"
    return None, (
        f"NCCL_ALGO={nccl.all_reduce_algo} not set: the plan would pin the tree all-reduce ({nccl.reason}), "
        f"but that syntax needs NCCL >= {nccl.min_nccl_version} and the nodes' NCCL {why}"
    )


def _socket(ifname: str) -> list[EnvVar]:
    if FULL_IFNAME.fullmatch(ifname):
        return [
            EnvVar(
                "NCCL_SOCKET_IFNAME",
                "=" + ifname,
                f"bootstrap and socket traffic on {ifname} exactly ('=': not every interface it prefixes)",
            ),
            EnvVar("GLOO_SOCKET_IFNAME", ifname, "the gloo groups Megatron and DeepSpeed create use it too"),
        ]
    return [EnvVar("NCCL_SOCKET_IFNAME", ifname, f"bootstrap and socket traffic on interfaces named {ifname}*")]


def nccl_env(decisions: Decisions, cluster: ClusterSpec, options: RenderOptions) -> tuple[EnvVar, ...]:
    out: list[EnvVar] = []
    if cluster.nics:
        out.append(
            EnvVar(
                "NCCL_IB_HCA",
                "=" + ",".join(cluster.nics),
                "InfiniBand HCAs from cluster.nics; '=' matches the names exactly (mlx5_1 is not mlx5_10)",
            )
        )
    if cluster.socket_ifname:
        out += _socket(cluster.socket_ifname)
    var, _note = algo(decisions, options)
    if var is not None:
        out.append(var)
    return tuple(out)


def env_notes(decisions: Decisions, cluster: ClusterSpec, options: RenderOptions) -> list[str]:
    out = []
    _var, note = algo(decisions, options)
    if note:
        out.append(note)
    if cluster.socket_ifname and not FULL_IFNAME.fullmatch(cluster.socket_ifname):
        out.append(
            f"cluster.socket_ifname {cluster.socket_ifname!r} is a prefix: GLOO_SOCKET_IFNAME (exact names "
            f"only) is not set, gloo picks the interface of the host name"
        )
    return out


# Read by torchrun's agent only: DeepSpeed's launcher (deepspeed/launcher/launch.py) sends SIGTERM and kills what is
# left 30 s later whatever it says, so deepspeed.sh does not set it (render.notes says so)
TORCHRUN_ONLY = frozenset({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT"})


def worker_env(decisions: Decisions, framework: str, options: RenderOptions) -> tuple[EnvVar, ...]:
    """What the training framework itself requires of every rank's environment (and of torchrun around it)."""
    if options.accelerator == "cpu":
        return (EnvVar("DS_ACCELERATOR", "cpu", "accelerator cpu: DeepSpeed runs on CPU processes with gloo"),)
    out: list[EnvVar] = []
    if decisions.cuda_device_max_connections is not None:
        out.append(
            EnvVar(
                "CUDA_DEVICE_MAX_CONNECTIONS",
                str(decisions.cuda_device_max_connections),
                decisions.cuda_device_max_connections_reason,
            )
        )
    if decisions.userbuffers_skip_multicast:
        out.append(
            EnvVar(
                "UB_SKIPMC",
                "1",
                "TP comm overlap (pinned) on GPUs without NVSwitch: Transformer Engine's userbuffers share memory "
                "over CUDA IPC instead of multicast, which initialize_ub otherwise stops on",
            )
        )
    if framework == "megatron":
        out.append(
            EnvVar(
                "PYTORCH_CUDA_ALLOC_CONF",
                "expandable_segments:True",
                "the caching allocator maps what it needs instead of fixed blocks: next to no fragmentation, as "
                "NVIDIA's Megatron-Bridge memory guide advises and the planner's memory model for Megatron assumes "
                "(2% + 1 GiB over allocated)",
            )
        )
    out.append(
        EnvVar(
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
            str(decisions.graceful_stop_s),
            "after SIGTERM torchrun waits this long for the ranks to save a checkpoint before SIGKILL (Megatron's "
            "--exit-signal-handler, the example trainer's SIGTERM handler; torch's default is 30 s)",
        )
    )
    return tuple(out)
