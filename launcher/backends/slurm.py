"""slurm: inside an allocation, srun one torchrun agent per node; outside one, sbatch the rendered script."""

from __future__ import annotations

import re
from collections.abc import Mapping

from launcher.backends.torchrun import agent_env, torchrun_argv
from launcher.command import Command
from launcher.context import LaunchContext
from launcher.spec import PlanError

SBATCH_FILE = "sbatch.sh"


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compact host list, e.g. 'gpu[01-03,07],login1' -> gpu01 gpu02 gpu03 gpu07 login1."""
    hosts: list[str] = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", nodelist):
        hosts.extend(_expand_one(item))
    return hosts


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if not match:
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    out: list[str] = []
    for part in match.group(1).split(","):
        lo, _, hi = part.partition("-")
        if not hi:
            values = [lo]
        elif not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
            raise PlanError(f"SLURM_JOB_NODELIST: cannot expand range {part!r} in {item!r}")
        else:
            values = [str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1)]
        out.extend(f"{head}{v}{rest}" for v in values for rest in _expand_one(tail))
    return out


class Slurm:
    name = "slurm"
    restarts_inside = True  # torchrun under srun restarts its workers; sbatch's script decides for itself

    def derived_files(self, ctx: LaunchContext) -> dict[str, str]:
        return {}

    def build(self, ctx: LaunchContext) -> list[Command]:
        return [self._srun(ctx) if ctx.in_slurm else self._sbatch(ctx)]

    def allocation(self, ctx: LaunchContext) -> list[str]:
        return expand_nodelist(ctx.caller_env["SLURM_JOB_NODELIST"])

    def _srun(self, ctx: LaunchContext) -> Command:
        w = ctx.plan.world
        nodes = self.allocation(ctx)
        if len(nodes) < w.num_nodes:
            raise PlanError(
                f"slurm: the allocation has {len(nodes)} node(s) "
                f"(SLURM_JOB_NODELIST={ctx.caller_env['SLURM_JOB_NODELIST']}) but world.num_nodes is {w.num_nodes}"
            )
        srun = [
            "srun",
            "--nodes",
            str(w.num_nodes),
            "--ntasks",
            str(w.num_nodes),
            "--ntasks-per-node",
            "1",
            "--kill-on-bad-exit=1",
            "--nodelist",
            ",".join(nodes[: w.num_nodes]),
            # the node's one task is its torchrun and every rank under it: all of the node's CPUs and no binding
            # (a site default of one CPU per task pinned them all, data-loader workers included, to one core; the
            # rendered sbatch.sh does the same)
            *_node_cpus(ctx.caller_env),
            "--cpu-bind=none",
        ]
        agent = torchrun_argv(ctx, None, nodes[0], ctx.caller_env["SLURM_JOB_ID"])
        return Command(
            argv=tuple(srun + agent),
            env=agent_env(ctx, None, ("SLURM_",)),
            cwd=ctx.working_dir,
            node_rank=None,
            log=str(ctx.node_log_dir(None) / "srun.log"),
        )

    def _sbatch(self, ctx: LaunchContext) -> Command:
        if SBATCH_FILE not in ctx.plan.files:
            raise PlanError(
                "backend slurm outside an allocation submits files['sbatch.sh'], which this plan does not have "
                "(render one, or run the launcher inside salloc/sbatch)"
            )
        return Command(
            argv=("sbatch", "--wait", str(ctx.run_dir / SBATCH_FILE)),
            env=ctx.worker_env(None, ("SLURM_", "SBATCH_")),
            cwd=str(ctx.run_dir),
            node_rank=None,
            log=str(ctx.node_log_dir(None) / "sbatch.log"),
        )


def _node_cpus(env: Mapping[str, str]) -> list[str]:
    """`--cpus-per-task=<the CPUs the allocation has on a node>` (SLURM_CPUS_ON_NODE, the first node's count for a
    heterogeneous one such as "64(x2)" in SLURM_JOB_CPUS_PER_NODE); nothing when Slurm says neither."""
    for key in ("SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE"):
        count = env.get(key, "").split("(", 1)[0].split(",", 1)[0]
        if count.isdigit() and int(count) > 0:
            return [f"--cpus-per-task={int(count)}"]
    return []
