"""Stack traces of the ranks of a hung job, taken before it is torn down.

py-spy (`py-spy dump --pid P`) when it is on PATH; otherwise SIGUSR1 to the ranks whose heartbeat says that
faulthandler listens for it (examples/train_gpt.py registers faulthandler.register(SIGUSR1) writing to
<run_dir>/stacks/rank<R>.txt). A stopped rank (SIGSTOP) gets SIGCONT after SIGUSR1, so that the handler runs.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

from launcher import procs

PY_SPY_TIMEOUT_S = 10.0
SIGNAL_WAIT_S = 3.0
SETTLE_S = 0.25  # a dump no longer growing for this long is complete (faulthandler writes it in one go)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def collect(ranks: list[tuple[int, int, str | None]], run_dir: Path) -> str:
    """Dump the stacks of (rank, pid, heartbeat's `stacks`) and say where they are."""
    out = run_dir / "stacks"
    py_spy = shutil.which("py-spy")
    if py_spy:
        return _py_spy(py_spy, ranks, out)
    asked = [(rank, pid) for rank, pid, how in ranks if how == "SIGUSR1"]
    if not asked:
        return "no stack traces: py-spy is not on PATH and no rank listens for SIGUSR1"
    before = {rank: _size(out / f"rank{rank}.txt") for rank, _ in asked}
    for _, pid in asked:
        stopped = procs.state(pid) == "T"
        procs.signal_pids([pid], signal.SIGUSR1)
        if stopped:
            procs.signal_pids([pid], signal.SIGCONT)
    # wait until every file has grown and then stopped growing for SETTLE_S: the ranks are SIGKILLed next, and a
    # dump read at its first bytes was cut mid-line (2 of 5 hangs, the waiting peer's; QA, 2026-12-07)
    deadline = time.monotonic() + SIGNAL_WAIT_S
    sizes, settled_at = dict(before), time.monotonic()
    while time.monotonic() < deadline:
        now = {r: _size(out / f"rank{r}.txt") for r, _ in asked}
        if now != sizes:
            sizes, settled_at = now, time.monotonic()
        elif all(now[r] > before[r] for r in now) and time.monotonic() - settled_at >= SETTLE_S:
            break
        time.sleep(0.02)
    done = sorted(r for r, _ in asked if _size(out / f"rank{r}.txt") > before[r])
    if not done:
        return f"no stack traces: SIGUSR1 sent to rank(s) {[r for r, _ in asked]}, nothing written to {out}"
    return f"stack traces (faulthandler) of rank(s) {', '.join(map(str, done))} in {out}/rank<R>.txt"


def _py_spy(py_spy: str, ranks: list[tuple[int, int, str | None]], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for rank, pid, _ in ranks:
        try:
            done = subprocess.run(
                [py_spy, "dump", "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=PY_SPY_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
            (out / f"rank{rank}.py-spy.txt").write_text(done.stdout + done.stderr)
            written.append(rank)
        except (OSError, subprocess.TimeoutExpired):
            continue
    return f"stack traces (py-spy) of rank(s) {', '.join(map(str, written))} in {out}/rank<R>.py-spy.txt"
