"""deepspeed: the DeepSpeed runner with a hostfile, --num_nodes/--num_gpus and --master_addr/--master_port.

One node: the runner starts its ranks locally. Several nodes: either this launcher runs once per node
(`--node-rank K`, DeepSpeed's `--no_ssh --node_rank K`), or once on the head, where DeepSpeed starts the
other nodes with pdsh and forwards the plan's environment through DS_ENV_FILE.
"""

from __future__ import annotations

from launcher.command import Command
from launcher.context import LaunchContext

HOSTFILE = "hostfile"
GENERATED_HOSTFILE = "hostfile.generated"
ENV_FILE = "deepspeed_env.generated"


class DeepSpeed:
    name = "deepspeed"
    restarts_inside = False  # the launcher re-runs the whole job up to job.max_restarts

    def hostfile(self, ctx: LaunchContext) -> str:
        name = HOSTFILE if HOSTFILE in ctx.plan.files else GENERATED_HOSTFILE
        return str(ctx.run_dir / name)

    def derived_files(self, ctx: LaunchContext) -> dict[str, str]:
        w = ctx.plan.world
        files = {}
        if HOSTFILE not in ctx.plan.files:
            hosts = w.hosts or ("localhost",)
            files[GENERATED_HOSTFILE] = "".join(f"{h} slots={w.gpus_per_node}\n" for h in hosts)
        if self._pdsh(ctx):
            env = ctx.worker_env(None)
            files[ENV_FILE] = "".join(f"{k}={v}\n" for k, v in sorted(env.items()))
        return files

    def _pdsh(self, ctx: LaunchContext) -> bool:
        return ctx.plan.world.num_nodes > 1 and ctx.node_rank is None

    def build(self, ctx: LaunchContext) -> list[Command]:
        w, job = ctx.plan.world, ctx.plan.job
        node = ctx.nodes()[0] if not self._pdsh(ctx) else 0
        argv = [
            ctx.python,
            "-m",
            "deepspeed.launcher.runner",
            "--hostfile",
            self.hostfile(ctx),
            "--num_nodes",
            str(w.num_nodes),
            "--num_gpus",
            str(w.gpus_per_node),
            "--master_addr",
            w.master_addr,
            "--master_port",
            str(w.master_port),
            "--enable_each_rank_log",
            str(ctx.node_log_dir(node) / "ranks"),
        ]
        env = ctx.worker_env(node)
        if w.num_nodes == 1:
            argv.append("--no_ssh_check")
        elif self._pdsh(ctx):
            argv += ["--launcher", "pdsh"]
            env["DS_ENV_FILE"] = str(ctx.run_dir / ENV_FILE)
        else:
            argv += ["--no_ssh", "--node_rank", str(node)]
        if job.numa_binding != "none":
            argv.append("--bind_cores_to_rank")
        return [
            Command(
                argv=tuple(argv + ctx.script_argv(node)),
                env=env,
                cwd=ctx.working_dir,
                host=ctx.host(node),
                node_rank=node,
                workers=0 if self._pdsh(ctx) else w.gpus_per_node,  # pdsh starts even the head's ranks over ssh
                follow=str(ctx.node_log_dir(node) / "ranks" / f"*_rank{node * w.gpus_per_node}.log"),
                log=str(ctx.node_log_dir(node) / "agent.log"),
            )
        ]
