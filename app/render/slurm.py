"""Slurm: the time limit in minutes, the graceful stop before it, CPUs and binding of the one task per node.

- `#SBATCH --signal=TERM@<s>` (sbatch(1) --signal): Slurm sends SIGTERM to the job steps `s` seconds before the
  time limit; torchrun forwards it to the ranks (its default --signals-to-handle) and waits
  TORCH_ELASTIC_SHUTDOWN_TIMEOUT for them; Megatron's --exit-signal-handler saves a checkpoint at the end of the
  current iteration and exits (megatron/training/training.py, checkpoint_and_decide_exit).
- `--exit-duration-in-mins`: Megatron also stops by itself before the limit (all ranks agree through an
  all-reduce of the elapsed time), so a lost signal does not lose the run.
- `srun --cpus-per-task`: one task per node runs torchrun and all its ranks; without it a site's default of one
  CPU per task pins the node's ranks and their data-loader workers to one core. `--cpu-bind=none` leaves
  placement to the ranks. `#SBATCH --mem=0`: all of each node's memory (offload, pinned buffers, page cache).
"""

from __future__ import annotations

import math
import re

from app.render.facts import Facts
from app.render.words import Line, Var

TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{2}))?(?::(\d{2}))?$")
STARTUP_S = 300  # launch, imports, NCCL init and the first checkpoint load before Megatron's clock starts


def time_limit_minutes(limit: str) -> float:
    """sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes,
    days-hours:minutes:seconds."""
    m = TIME.fullmatch(limit)
    if m is None:
        raise ValueError(f"slurm_time_limit: {limit!r} is not a Slurm time")
    days, first, second, third = m.groups()
    if days is not None:  # days-hours[:minutes[:seconds]]
        return int(days) * 1440 + int(first) * 60 + int(second or 0) + int(third or 0) / 60
    if third is not None:  # hours:minutes:seconds
        return int(first) * 60 + int(second) + int(third) / 60
    if second is not None:  # minutes:seconds
        return int(first) + int(second) / 60
    return float(first)


def signal_seconds(f: Facts) -> int:
    """How long before the time limit the job is told to stop: the plan's graceful-stop margin."""
    return f.decisions.graceful_stop_s


def exit_duration_minutes(f: Facts) -> int | None:
    """--exit-duration-in-mins: the time limit less startup and the graceful-stop margin (None without a limit)."""
    limit = f.options.slurm_time_limit
    if limit is None:
        return None
    minutes = time_limit_minutes(limit) - (STARTUP_S + signal_seconds(f)) / 60
    if minutes < 1:
        raise ValueError(
            f"slurm_time_limit: {limit} leaves no training time after the {STARTUP_S} s start-up and "
            f"the {signal_seconds(f)} s needed to save and stop"
        )
    return math.floor(minutes)


def srun_cpu_words(f: Facts) -> Line:
    """srun's CPUs for the one task per node (CPUS_PER_NODE: the option, or SLURM_CPUS_ON_NODE in the script)."""
    return ("--cpus-per-task", Var("CPUS_PER_NODE"), "--cpu-bind=none")
