"""End to end on CPU: `python -m launcher run plan.json` trains the example GPT through torchrun and through
the deepspeed runner; a killed worker stops the job; the slurm backend inside an allocation. Restarts from a
checkpoint, signals to the launcher and the deepspeed backend's exit codes are rows of the fault matrix
(tests/launcher/test_fault_matrix.py); an exact resume is tests/launcher/test_resume.py. Real processes and
signals throughout."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, free_port, launcher_env, live_workers, losses, processes_mentioning, wait_for, write_plan
from make_plan import tiny_plan

from launcher.spec import Prediction, Watchdog

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def start(plan_path: Path, run_dir: Path, out: Path) -> subprocess.Popen[bytes]:
    with open(out, "wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "launcher", "run", str(plan_path), "--run-dir", str(run_dir)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=launcher_env(),
        )


def wait_for_step(out: Path, step: int) -> None:
    wait_for(lambda: f"step {step}/" in out.read_text(errors="replace"), 90, f"training step {step}")


def assert_nothing_left(tmp_path: Path) -> None:
    left = processes_mentioning(str(tmp_path))
    assert not left, f"processes left behind: {left}"


@pytest.mark.parametrize("backend", ["torchrun", "deepspeed"])
def test_two_processes_train_and_the_loss_goes_down(tmp_path: Path, backend: str) -> None:
    plan = write_plan(tmp_path, tiny_plan(backend=backend, procs=2, steps=6, master_port=free_port()))
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "run", str(plan), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=launcher_env(),
        timeout=140,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    values = losses(done.stdout)  # rank 0's output reaches the console live
    assert len(values) == 6 and values[-1] < values[0]
    for name in ("plan.json", "commands.json", "launcher.log", "ds_config.json", "megatron_args.txt"):
        assert (run_dir / name).is_file(), name
    if backend == "torchrun":
        rank_logs = sorted(run_dir.glob("logs/node0/*/attempt_0/*/stdout.log"))
    else:
        rank_logs = sorted(run_dir.glob("logs/node0/ranks/*_rank*.log"))
    assert len(rank_logs) == 2 and all("step 6/6" in p.read_text() for p in rank_logs[:1])
    assert "job finished: exit code 0" in (run_dir / "launcher.log").read_text()
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize("backend", ["torchrun"])  # deepspeed: tests/launcher/test_fault_matrix.py (exit 137)
def test_killed_worker_stops_the_job_and_is_named(tmp_path: Path, backend: str) -> None:
    plan = tiny_plan(backend=backend, steps=400, extra_args=("--throttle-s", "0.05"), master_port=free_port())
    run_dir, out = tmp_path / "run", tmp_path / "out.txt"
    proc = start(write_plan(tmp_path, plan), run_dir, out)
    wait_for_step(out, 2)
    victim = next(w for w in wait_for(lambda: live_workers(run_dir), 30, "workers") if w["rank"] == 1)
    os.kill(int(victim["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    code = proc.wait(timeout=60)
    assert code != 0
    log = (run_dir / "launcher.log").read_text()
    # the launcher reads the status itself, or (when torchrun reaps the rank first) names it from the order of deaths
    # and torchrun's report gives the signal; never the rank torchrun stopped afterwards
    named = f"died first: rank 1 (local_rank 1, pid {victim['pid']}, node 0) "
    assert named + "killed by signal 9 (SIGKILL)" in log or (
        named + "exited (status already collected by its parent) before its training was done" in log
        and "Signal 9 (SIGKILL) received by PID " + str(victim["pid"]) in log
    ), log
    assert "died first: rank 0" not in log
    assert "job failed" in log and "step 400/" not in out.read_text()
    assert_nothing_left(tmp_path)


def test_slurm_backend_inside_an_allocation(tmp_path: Path) -> None:
    """srun is a stand-in that runs its command here (no Slurm on CI); the rest is the real path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        "#!/bin/sh\n"
        "[ -n \"$SLURM_JOB_ID\" ] || { echo 'srun: no SLURM_JOB_ID' >&2; exit 1; }\n"
        'while [ $# -gt 0 ]; do case "$1" in --*=*) shift ;; --*) shift 2 ;; *) break ;; esac; done\n'
        'exec "$@"\n'
    )
    (bin_dir / "srun").chmod(0o755)
    env = launcher_env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        SLURM_JOB_ID="4242",
        SLURM_JOB_NODELIST="localhost",
        SLURM_NNODES="1",
    )
    plan, run_dir = write_plan(tmp_path, tiny_plan(backend="slurm", steps=4)), tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "run", str(plan), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=140,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(losses(done.stdout)) == 4
    commands = (run_dir / "commands.json").read_text()
    assert '"srun"' in commands and '"SLURM_JOB_ID": "4242"' in commands
    assert_nothing_left(tmp_path)


def test_a_sigterm_to_one_rank_stops_the_job_early_not_successfully(tmp_path: Path) -> None:
    """A SIGTERM sent to rank 1 alone (an operator's kill, a node-health daemon, Slurm's --signal without B:): the
    example trainer, as Megatron's --exit-signal-handler, saves after the step it is in and every rank exits 0. The
    job trained some of its 400 steps: it stopped early (75), it did not finish (it said "exit code 0", QA)."""
    plan = tiny_plan(steps=400, extra_args=("--throttle-s", "0.05"), master_port=free_port())
    run_dir, out = tmp_path / "run", tmp_path / "out.txt"
    proc = start(write_plan(tmp_path, plan), run_dir, out)
    wait_for_step(out, 2)
    victim = next(w for w in wait_for(lambda: live_workers(run_dir), 30, "workers") if w["rank"] == 1)
    os.kill(int(victim["pid"]), signal.SIGTERM)  # type: ignore[call-overload]
    assert proc.wait(timeout=60) == 75
    log = (run_dir / "launcher.log").read_text()
    assert "job stopped early: exit code 75 after " in log and " of --train-iters 400, and no stop was asked" in log
    assert "job finished" not in log and "step 400/" not in out.read_text()
    assert_nothing_left(tmp_path)


def test_the_failure_summary_cites_the_hang_that_ended_the_job(tmp_path: Path) -> None:
    """Rank 1 stalls 6 s in each step after its first: the watchdog kills the group (hang 1), torchrun restarts it
    once, and the second hang ends the job. The summary names the second group's pids, which torchrun's report names
    too; it cited the first hang's pids, restarted fine long before (QA L4). (A rank slow from its first step on is
    a straggler: the first step bounds the next, test_watchdog.py.)"""
    slow = ("--inject-slow-rank", "1", "--inject-slow-s", "6", "--inject-slow-skip", "1")
    plan = tiny_plan(
        steps=400,
        max_restarts=1,
        extra_args=("--throttle-s", "0.05", *slow),
        master_port=free_port(),
    )
    plan = replace(plan, prediction=Prediction(step_s=0.05, step_s_high=0.1), watchdog=Watchdog(floor_s=2.0))
    run_dir, out = tmp_path / "run", tmp_path / "out.txt"
    proc = start(write_plan(tmp_path, plan), run_dir, out)
    assert proc.wait(timeout=120) == 1
    log = (run_dir / "launcher.log").read_text()
    hangs = [line.split(" ", 2)[2] for line in log.splitlines() if line.split(" ", 2)[2].startswith("hang: ")]
    assert len(hangs) == 2, log
    summary = next(line for line in log.splitlines() if "job failed: exit code 1" in line)
    first_pids, last_pids = (set(re.findall(r"pid (\d+)", h)) for h in hangs)
    assert first_pids.isdisjoint(last_pids)
    cited = set(re.findall(r"pid (\d+)", summary))
    assert last_pids & cited and not first_pids & cited, summary
    assert_nothing_left(tmp_path)


def test_under_deepspeed_a_stop_shows_the_last_save_on_the_console(tmp_path: Path) -> None:
    """SIGTERM to the launcher under the deepspeed backend: DeepSpeed's runner dies of it at once while its ranks
    save after their step and exit within the grace period. The console and launcher.log follow them to the end:
    the last save they show is the one `latest` names (they stopped at the save before, QA L2)."""
    plan = tiny_plan(backend="deepspeed", steps=400, extra_args=("--throttle-s", "0.05"), master_port=free_port())
    run_dir, out = tmp_path / "run", tmp_path / "out.txt"
    proc = start(write_plan(tmp_path, plan), run_dir, out)
    wait_for_step(out, 3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    saves = re.findall(r"saved checkpoint (\S+) in", out.read_text())
    assert saves and saves[-1] == latest, (saves, latest)
    log = (run_dir / "launcher.log").read_text()
    assert "exited: rank 0 " in log and "exited: rank 1 " in log, log
    # a stop asked of the launcher is no failure, and it says how to go on (it said "job failed", QA 2026-12-07)
    assert "job stopped: exit code 143 after " in log and "stopped by SIGTERM; run the same command to go on" in log
    assert "job failed" not in log
    assert_nothing_left(tmp_path)
