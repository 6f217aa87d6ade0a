"""examples/train_gpt.py under signals at awkward moments, with real processes and real signals (gloo, CPU).

The ranks are started directly (RANK, WORLD_SIZE, MASTER_ADDR/PORT, as torchrun sets them), without an agent, so
that the signal reaches exactly the rank and the moment the test picks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, free_port

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SCRIPT = ROOT / "examples" / "train_gpt.py"
MODEL = ("--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16")
ARGS = (*MODEL, "--vocab-size", "64", "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "3")


def start_ranks(tmp_path: Path, world: int, *extra: str) -> list[subprocess.Popen[str]]:
    port = free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "DS_ACCELERATOR": "cpu",
            "OMP_NUM_THREADS": "1",
            "TRAINPLAN_RUN_DIR": str(tmp_path / "run"),
        }
        argv = [sys.executable, str(SCRIPT), *ARGS, "--save", str(tmp_path / "ckpt"), "--load", str(tmp_path / "ckpt")]
        procs.append(
            subprocess.Popen(
                [*argv, *extra],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def importing_torch(pid: int) -> bool:
    """The process has mapped torch's shared library: it is inside `import torch` (1-2 s on this machine), or past
    it. Checked by /proc/<pid>/maps, which says nothing about signal handlers."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_a_sigterm_during_the_imports_stops_every_rank_cleanly_before_training(tmp_path: Path) -> None:
    """QA 2026-12-07: the example trainer installed its SIGTERM handler after `import torch` and its other imports
    (main(), after parse_args): a SIGTERM in those 1-2 s killed the rank (status -15) and left its peer waiting in the
    process group's start. Now the handler is the script's first statement; the ranks agree on the signal as soon as
    the process group exists and all exit 0, with no step trained and nothing saved (no checkpoint existed: the next
    run starts from step 0)."""
    ranks = start_ranks(tmp_path, 2)
    try:
        deadline = time.monotonic() + 30
        while not importing_torch(ranks[1].pid):
            assert ranks[1].poll() is None and time.monotonic() < deadline, "rank 1 never imported torch"
            time.sleep(0.005)
        ranks[1].send_signal(signal.SIGTERM)  # rank 1 alone, as an operator's kill or a node-health daemon does
        # it died of the signal (-15) before, and rank 0 waited for it in the process group's start
        assert ranks[1].wait(timeout=60) == 0, ranks[1].communicate()[0][-3000:]
        assert ranks[0].wait(timeout=30) == 0, ranks[0].communicate()[0][-3000:]
        out = ranks[0].communicate()[0]
    finally:
        for r in ranks:
            if r.poll() is None:
                r.kill()
                r.wait()
    assert "stopping before training: a rank received a termination signal during start-up" in out, out[-3000:]
    assert "no checkpoint exists yet: the next run starts from step 0" in out
    assert " step 1/3 " not in out and not (tmp_path / "ckpt" / "latest").exists()
    beat = json.loads((tmp_path / "run" / "heartbeats" / "rank1.json").read_text())
    assert (beat["phase"], beat["step"], beat["pid"]) == ("done", 0, ranks[1].pid)
