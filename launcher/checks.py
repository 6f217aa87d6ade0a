"""Checks of a plan against this machine that need neither torch nor the network: `run` refuses to start
when one fails, and `preflight` shows them with the slower ones (launcher/preflight.py).
"""

from __future__ import annotations

import errno
import glob
import os
from collections.abc import Callable
from dataclasses import dataclass

from launcher.command import Command, is_local
from launcher.context import LaunchContext

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Check:
    """One check of the plan against this machine: its status and, where it is not ok, what to do."""

    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def _which(name: str, path: str | None) -> str | None:
    import shutil  # here, like socket below: `run` of a local plan needs neither (docs/launcher.md, "Overhead")

    return shutil.which(name, path=path)


def visible_gpus(caller_env: dict[str, str]) -> tuple[int, str]:
    """GPUs this node exposes to the job, without torch: NVIDIA devices, narrowed by CUDA_VISIBLE_DEVICES."""
    devices = len(glob.glob("/proc/driver/nvidia/gpus/*")) or len(glob.glob("/dev/nvidia[0-9]*"))
    how = f"{devices} NVIDIA device(s)"
    cvd = caller_env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        listed = [d for d in cvd.split(",") if d.strip()]
        listed = listed[: next((i for i, d in enumerate(listed) if d.strip().startswith("-")), len(listed))]
        devices = min(devices, len(listed))
        how += f", CUDA_VISIBLE_DEVICES={cvd!r}"
    return devices, how


def check_nodes(ctx: LaunchContext, commands: list[Command]) -> Check:
    w = ctx.plan.world
    if w.num_nodes > 1 and ctx.node_rank is None and not w.hosts and ctx.backend != "slurm":
        return Check(
            "nodes",
            FAIL,
            f"world.num_nodes is {w.num_nodes} but world.hosts is empty",
            "list the hosts in the plan, or run the launcher once per node with --node-rank K",
        )
    if ctx.node_rank is not None and w.hosts and not is_local(w.hosts[ctx.node_rank]):
        return Check(
            "nodes",
            WARN,
            f"--node-rank {ctx.node_rank} but world.hosts[{ctx.node_rank}] = "
            f"{w.hosts[ctx.node_rank]} is not an address of this machine",
            "run each node's launcher on the host the plan lists for it",
        )
    where = f"node {ctx.node_rank} of {w.num_nodes}" if ctx.node_rank is not None else f"{w.num_nodes} node(s)"
    hosts = f", hosts {', '.join(w.hosts)}" if w.hosts else ""
    return Check("nodes", OK, f"{where} x {w.gpus_per_node} process(es){hosts}")


def check_entrypoint(ctx: LaunchContext, commands: list[Command]) -> Check:
    python = ctx.python
    found = python if os.sep in python else _which(python, ctx.caller_env.get("PATH"))
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):  # a directory is X_OK too
        return Check(
            "entrypoint",
            FAIL,
            f"python interpreter {python} is not an executable",
            "set entrypoint.python to the interpreter of the training environment",
        )
    if not os.path.isfile(ctx.script):
        return Check(
            "entrypoint",
            FAIL,
            f"entrypoint.script {ctx.script} does not exist",
            "fix entrypoint.script: a relative path is relative to plan.json's directory (a rendered plan: render "
            "it with render.workdir, the directory that holds the script)",
        )
    if not os.path.isdir(ctx.working_dir):
        return Check(
            "entrypoint",
            FAIL,
            f"entrypoint.working_dir {ctx.working_dir} does not exist",
            "create it or fix entrypoint.working_dir",
        )
    return Check("entrypoint", OK, f"{ctx.script} with {python}")


def check_accelerators(ctx: LaunchContext, commands: list[Command]) -> Check:
    w = ctx.plan.world
    if not any(c.workers and is_local_command(c) for c in commands):
        return not_checked_here("accelerators", commands)
    if w.accelerator == "cpu":
        cores = len(os.sched_getaffinity(0))
        if w.gpus_per_node > cores:
            return Check(
                "accelerators",
                WARN,
                f"world.gpus_per_node({w.gpus_per_node}) CPU processes on {cores} core(s)",
                "expect slow steps, or use fewer processes per node",
            )
        return Check("accelerators", OK, f"{w.gpus_per_node} CPU process(es) on {cores} core(s)")
    gpus, how = visible_gpus(ctx.caller_env)
    if gpus < w.gpus_per_node:
        return Check(
            "accelerators",
            FAIL,
            f"world.gpus_per_node({w.gpus_per_node}) but this node exposes {gpus} GPU(s) ({how})",
            "run on a node with enough GPUs, or fix CUDA_VISIBLE_DEVICES",
        )
    return Check("accelerators", OK, f"{w.gpus_per_node} of {gpus} GPU(s) ({how})")


def uses_master_port(ctx: LaunchContext) -> bool:
    w = ctx.plan.world
    return ctx.backend == "deepspeed" or (ctx.backend == "torchrun" and w.num_nodes > 1)


def check_port(ctx: LaunchContext, commands: list[Command]) -> Check:
    w = ctx.plan.world
    if not uses_master_port(ctx):
        return Check("port", OK, "not needed (torchrun --standalone picks a free port; srun: the first node)")
    if 0 not in ctx.nodes():
        return Check("port", OK, f"{w.master_addr}:{w.master_port} is opened by node 0 (checked by its launcher)")
    if not is_local_command(commands[0]):
        return not_checked_here("port", commands[:1], f"{w.master_addr}:{w.master_port}")
    addr = w.master_addr if is_local(w.master_addr) else "0.0.0.0"
    import socket  # only where the port is checked (see _which)

    try:
        with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, w.master_port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return Check(
                "port",
                FAIL,
                f"world.master_port {w.master_port} is in use on {addr}",
                "pick a free port in world.master_port (or stop what holds it)",
            )
        return Check(
            "port",
            FAIL,
            f"cannot bind {addr}:{w.master_port}: {exc.strerror}",
            "give world.master_addr as an address of the head node",
        )
    return Check("port", OK, f"{addr}:{w.master_port} is free")


def check_tools(ctx: LaunchContext, commands: list[Command]) -> Check:
    path = ctx.caller_env.get("PATH")
    needed = {c.argv[0] for c in commands if os.sep not in c.argv[0]}
    needed |= {"ssh" for c in commands if not is_local_command(c)}
    if "--launcher" in commands[0].argv:
        needed.add("pdsh")
    missing = sorted(t for t in needed if not _which(t, path))
    if missing:
        return Check(
            "tools",
            FAIL,
            f"not found on PATH: {', '.join(missing)}",
            "install them, or choose another backend (job.backend / --backend)",
        )
    return Check("tools", OK, ", ".join(sorted(needed)) or "nothing beyond the interpreter")


def is_local_command(command: Command) -> bool:
    return command.host == "localhost" or is_local(command.host)


def not_checked_here(name: str, commands: list[Command], what: str = "") -> Check:
    """A check of another machine: where those nodes start over ssh no launcher runs there, so it is not checked
    (it said "ok, checked on each node"); where a launcher runs per node (`--node-rank`), that one checks it."""
    remote = sorted({c.host for c in commands if not is_local_command(c)})
    if not remote:  # srun or a launcher per node: the nodes' own processes
        return Check(name, OK, "the workers start elsewhere (srun's nodes, or a launcher per node that checks its own)")
    hosts = ", ".join(remote)
    return Check(
        name,
        WARN,
        f"{what + ' ' if what else ''}not checked: started over ssh on {hosts}, where no launcher runs this check",
        "run `python -m launcher preflight plan.json --node-rank K` on node K to check it there",
    )


QUICK: tuple[Callable[[LaunchContext, list[Command]], Check], ...] = (
    check_nodes,
    check_entrypoint,
    check_accelerators,
    check_port,
    check_tools,
)


def quick_checks(ctx: LaunchContext, commands: list[Command]) -> list[Check]:
    return [check(ctx, commands) for check in QUICK]
