"""The watchdog on a trainer that writes no heartbeat: Megatron-LM's training log line, read from the per-rank
log torchrun writes, is the progress; the step timeout counts --log-interval steps per line."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, launcher_env, processes_mentioning, write_plan
from make_plan import tiny_plan

from launcher import procs
from launcher.logprogress import LogProgress
from launcher.spec import Entrypoint, Prediction, Watchdog

HERE = Path(__file__).resolve().parent


def test_the_log_line_becomes_a_heartbeat_only_when_complete(tmp_path: Path) -> None:
    log = tmp_path / "run-id_x" / "attempt_0" / "1" / "stdout.log"
    log.parent.mkdir(parents=True)
    worker = procs.Worker(pid=123, rank=7, local_rank=1, start_ticks=0)
    progress = LogProgress(tmp_path)
    assert progress.beat(worker) is None
    log.write_bytes(
        b"building model\n [2026] iteration       20/    5000 | consumed samples:  160 | elapsed time per "
        b"iteration (ms): 1234.5 | lm loss: 9.9 |\n [2026] iteration       40/    5000 | consu"
    )
    beat = progress.beat(worker)
    assert beat is not None and (beat.rank, beat.pid, beat.step, beat.step_s, beat.phase) == (
        7,
        123,
        20,
        1.2345,
        "train",
    )
    with open(log, "ab") as f:
        f.write(b"med samples: 320 | elapsed time per iteration (ms): 1000.0 |\n")
    beat = progress.beat(worker)
    assert beat is not None and (beat.step, beat.step_s) == (40, 1.0)


def run_fake_megatron(
    tmp_path: Path, args: tuple[str, ...], prediction: Prediction, floor_s: float
) -> tuple[subprocess.CompletedProcess[str], str]:
    """`python -m launcher run` of a plan whose entrypoint is fake_megatron.py with `args` (tagged with tmp_path, so
    that what it leaves behind can be found): the finished process and the launcher.log it wrote."""
    plan = replace(
        tiny_plan("fake-megatron"),
        entrypoint=Entrypoint(script=str(HERE / "fake_megatron.py"), args=(*args, str(tmp_path))),
        prediction=prediction,
        watchdog=Watchdog(floor_s=floor_s),
    )
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "run", str(write_plan(tmp_path, plan)), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=launcher_env(),
        timeout=100,
    )
    return done, (run_dir / "launcher.log").read_text()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_megatron_style_job_that_stops_logging_is_a_hang(tmp_path: Path) -> None:
    args = ("--train-iters", "100", "--log-interval", "2", "--step-s", "0.05", "--hang-at", "9")
    done, log = run_fake_megatron(tmp_path, args, Prediction(step_s=0.05, step_s_high=0.1), floor_s=2.0)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    hangs = [line for line in log.splitlines() if line.split(" ", 2)[2].startswith("hang: ")]
    assert len(hangs) == 1, log  # the ranks it killed were taken for a second hang right after (QA, 2026-12-06)
    assert "SIGUSR1 sent" not in log and "killed rank(s)  " not in log, log
    hang = hangs[0]
    assert "rank 1 (pid" in hang and "last completed step 8 (from its log)" in hang
    assert "timeout 2.4 s = 2 x 0.1 s predicted step upper bound x 2 steps per log line + 2 s floor" in hang
    # rank 0 may have ended on its own under a loaded machine before the kill (it read "killed rank(s) 0, 1"
    # except in one CI run of 2026-12-07): the hung rank 1 is the one it must kill
    assert re.search(r"watchdog killed rank\(s\) (0, )?1 \(no restart left: the job ends\)", log), log
    assert "job failed: exit code 1" in log
    assert not processes_mentioning(str(tmp_path))


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("train_iters", "exit_interval", "code"), [(40, 12, 75), (13, 0, 0)])
def test_a_job_whose_ranks_exit_0_short_of_train_iters_stopped_early(
    tmp_path: Path, train_iters: int, exit_interval: int, code: int
) -> None:
    """Megatron's --exit-interval (as --exit-duration-in-mins and a SIGTERM to the ranks) ends every rank with exit
    code 0 before --train-iters: its last log line (iteration 10, every 5) is 14 steps at most, short of 40, so the
    job stopped early (75), not finished. 13 iterations logged every 5 end at 13 with a last line at 10: finished."""
    # 0.15 s steps: the ranks live ~2 s, long enough for the launcher's /proc scan to see them on a loaded CI core
    # (at 0.02 s they exited in 0.24 s, unseen once, and a run whose ranks were never seen has no step to compare)
    args = ("--train-iters", str(train_iters), "--log-interval", "5", "--step-s", "0.15")
    args += ("--exit-interval", str(exit_interval))
    done, log = run_fake_megatron(tmp_path, args, Prediction(step_s=0.02, step_s_high=0.5), floor_s=5.0)
    assert done.returncode == code, log
    if code:
        assert (
            "job stopped early: exit code 75 after " in log
            and f"every rank exited 0 at its last logged step 10 of --train-iters {train_iters}" in log
        ), log
    else:
        assert "job finished: exit code 0" in log and "stopped early" not in log
        assert "no rank reported a training step" not in log  # its log lines reported step 10
    assert not processes_mentioning(str(tmp_path))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_job_that_reports_no_step_finishes_saying_so(tmp_path: Path) -> None:
    """Ranks that exit 0 after --train-iters 3 without a log line (--log-interval 100) or a heartbeat: exit 0, and
    the summary says that no rank reported a step, so how far it trained is not known (it read "job finished"
    alone, as a completed training)."""
    args = ("--train-iters", "3", "--log-interval", "100", "--step-s", "0.15")
    done, log = run_fake_megatron(tmp_path, args, Prediction(step_s=0.15, step_s_high=0.5), floor_s=5.0)
    assert done.returncode == 0, log
    assert "job finished: exit code 0 after " in log and "no rank reported a training step" in log, log
    assert not processes_mentioning(str(tmp_path))
