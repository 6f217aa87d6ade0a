"""The `preflight` verb: every check before launching, as a table with ok/warn/fail and what to do.

The quick checks of launcher/checks.py, plus the slower ones: torch/deepspeed versions and devices as the
job's interpreter sees them (on each node, over ssh where remote), NCCL exports, ssh reachability.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
from dataclasses import replace

from launcher.backends import build
from launcher.checks import FAIL, OK, WARN, Check, is_local_command
from launcher.command import Command, launch_argv
from launcher.context import LaunchContext
from launcher.launch import checks_table, context_from_args
from launcher.nccl import nccl_checks
from launcher.storage import check_run_dir, quick_checks

PROBE_TIMEOUT_S = 120
VERSIONS = r"""
import importlib.metadata as md, importlib.util as iu, json, sys
out = {"python": sys.version.split()[0]}
try:
    out["deepspeed"] = md.version("deepspeed")
except md.PackageNotFoundError:
    out["deepspeed"] = None
try:
    import torch, torch.distributed as dist
    out.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available(),
               device_count=torch.cuda.device_count(), gloo=dist.is_gloo_available(),
               numa_binding=iu.find_spec("torch.numa.binding") is not None)
    if torch.cuda.is_available():
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def remote_run(command: Command, timeout_s: float) -> tuple[int, str]:
    """Run a short command where `command.host` is (over ssh when remote); (exit code, output)."""
    local = is_local_command(command)
    try:
        done = subprocess.run(
            launch_argv(command, local),
            env=command.env if local else None,
            cwd=command.cwd if local else None,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 255, str(exc)
    return done.returncode, done.stdout + done.stderr


def check_ssh(command: Command) -> Check:
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", command.host, "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
        code, out = done.returncode, done.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        code, out = 255, str(exc)
    if code:
        return Check(
            "ssh",
            FAIL,
            f"node {command.node_rank} ({command.host}): {out.strip()[-200:]}",
            "set up passwordless ssh (BatchMode) to every node, or run once per node with --node-rank",
        )
    return Check("ssh", OK, f"node {command.node_rank} ({command.host}) reachable")


def needs_deepspeed(ctx: LaunchContext) -> bool:
    args = " ".join(ctx.plan.entrypoint.args)
    return ctx.backend == "deepspeed" or "ds_config.json" in ctx.plan.files or "deepspeed" in args


def judge_versions(ctx: LaunchContext, node: str, info: dict[str, object]) -> Check:
    w, job = ctx.plan.world, ctx.plan.job
    if "torch" not in info:
        return Check(
            "versions",
            FAIL,
            f"{node}: torch does not import: {info.get('torch_error')}",
            "install torch in the job's interpreter (entrypoint.python)",
        )
    found = f"{node}: torch {info['torch']} (CUDA {info['cuda']}), deepspeed {info['deepspeed']}"
    problems = []
    if info["deepspeed"] is None and needs_deepspeed(ctx):
        problems.append(("deepspeed is not installed", "pip install deepspeed in the job's environment"))
    if w.accelerator == "cuda" and not info["cuda_available"]:
        problems.append(("torch sees no CUDA device", "use a CUDA build of torch on a GPU node"))
    elif w.accelerator == "cuda" and int(str(info["device_count"])) < w.gpus_per_node:
        problems.append(
            (
                f"torch sees {info['device_count']} GPU(s), the plan needs {w.gpus_per_node}",
                "fix CUDA_VISIBLE_DEVICES or world.gpus_per_node",
            )
        )
    if w.accelerator == "cpu" and not info.get("gloo"):
        problems.append(("torch has no gloo backend", "use a torch build with gloo"))
    if job.numa_binding != "none" and ctx.backend != "deepspeed" and not info.get("numa_binding"):
        problems.append(("this torchrun has no --numa-binding", "upgrade torch or set job.numa_binding to none"))
    if problems:
        return Check("versions", FAIL, f"{found}; " + "; ".join(p for p, _ in problems), problems[0][1])
    return Check("versions", OK, found + (f", NCCL {info['nccl']}" if info.get("nccl") else ""))


def check_versions(ctx: LaunchContext, command: Command) -> Check:
    node = f"node {command.node_rank}" if command.node_rank is not None else "this machine"
    probe = replace(command, argv=(ctx.python, "-c", VERSIONS))
    code, out = remote_run(probe, PROBE_TIMEOUT_S)
    try:
        info = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        if code != 0 and _no_working_dir(command, out):
            # the probe runs where the job does: a missing directory was blamed on the interpreter (QA 2026-12-07)
            return Check(
                "versions",
                FAIL,
                f"{node}: the job's working directory {command.cwd} does not exist",
                "fix entrypoint.working_dir (render.workdir: where the training code is on the nodes)",
            )
        return Check(
            "versions",
            FAIL,
            f"{node}: {ctx.python} failed (exit {code}): {out.strip()[-200:]}",
            "fix entrypoint.python",
        )
    return judge_versions(ctx, node, info)


def _no_working_dir(command: Command, out: str) -> bool:
    """Whether the command's working directory is what is missing: here by looking, on another node by the error
    (`cd` in the ssh command line, or the exec's)."""
    if is_local_command(command):
        return not os.path.isdir(command.cwd)
    # the shell's own `cd` failing (Command.shell): an interpreter missing under the directory says otherwise
    return f"cd: {command.cwd}: No such file or directory" in out or f"cd: {shlex.quote(command.cwd)}: No such" in out


def all_checks(ctx: LaunchContext) -> list[Check]:
    _, commands = build(ctx)
    checks = quick_checks(ctx, commands)
    remote = [c for c in commands if not is_local_command(c)]
    ssh = [check_ssh(c) for c in remote]
    checks += ssh
    unreachable = {c.host for c, s in zip(remote, ssh, strict=True) if s.status == FAIL}
    if ctx.backend == "slurm":
        checks.append(
            Check(
                "versions",
                WARN,
                "not checked: the job's nodes are chosen by Slurm",
                "run preflight inside the allocation (salloc) to check them",
            )
        )
    else:
        checks += [check_versions(ctx, c) for c in commands if c.host not in unreachable]
    checks += nccl_checks(ctx.plan.env, ctx.caller_env, ctx.plan.world.accelerator)
    checks.append(check_run_dir(ctx))
    return checks


def preflight(args: argparse.Namespace) -> int:
    ctx = context_from_args(args)
    checks = all_checks(ctx)
    print(checks_table(checks))
    counts = {s: sum(c.status == s for c in checks) for s in (OK, WARN, FAIL)}
    print(f"\n{counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} fail")
    return 1 if counts[FAIL] else 0
