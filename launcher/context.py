"""Everything a backend needs besides the plan: where it lives, the run directory, which node, the caller.

The environment of every command is built here, explicitly: a few PATH-like basics from the caller, the
plan's `env`, and what the launcher itself sets (documented in docs/launcher.md). Nothing else is passed.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from launcher.spec import PLACEHOLDER, PLACEHOLDERS, Plan, PlanError

BASIC_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES",
)


@dataclass(frozen=True)
class LaunchContext:
    """The plan with where it runs: its directory, the run directory, the backend, the node and the caller."""

    plan: Plan
    plan_dir: Path
    run_dir: Path
    backend: str
    node_rank: int | None = None  # None: this launcher starts every node (over ssh where remote)
    extra_args: tuple[str, ...] = ()
    caller_env: dict[str, str] = field(default_factory=dict)
    run_dir_named: bool = True  # found again by the same command (--run-dir, job.run_dir); False: a directory of
    # this run's own (runs/<name>-<time>, or a Slurm job's runs/<name>-slurm<id>)
    slurm_job: str | None = None  # the Slurm job whose default directory this is (a requeue keeps the id)

    def __post_init__(self) -> None:
        n = self.plan.world.num_nodes
        if self.node_rank is not None and not 0 <= self.node_rank < n:
            raise PlanError(f"--node-rank {self.node_rank} is out of range for world.num_nodes({n})")

    def nodes(self) -> list[int]:
        return list(range(self.plan.world.num_nodes)) if self.node_rank is None else [self.node_rank]

    @property
    def suffix(self) -> str:
        """Names this launcher's own files in a run directory that per-node launchers may share."""
        return "" if self.node_rank is None else f".node{self.node_rank}"

    @property
    def resume_hint(self) -> str:
        """How to go on from this run's last checkpoint: a run directory of its own (runs/<name>-<time>) is not
        found again by the same command, which starts a new one from step 0 (QA, 2026-12-07)."""
        if self.run_dir_named:
            return "run the same command to go on from its last checkpoint"
        if self.slurm_job is not None:  # a requeue keeps the job id; a new sbatch gets another and another directory
            return (
                f"a requeue of Slurm job {self.slurm_job} goes on from its last checkpoint with the same command; "
                f"a new sbatch needs --run-dir {self.run_dir} (without it, a new run directory starts from step 0)"
            )
        return (
            f"run the same command with --run-dir {self.run_dir} to go on from its last checkpoint (without it, a "
            f"new run directory starts from step 0)"
        )

    @property
    def python(self) -> str:
        return self.plan.entrypoint.python or sys.executable

    @property
    def script(self) -> str:
        return str(self.plan_dir / self.plan.entrypoint.script)  # an absolute script stays as it is

    @property
    def working_dir(self) -> str:
        wd = self.plan.entrypoint.working_dir
        # a per-node launcher (--node-rank K) knows its node: {node_rank} there was refused as unknown (QA)
        return str(self.plan_dir / self.substitute(wd, self.node_rank)) if wd else str(self.plan_dir)

    @property
    def in_slurm(self) -> bool:
        return "SLURM_JOB_ID" in self.caller_env and "SLURM_JOB_NODELIST" in self.caller_env

    def host(self, node_rank: int) -> str:
        hosts = self.plan.world.hosts
        return hosts[node_rank] if hosts else "localhost"

    def node_log_dir(self, node_rank: int | None) -> Path:
        return self.run_dir / "logs" / ("all" if node_rank is None else f"node{node_rank}")

    def values(self, node_rank: int | None) -> dict[str, str]:
        w = self.plan.world
        out = {
            "run_dir": str(self.run_dir),
            "plan_dir": str(self.plan_dir),
            "num_nodes": str(w.num_nodes),
            "gpus_per_node": str(w.gpus_per_node),
            "master_addr": w.master_addr,
            "master_port": str(w.master_port),
        }
        if node_rank is not None:
            out["node_rank"] = str(node_rank)
        return out

    def substitute(self, text: str, node_rank: int | None) -> str:
        values = self.values(node_rank)

        def one(match: object) -> str:
            name = match.group(1)  # type: ignore[attr-defined]
            if name not in values:
                assert name in PLACEHOLDERS  # spec.py refuses unknown ones
                raise PlanError(f"{{{name}}} is not known when one command starts every node ({self.backend})")
            return values[name]

        return PLACEHOLDER.sub(one, text)

    def script_argv(self, node_rank: int | None) -> list[str]:
        args = [self.substitute(a, node_rank) for a in self.plan.entrypoint.args]
        return [self.script, *args, *self.extra_args]

    def worker_env(self, node_rank: int | None, extra_prefixes: tuple[str, ...] = ()) -> dict[str, str]:
        """The exact environment of a command: basics from the caller, the plan's env, the launcher's own."""
        env = {k: v for k, v in self.caller_env.items() if k in BASIC_ENV or k.startswith(extra_prefixes)}
        if self.plan.job.omp_num_threads is not None:
            env["OMP_NUM_THREADS"] = str(self.plan.job.omp_num_threads)
        env["PYTHONUNBUFFERED"] = "1"  # rank-0 output reaches the console live
        env.update({k: self.substitute(v, node_rank) for k, v in self.plan.env.items()})
        env["TRAINPLAN_RUN_DIR"] = str(self.run_dir)
        return env


class WorkingDirError(Exception):
    """The launcher's working directory is gone: nothing relative to it can be found (refused, exit 2)."""


def slurm_job_id(env: dict[str, str]) -> str | None:
    """SLURM_JOB_ID where it names a job (an array task's id is <job>_<task>): the default run directory is then
    the job's own, found again by the same command when the job is requeued."""
    job_id = env.get("SLURM_JOB_ID", "")
    return job_id if job_id.isdigit() or job_id.replace("_", "").isdigit() else None


def working_directory() -> Path:
    """The launcher's working directory, from which relative paths and the default ./runs are read; refused (exit 2)
    where it has been deleted: os.getcwd() raised FileNotFoundError and the launcher printed a traceback
    (QA 2026-12-07)."""
    try:
        return Path.cwd()
    except OSError as exc:
        raise WorkingDirError(
            f"the working directory cannot be read ({exc.strerror}: it was deleted or moved?): cd to an existing "
            f"directory, or give the plan and --run-dir as absolute paths"
        ) from None


def absolute(path: str | Path) -> Path:
    """`path` made absolute and resolved: a relative one against the working directory (read only then)."""
    given = Path(path)
    return (given if given.is_absolute() else working_directory() / given).resolve()


def default_run_dir(
    plan: Plan, plan_dir: Path, cwd: Path, now: float | None = None, env: dict[str, str] | None = None
) -> Path:
    """job.run_dir (relative to the plan's directory); else, inside a Slurm job, ./runs/<name>-slurm<SLURM_JOB_ID>,
    which the job finds again when it is requeued after a preemption and resumes from (a timestamped directory
    started it from step 0 again: QA, 2026-12-07); else ./runs/<name>-<YYYYmmdd-HHMMSS>."""
    if plan.job.run_dir:
        return (plan_dir / plan.job.run_dir).resolve()
    job_id = slurm_job_id(env or {})
    if job_id:
        return cwd.resolve() / "runs" / f"{plan.job.name}-slurm{job_id}"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = cwd.resolve() / "runs" / f"{plan.job.name}-{stamp}"
    candidate, n = base, 1
    while candidate.exists():  # two runs in the same second get their own directories
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def make_context(
    plan: Plan,
    plan_path: str | Path,
    *,
    node_rank: int | None = None,
    run_dir: str | None = None,
    backend: str | None = None,
    extra_args: tuple[str, ...] = (),
    caller_env: dict[str, str] | None = None,
) -> LaunchContext:
    plan_dir = absolute(plan_path).parent
    env = dict(os.environ if caller_env is None else caller_env)
    if run_dir:
        resolved = absolute(run_dir)
    elif plan.job.run_dir:  # relative to the plan's directory: the working directory is not needed
        resolved = default_run_dir(plan, plan_dir, plan_dir, env=env)
    else:
        resolved = default_run_dir(plan, plan_dir, working_directory(), env=env)
    return LaunchContext(
        plan=plan,
        plan_dir=plan_dir,
        run_dir=resolved,
        backend=backend or plan.job.backend,
        node_rank=node_rank,
        extra_args=tuple(extra_args),
        caller_env=env,
        run_dir_named=bool(run_dir or plan.job.run_dir),
        # a Slurm job's default directory is found again by a requeue of the job, not by a new sbatch (QA
        # 2026-12-07: the hint said neither)
        slurm_job=None if run_dir or plan.job.run_dir else slurm_job_id(env),
    )
