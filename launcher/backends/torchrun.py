"""torchrun: `--standalone` on one node; c10d rendezvous across nodes (one agent per node)."""

from __future__ import annotations

import math

from launcher.command import Command
from launcher.context import LaunchContext
from launcher.spec import Watchdog

# Each rendezvous round gets a fresh TCPStore (hosted by its rank 0) instead of the agent's store, which outlives
# the rounds: with the shared store a new round can read the addresses the previous round's ranks published
# (pytorch/pytorch#167288), and the workers' per-attempt prefix (TORCHELASTIC_RESTART_COUNT) is not the same on
# every node after a membership change, which only the failed node counts as a restart (torch/distributed/
# elastic/agent/server/local_elastic_agent.py sets it from its own remaining restarts; rendezvous.py relies on
# "a new TCPStore for every retry"). Opt-out of the sharing: dynamic_rendezvous.py, TORCH_DISABLE_SHARE_RDZV_TCP_STORE.
# Only where there is a membership to change, several nodes: on one node every round's workers come from the one
# agent with the same restart count, and the fresh store costs the job's start (the workers' process group waits
# for the store its rank 0 starts: +7 % to the first step of benchmarks/launcher_overhead.py's job, docs/launcher.md).
AGENT_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def agent_env(ctx: LaunchContext, node_rank: int | None, extra_prefixes: tuple[str, ...] = ()) -> dict[str, str]:
    """The torchrun agent's environment: the workers' (launcher/context.py), and on several nodes AGENT_ENV, unless
    the plan sets it."""
    shared = AGENT_ENV if ctx.plan.world.num_nodes > 1 else {}
    return {**shared, **ctx.worker_env(node_rank, extra_prefixes)}


def torchrun_argv(ctx: LaunchContext, node_rank: int | None, rdzv_host: str, rdzv_id: str) -> list[str]:
    """The agent's argv for one node (node_rank None: the same argv on every node, as under srun)."""
    plan, job = ctx.plan, ctx.plan.job
    w = plan.world
    argv = [
        ctx.python,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(w.num_nodes),
        "--nproc-per-node",
        str(w.gpus_per_node),
    ]
    if w.num_nodes == 1:
        argv.append("--standalone")
    else:
        argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{rdzv_host}:{w.master_port}", "--rdzv-id", rdzv_id]
        if node_rank is not None:
            # Say who hosts the rendezvous store instead of letting torchrun guess from host names
            # (c10d assigns node ranks itself; --node-rank is only for the static backend). A restart that
            # cannot regroup gives up after the plan's start-up allowance (torch's default join_timeout: 600 s).
            join = math.ceil((plan.watchdog or Watchdog()).startup_s) or 1
            argv += ["--rdzv-conf", f"is_host={int(node_rank == 0)},join_timeout={join}"]
            if w.hosts:
                argv += ["--local-addr", w.hosts[node_rank]]
    argv += [
        "--max-restarts",
        str(job.max_restarts),
        "--shutdown-timeout",
        str(math.ceil(job.grace_period_s)),
        "--log-dir",
        str(ctx.node_log_dir(node_rank)),
        "--tee",
        "3",
        "--local-ranks-filter",
        "0",
    ]
    if job.numa_binding != "none":
        argv += ["--numa-binding", job.numa_binding]
    return argv + ctx.script_argv(node_rank)


class Torchrun:
    name = "torchrun"
    restarts_inside = True

    def build(self, ctx: LaunchContext) -> list[Command]:
        w = ctx.plan.world
        return [
            Command(
                argv=tuple(torchrun_argv(ctx, k, w.master_addr, ctx.plan.job.name)),
                env=agent_env(ctx, k),
                cwd=ctx.working_dir,
                host=ctx.host(k),
                node_rank=k,
                workers=w.gpus_per_node,
                console=k == ctx.nodes()[0],
                log=str(ctx.node_log_dir(k) / "agent.log"),
            )
            for k in ctx.nodes()
        ]

    def derived_files(self, ctx: LaunchContext) -> dict[str, str]:
        return {}
