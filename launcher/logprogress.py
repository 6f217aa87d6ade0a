"""Progress read from the per-rank logs the launcher already captures, for trainers that write no heartbeat.

Megatron-LM's training log line, ` iteration {:8d}/{:8d} | consumed samples: ... | elapsed time per iteration
(ms): {:.1f} | ...` (megatron/training/training.py, training_log), printed every --log-interval iterations by the
last pipeline rank only (print_rank_last). On the node that holds that rank, its log gives the watchdog the job's
progress; the step timeout then counts --log-interval steps per line (launcher/watchdog.py). Logs:
torchrun's `<node log dir>/<run id>_*/attempt_<n>/<local rank>/stdout.log`, deepspeed's
`<node log dir>/ranks/<time>_rank<R>.log`. Only new bytes are read, from the newest file of each local rank.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path

from launcher import procs
from launcher.heartbeat import Beat

ITERATION = re.compile(rb"\biteration\s+(\d+)/\s*\d+\s*\|(?:[^\n]*?elapsed time per iteration \(ms\):\s*([\d.]+))?")
TAIL_BYTES = 1 << 16  # what is kept of a line that is still being written


@dataclass
class Followed:
    path: str
    offset: int = 0
    step: int = 0
    step_s: float | None = None
    pending: bytes = b""


class LogProgress:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.followed: dict[int, Followed] = {}  # by local rank

    def _newest(self, worker: procs.Worker) -> str | None:
        patterns = (
            f"{self.log_dir}/*/attempt_*/{worker.local_rank}/stdout.log",
            f"{self.log_dir}/ranks/*_rank{worker.rank}.log",
        )
        found = [p for pattern in patterns for p in glob.glob(pattern)]
        return max(found, key=os.path.getmtime) if found else None

    def beat(self, worker: procs.Worker) -> Beat | None:
        """A heartbeat made of the rank's newest training log line (None: it printed none yet)."""
        path = self._newest(worker)
        if path is None:
            return None
        followed = self.followed.get(worker.local_rank)
        if followed is None or followed.path != path:
            followed = self.followed[worker.local_rank] = Followed(path)
        try:
            with open(path, "rb") as f:
                f.seek(followed.offset)
                data = f.read()
        except OSError:
            return None
        followed.offset += len(data)
        text = (followed.pending + data)[-TAIL_BYTES:]
        complete, _, followed.pending = text.rpartition(b"\n")
        for match in ITERATION.finditer(complete):
            followed.step = int(match[1])
            followed.step_s = float(match[2]) / 1000 if match[2] else followed.step_s
        if not followed.step:
            return None
        return Beat(
            rank=worker.rank,
            pid=worker.pid,
            seq=followed.step,
            phase="train",
            step=followed.step,
            step_s=followed.step_s,
        )
