"""The runner with real processes (a torch-free stand-in for torchrun): exit codes, the first failed rank,
signals forwarded with a grace period then SIGKILL, nothing left behind, restarts."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import launcher_env, processes_mentioning, wait_for

from launcher.command import Command
from launcher.events import EventLog
from launcher.heartbeat import RECORD_BYTES
from launcher.limits import Limits
from launcher.linger import TERM_S
from launcher.runner import Runner, RunPolicy

HERE = Path(__file__).resolve().parent
AGENT = str(HERE / "fake_agent.py")
pytestmark = pytest.mark.timeout(60)


def agent(tmp_path: Path, mode: str, workers: int = 2, console: bool = True) -> Command:
    argv = (sys.executable, AGENT, str(workers), mode, str(tmp_path))  # tmp_path tags every process it starts
    return Command(
        argv=argv,
        env=launcher_env(),
        cwd=str(tmp_path),
        workers=workers,
        console=console,
        log=str(tmp_path / "logs" / "agent.log"),
    )


def run(
    tmp_path: Path,
    commands: list[Command],
    restarts_inside: bool = True,
    max_restarts: int = 0,
    grace_s: float = 5.0,
    limits: Limits | None = None,
) -> tuple[int, str, str]:
    (tmp_path / "logs").mkdir(exist_ok=True)
    console = io.BytesIO()
    log = EventLog(tmp_path / "launcher.log", echo=None)
    policy = RunPolicy(grace_s, max_restarts, restarts_inside, tmp_path, limits)
    code = Runner(commands, policy, log, console).run()
    log.close()
    return code, console.getvalue().decode(), (tmp_path / "launcher.log").read_text()


def test_success_shows_output_and_records_workers(tmp_path: Path) -> None:
    code, console, log = run(tmp_path, [agent(tmp_path, "ok")])
    assert code == 0
    assert "worker rank 0" in console and "worker rank 1" in console
    assert "worker rank 1" in (tmp_path / "logs" / "agent.log").read_text()
    doc = json.loads((tmp_path / "workers.node0.json").read_text())
    assert sorted(w["rank"] for w in doc["workers"]) == [0, 1]
    assert "job finished: exit code 0" in log


def test_failed_rank_is_named_and_the_agents_code_propagates(tmp_path: Path) -> None:
    code, _, log = run(tmp_path, [agent(tmp_path, "fail1")])
    assert code == 1
    # the status as read by the launcher, or unknown where the stand-in agent reaped the rank first (it polls every
    # 50 ms; tests/launcher/test_watch.py covers that order deterministically): rank 1 is named either way
    assert "died first: rank 1 (local_rank 1" in log
    assert "exited with code 3" in log or "exited (status already collected by its parent) before its training" in log
    assert "died first: rank 0" not in log
    assert "job failed: exit code 1" in log
    assert not processes_mentioning(str(tmp_path))


def test_agent_killed_by_a_signal_gives_128_plus_signal(tmp_path: Path) -> None:
    command = Command(
        argv=(sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
        env=launcher_env(),
        cwd=str(tmp_path),
        log=str(tmp_path / "logs" / "agent.log"),
    )
    code, _, log = run(tmp_path, [command])
    assert code == 128 + 9 and "killed by signal 9 (SIGKILL)" in log


def test_a_killed_agent_is_the_cause_not_the_leftover_ranks_the_launcher_killed(tmp_path: Path) -> None:
    """The agent is SIGKILLed while its ranks train (max_restarts 0): the launcher kills and reaps the ranks left
    behind. They are not failures of their own: the summary blamed rank 0 ("died first: ... exited (status already
    collected by its parent) before its training was done", QA 2026-12-07) instead of the agent's SIGKILL."""
    command = agent(tmp_path, "killed")
    command = replace(command, env={**command.env, "TRAINPLAN_RUN_DIR": str(tmp_path)})  # their heartbeats
    code, console, log = run(tmp_path, [command])
    assert code == 128 + 9
    assert "killing 2 leftover process(es)" in log
    assert "died first" not in log and "died first" not in console
    assert "killed by the launcher as a leftover of its agent: rank 0 (local_rank 0" in log
    summary = log.splitlines()[-1]
    assert "job failed: exit code 137" in summary
    assert "; the agent on node 0 was killed by signal 9 (SIGKILL); logs: " in summary, summary
    assert not processes_mentioning(str(tmp_path))


def test_an_earlier_runs_heartbeat_in_a_reused_run_directory_is_not_this_runs(tmp_path: Path) -> None:
    """A reused run directory keeps an earlier run's heartbeats: rank5.json of another process, with 3 failed saves
    and step 20 not saved, made a clean 2-rank run's summary say "3 checkpoint save(s) failed" (QA 2026-12-07).
    Only the records of this run's workers (by pid) count."""
    beats = tmp_path / "heartbeats"
    beats.mkdir()
    checkpoint = {"step": 20, "saved": False, "failed": 3, "last_saved": 15, "error": "No space left on device"}
    stale = {"rank": 5, "pid": 1, "seq": 40, "phase": "train", "step": 20, "checkpoint": checkpoint}
    (beats / "rank5.json").write_text(json.dumps(stale).ljust(RECORD_BYTES))  # as examples/heartbeat.py writes
    limits = Limits(2.0, 0.5, 5.0, 0.1, 0.0, 1.0, 1.5, 5, False)
    code, _, log = run(tmp_path, [agent(tmp_path, "ok")], limits=limits)
    assert code == 0, log
    assert log.splitlines()[-1].split(" ", 2)[2].startswith("job finished: exit code 0 after ")
    assert "checkpoint" not in log, log


def test_a_record_written_before_this_run_is_not_this_runs_whatever_its_pid(tmp_path: Path) -> None:
    """Fresh containers hand out the same pids run after run: an earlier run's record whose pid a worker of this
    run has again counted as this run's (review 2026-12-07). Records written before the run began are not."""
    from launcher.watchdog import ProgressWatch

    checkpoint = {"step": 20, "saved": False, "failed": 3, "last_saved": 15, "error": "No space left on device"}
    record = {"rank": 0, "pid": 4321, "seq": 40, "phase": "train", "step": 20, "checkpoint": checkpoint}
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(record).ljust(RECORD_BYTES))
    limits = Limits(2.0, 0.5, 5.0, 0.1, 0.0, 1.0, 1.5, 5, False)
    watch = ProgressWatch(limits, tmp_path, 0, lambda *a, **k: None)
    os.utime(path, (watch.since - 60, watch.since - 60))
    assert watch.checkpoint_report([4321]) == ""
    os.utime(path, None)  # written now, during this run
    assert watch.checkpoint_report([4321]).startswith("3 checkpoint save(s) failed")


def test_one_failed_node_stops_the_others(tmp_path: Path) -> None:
    hang = agent(tmp_path, "hang", console=False)
    fail = Command(
        argv=(sys.executable, "-c", "import time, sys; time.sleep(1); sys.exit(4)"),
        env=launcher_env(),
        cwd=str(tmp_path),
        node_rank=1,
        log=str(tmp_path / "logs" / "node1.log"),
    )
    code, _, log = run(tmp_path, [hang, fail], grace_s=1.0)
    assert code == 4
    assert "node 1 failed: sending SIGTERM" in log
    assert "killing 2 leftover process(es)" in log  # the workers ignore SIGTERM: SIGKILL after the grace period
    assert not processes_mentioning(str(tmp_path))


def test_orphans_are_collected(tmp_path: Path) -> None:
    code, _, log = run(tmp_path, [agent(tmp_path, "orphan")])
    assert code == 0
    assert "leftover process" in log
    assert not processes_mentioning(str(tmp_path))  # the escaped grandchild included


def test_processes_the_embedding_program_had_before_the_job_are_left_alone(tmp_path: Path) -> None:
    """Run in-process (as here, in pytest), the runner's cleanup kills what is below it: never a child the program
    had before the job (pytest's multiprocessing forkserver was killed and reaped, and every later plan a 500)."""
    before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        code, _, log = run(tmp_path, [agent(tmp_path, "orphan")])
        assert code == 0 and "leftover process" in log  # it did clean up the job's escaped grandchild
        assert not processes_mentioning(str(tmp_path))
        assert before.poll() is None  # still running, and still ours to reap
    finally:
        before.kill()
    assert before.wait(5) == -signal.SIGKILL


def test_launcher_restarts_a_failed_job_up_to_the_limit(tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    code, console, log = run(tmp_path, [agent(tmp_path, f"flaky:{marker}")], restarts_inside=False, max_restarts=2)
    assert code == 0 and marker.exists()
    assert "restart 1 of at most 2: the job failed with exit code 5" in log
    assert "failing this time" in console
    again = tmp_path / "again"
    again.mkdir()
    code, _, log = run(again, [agent(again, "fail1")], restarts_inside=False, max_restarts=1)
    assert code == 1 and log.count("restart 1 of at most 1") == 1 and "restart 2" not in log


def _running(
    tmp_path: Path, mode: str, grace_s: float, checkpoint_dirs: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """The runner on one fake agent of `mode` in its own process, once both workers are up (each prints "up" after
    it has set its signal handling)."""
    spec = {
        "commands": [{**agent(tmp_path, mode).to_dict()}],
        "grace_s": grace_s,
        "max_restarts": 0,
        "restarts_inside": True,
        "run_dir": str(tmp_path),
        "checkpoint_dirs": checkpoint_dirs,
    }
    (tmp_path / "logs").mkdir()
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "run_commands.py"), str(tmp_path / "spec.json")],
        env=launcher_env(),
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: (tmp_path / "workers.node0.json").exists(), 20, "workers to start")
    agent_log = tmp_path / "logs" / "agent.log"
    wait_for(lambda: agent_log.exists() and agent_log.read_text().count(" up") == 2, 20, "workers to be up")
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_launcher_is_forwarded_then_escalated(tmp_path: Path, sig: signal.Signals) -> None:
    proc = _running(tmp_path, "hang", 1.0)
    t0 = time.monotonic()
    os.kill(proc.pid, sig)
    assert proc.wait(timeout=30) == 128 + sig
    assert time.monotonic() - t0 < 25  # grace 1 s, then SIGKILL: not a hang
    log = (tmp_path / "launcher.log").read_text()
    assert f"received {sig.name}: sending {sig.name} to the job, SIGKILL in 1 s" in log
    if sig == signal.SIGTERM:  # the workers ignore SIGTERM: they are SIGKILLed once the grace period is over
        assert "grace period over" in log or "killing 2 leftover process(es)" in log
    assert not processes_mentioning(str(tmp_path))
    # the worker table ends with what the kill did: it said "alive" for ranks SIGKILLed at the grace period's end
    # (QA, 2026-12-07)
    table = json.loads((tmp_path / "workers.node0.json").read_text())
    assert table["workers"] and not any(w["alive"] for w in table["workers"]), table


def test_a_second_sigint_kills_at_once_and_says_why(tmp_path: Path) -> None:
    """A second Ctrl-C kills the job at once; the log said "grace period over" though it was not (QA, 2026-12-06)."""
    proc = _running(tmp_path, "deaf", 60.0)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    wait_for(lambda: "received SIGINT" in (tmp_path / "launcher.log").read_text(), 10, "the first SIGINT")
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=30) == 130 and time.monotonic() - t0 < 20  # not the 60 s grace period
    log = (tmp_path / "launcher.log").read_text()
    assert "second SIGINT: killing the job now: sent SIGKILL to" in log and "grace period over" not in log, log
    assert not processes_mentioning(str(tmp_path))


def test_an_agent_that_exits_0_while_its_workers_run_has_not_finished_the_job(tmp_path: Path) -> None:
    code, _, log = run(tmp_path, [agent(tmp_path, "abandon")], grace_s=1.0)
    assert code == 1
    assert "the agent exited with code 0 while rank(s) 0, 1 still run: the job did not finish" in log
    assert not processes_mentioning(str(tmp_path))


def test_an_agent_that_outlives_its_workers_is_ended_at_the_plans_bound(tmp_path: Path) -> None:
    """torchrun's exit barrier, stood in for: the workers report done and exit 0 after 1.5 s (the launcher may not
    read their exit status before the agent reaps them; the heartbeat says their training is done) and the agent stays,
    deaf to SIGTERM.
    The bound is the plan's checkpoint-save timeout (1 s > 2 x 0.1 s + 0.5 s), then SIGTERM, SIGKILL TERM_S later;
    the node's result is its workers' success."""
    limits = Limits(2.0, 0.5, 5.0, 0.1, 0.0, 1.0, 1.5, 5, False)
    command = agent(tmp_path, "linger")
    command = replace(command, env={**command.env, "TRAINPLAN_RUN_DIR": str(tmp_path)})
    started = time.monotonic()
    code, _, log = run(tmp_path, [command], grace_s=30.0, limits=limits)
    took = time.monotonic() - started
    assert code == 0, log
    assert "node 0: all 2 worker(s) exited 0 1.0 s ago, but its agent still runs" in log
    assert "ending it at the plan's bound of 1.0 s (the checkpoint-save timeout): node 0 succeeded" in log
    assert f"node 0: its agent is still there {TERM_S:g} s after the SIGTERM: SIGKILL" in log
    assert "node 0: agent killed by signal 9 (SIGKILL) once ended; its workers had succeeded" in log
    assert "job finished: exit code 0" in log
    assert took < 1.5 + 1.0 + TERM_S + 3.0  # not the job's 30 s grace period, nor torch's 300 s
    assert not processes_mentioning(str(tmp_path))


def test_a_rank_that_fails_only_after_reporting_done_does_not_fail_the_job(tmp_path: Path) -> None:
    """Both ranks report done at step 5 in their heartbeats, then rank 1 aborts (SIGABRT, as in a crashed process-group
    teardown): the training had finished, so the job has, and the agent is not left to restart or fail it."""
    command = agent(tmp_path, "teardown")
    command = replace(command, env={**command.env, "TRAINPLAN_RUN_DIR": str(tmp_path)})
    code, _, log = run(tmp_path, [command])
    assert code == 0, log
    assert "after its training: rank 1 (local_rank 1, pid " in log
    assert "killed by signal 6 (SIGABRT) once its heartbeat said done at step 5; a failure in its teardown" in log
    assert "died first" not in log
    # the stand-in agent, like torchrun, would restart the group or exit 1 after its poll: it is ended first
    assert (
        "node 0: every rank finished its training and rank(s) 1 failed only in teardown; ending the agent now "
        "(no restart of a group whose training is done): node 0 succeeded"
    ) in log
    assert "node 0: agent exited with code 143 (128 + SIGTERM) once ended; its workers had succeeded" in log
    assert "job finished: exit code 0" in log
    assert not processes_mentioning(str(tmp_path))


def test_a_rank_that_fails_before_reporting_done_fails_the_job(tmp_path: Path) -> None:
    """Rank 0 reports done and exits 0; rank 1 aborts at step 3 without reporting done: a failure, named first."""
    command = agent(tmp_path, "early-abort")
    command = replace(command, env={**command.env, "TRAINPLAN_RUN_DIR": str(tmp_path)})
    code, _, log = run(tmp_path, [command])
    assert code == 1, log
    assert "died first: rank 1 (local_rank 1, pid " in log and "killed by signal 6 (SIGABRT)" in log
    assert "after its training" not in log and "succeeded" not in log
    assert not processes_mentioning(str(tmp_path))


def test_a_rank_that_exits_0_before_its_training_is_done_is_named_not_the_peer_that_failed_after_it(
    tmp_path: Path,
) -> None:
    """QA 2026-12-07: rank 1 exited 0 at step 3 of 12 (its heartbeat, matched by pid, said phase train) and rank 0
    then failed with code 1, its gloo peer gone. The launcher logged rank 1's exit as a plain "exited", named rank 0
    as the first failure and blamed it in the summary. Rank 1 is the first failure, on its own heartbeat's word."""
    command = agent(tmp_path, "early-exit0")
    command = replace(command, env={**command.env, "TRAINPLAN_RUN_DIR": str(tmp_path)})
    code, _, log = run(tmp_path, [command])
    assert code == 1, log
    early = "rank 1 (local_rank 1, pid "
    said = " exited 0 at step 3 before its training was done"
    lines = log.splitlines()
    died = [line for line in lines if "died first: " in line]
    assert len(died) == 1 and early in died[0] and died[0].endswith(f"{said}; rank 0 failed after it"), log
    assert "died first: rank 0" not in log
    assert early in lines[-1] and said in lines[-1] and "job failed: exit code 1" in lines[-1], lines[-1]
    assert not processes_mentioning(str(tmp_path))


def test_restarts_are_counted_over_the_job_and_a_spent_budget_is_said(tmp_path: Path) -> None:
    """QA 2026-12-07 (max_restarts 2): the launcher restarted the agent ("restart 1 of at most 2"), then the agent
    restarted its worker group and the log said "restart 1 of at most 2" again; it was the second. When the next
    failure ended the job, the summary did not say the budget was spent."""
    marker = tmp_path / "failed-once"
    code, _, log = run(tmp_path, [agent(tmp_path, f"regroup:{marker}")], max_restarts=2)
    assert code == 1, log
    assert "restart 1 of at most 2: the agent failed (exit code 5) before using its restarts" in log
    assert "node 0: worker group restarted by the agent (restart 2 of at most 2)" in log, log
    assert "restart 1 of at most 2)" not in log
    summary = log.splitlines()[-1]
    assert "job failed: exit code 1" in summary and "; no restart left (2 of at most 2 used); logs: " in summary
    assert not processes_mentioning(str(tmp_path))


def test_a_stop_before_any_checkpoint_says_the_next_run_starts_from_step_0(tmp_path: Path) -> None:
    """QA 2026-12-07: a SIGTERM before any checkpoint was saved still said "run the same command to go on from its
    last checkpoint". With the job's --save directory missing or empty the summary says the next run starts from
    step 0; with anything in it, the hint stands."""
    checkpoints = tmp_path / "checkpoints"
    proc = _running(tmp_path, "hang", 1.0, (str(checkpoints),))
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    summary = (tmp_path / "launcher.log").read_text().splitlines()[-1]
    assert "job stopped: exit code 143" in summary, summary
    assert (
        f"stopped by SIGTERM; no checkpoint was saved yet ({checkpoints} empty): the next run starts from step 0"
        in (summary)
    )
    assert "go on from its last checkpoint" not in summary
    assert not processes_mentioning(str(tmp_path))
    policy = RunPolicy(1.0, 0, True, tmp_path, checkpoint_dirs=(checkpoints,))
    checkpoints.mkdir()
    assert policy.resume().startswith("no checkpoint was saved yet")  # empty
    (checkpoints / "latest").write_text("step5\n")
    assert policy.resume() == "run the same command to go on from its last checkpoint"
    assert replace(policy, checkpoint_dirs=()).resume() == policy.resume_hint  # not known here: the hint stands
