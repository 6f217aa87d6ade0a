"""Resume never trains a step twice or skips data: a run killed after a checkpoint and restarted by torchrun has
the same loss and learning rate at every step as a run that was never interrupted. The data position (the step,
samples consumed) and the LR schedule (warm-up, cosine decay) come back with the checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, free_port, launcher_env, processes_mentioning, wait_for, write_plan
from make_plan import tiny_plan

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
STEPS, SAVE = 16, 5
SCHEDULE = ("--lr-decay-style", "cosine", "--lr-warmup-iters", "3", "--min-lr", "3e-4", "--save-interval", str(SAVE))


def launch(tmp_path: Path, name: str, restarts: int, throttle: float) -> tuple[subprocess.Popen[bytes], Path]:
    extra = (*SCHEDULE, "--throttle-s", str(throttle), "--metrics-dir", "{run_dir}/metrics")
    plan = tiny_plan(name, steps=STEPS, max_restarts=restarts, master_port=free_port(), extra_args=extra)
    run_dir = tmp_path / name
    with open(tmp_path / f"{name}.txt", "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "launcher",
                "run",
                str(write_plan(tmp_path, plan, f"{name}.json")),
                "--run-dir",
                str(run_dir),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=launcher_env(),
        )
    return proc, run_dir


def step_of(run_dir: Path) -> int:
    try:
        beat = json.loads((run_dir / "heartbeats" / "rank0.json").read_text())
    except (OSError, ValueError):
        return -1
    return int(beat["step"]) if beat["phase"] == "train" else -1


def curve(run_dir: Path) -> dict[int, tuple[float, float]]:
    """step -> (loss, lr) of the attempt that finished (rank 0's metrics)."""
    doc = json.loads((run_dir / "metrics" / "rank0.json").read_text())
    return {s["step"]: (s["loss"], s["lr"]) for s in doc["steps"]}


def test_an_interrupted_run_continues_the_loss_curve_of_an_uninterrupted_one(tmp_path: Path) -> None:
    whole, whole_dir = launch(tmp_path, "whole", restarts=0, throttle=0.0)
    assert whole.wait(timeout=180) == 0, (tmp_path / "whole.txt").read_text()[-3000:]
    expected = curve(whole_dir)
    assert sorted(expected) == list(range(1, STEPS + 1))

    cut, cut_dir = launch(tmp_path, "cut", restarts=1, throttle=0.1)
    wait_for(lambda: step_of(cut_dir) >= 8, 120, "step 8")
    workers = (cut_dir / "workers.node0.json").read_text()
    pid = int(workers.split('"rank": 1')[0].rsplit('"pid": ', 1)[1].split(",")[0])
    os.kill(pid, signal.SIGKILL)  # after step 8; the last checkpoint is step 5
    assert cut.wait(timeout=180) == 0, (tmp_path / "cut.txt").read_text()[-3000:]
    resumed = curve(cut_dir)
    assert min(resumed) == SAVE + 1 and max(resumed) == STEPS  # from the checkpoint's step on, none skipped
    for step, (loss, lr) in resumed.items():  # bit for bit: the same data, weights, optimizer and LR state
        assert (loss, lr) == expected[step], (step, loss, lr, expected[step])
    lrs = [expected[s][1] for s in sorted(expected)]
    assert lrs[0] == 0.0 and max(lrs) == pytest.approx(3e-3) and lrs[-1] < lrs[4]  # warm-up, then decay
    log = (cut_dir / "launcher.log").read_text()
    assert "resumed from step 5" in log and "training again" in log
    assert not processes_mentioning(str(tmp_path))
