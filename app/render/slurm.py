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

from app.render.facts import Facts
from app.render.options import time_limit_minutes
from app.render.words import Line, Var

SIGNAL_MAX_S = 0xFFFF
STARTUP_S = 300  # launch, imports, NCCL init and the first checkpoint load before Megatron's clock starts


def signal_seconds(f: Facts) -> int:
    """How long before the time limit the job is told to stop: the plan's graceful-stop margin, at most the 65535 s
    sbatch takes (SchedMD/slurm src/common/proc_args.c get_signal_opts: "Invalid --signal specification" above
    0xffff). A longer margin still stops the run in time through --exit-duration-in-mins, which keeps all of it."""
    return min(f.decisions.graceful_stop_s, SIGNAL_MAX_S)


def exit_duration_minutes(f: Facts) -> int | None:
    """--exit-duration-in-mins: the time limit less startup and the graceful-stop margin (None without a limit)."""
    limit = f.options.slurm_time_limit
    if limit is None:
        return None
    margin = f.decisions.graceful_stop_s
    minutes = time_limit_minutes(limit) - (STARTUP_S + margin) / 60
    if minutes < 1:
        raise ValueError(
            f"slurm_time_limit: {limit} leaves no training time after the {STARTUP_S} s start-up and "
            f"the {margin} s needed to save and stop"
        )
    return math.floor(minutes)


def srun_cpu_words(f: Facts) -> Line:
    """srun's CPUs for the one task per node (CPUS_PER_NODE: the option, or SLURM_CPUS_ON_NODE in the script)."""
    return ("--cpus-per-task", Var("CPUS_PER_NODE"), "--cpu-bind=none")
