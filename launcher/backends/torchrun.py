"""torchrun: `--standalone` on one node; c10d rendezvous across nodes (one agent per node)."""

from __future__ import annotations

import math

from launcher.command import Command
from launcher.context import LaunchContext


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
            # (c10d assigns node ranks itself; --node-rank is only for the static backend).
            argv += ["--rdzv-conf", f"is_host={int(node_rank == 0)}"]
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
                env=ctx.worker_env(k),
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
