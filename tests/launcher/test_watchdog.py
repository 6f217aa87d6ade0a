"""The watchdog's arithmetic and judgements (launcher/watchdog.py) on real heartbeat files (examples/heartbeat.py
writes them) and real processes; the guardian (launcher/guardian.py) with a real SIGKILLed parent."""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, launcher_env, wait_for
from heartbeat import Heartbeat
from make_plan import tiny_plan

from launcher import procs
from launcher.guardian import TOKEN_ENV
from launcher.heartbeat import Beat
from launcher.limits import STEP_HIGH_FACTOR, Limits
from launcher.sections import Prediction, Watchdog
from launcher.watchdog import ProgressWatch


def limits(**prediction: float) -> Limits:
    plan = replace(tiny_plan(), prediction=Prediction(**prediction), watchdog=Watchdog(floor_s=2.0, startup_s=10.0))
    found = Limits.from_plan(plan)
    assert found is not None
    return found


def test_timeouts_come_from_the_prediction() -> None:
    lim = limits(step_s=1.0, step_s_high=1.5, checkpoint_save_s=4.0, checkpoint_load_s=3.0)
    assert lim.step_timeout(None) == (2 * 1.5 + 2.0, "2 x 1.5 s predicted step upper bound + 2 s floor")
    assert lim.step_timeout(1.0)[0] == 5.0 and lim.step_timeout(4.0)[0] == 2 * 4.0 + 2.0  # observed only lengthens
    assert lim.first_step_s == 10.0 + 2 * (3.0 + 1.5) + 2.0
    assert lim.checkpoint_s == 2 * 4.0 + 2.0
    assert lim.poll_s == pytest.approx(0.5)  # a tenth of the 5 s step timeout
    assert limits(step_s=1.0).step_high_s == STEP_HIGH_FACTOR * 1.0  # no interval: the documented factor
    assert limits().step_timeout(None) is None and limits().checkpoint_s == 1800.0
    off = replace(tiny_plan(), watchdog=Watchdog(enabled=False))
    assert Limits.from_plan(off) is None


@pytest.fixture
def sleepers() -> Iterator[list[procs.Worker]]:
    """Two real processes standing in for ranks 0 and 1 (their pids are what the heartbeats name)."""
    popens = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    yield [procs.Worker(p.pid, rank, rank, 0) for rank, p in enumerate(popens)]
    for p in popens:
        p.kill()
        p.wait()


def beats(directory: Path, workers: list[procs.Worker]) -> list[Heartbeat]:
    out = []
    for w in workers:
        hb = Heartbeat(str(directory), w.rank)
        hb.beat(pid=w.pid)
        out.append(hb)
    return out


def _three_steps_then_stop_rank_1(watch: ProgressWatch, sleepers, hbs, t: float) -> float:  # type: ignore[no-untyped-def]
    """Every rank completes steps 1-3 of 0.2 s (no hang seen), then rank 1 is SIGSTOPped; the time of step 3."""
    for step in range(1, 4):
        t += 0.2
        for hb in hbs:
            hb.beat(phase="train", step=step, step_s=0.2, compute_s=0.1)
        assert watch.poll(sleepers, t) is None
    os.kill(sleepers[1].pid, signal.SIGSTOP)
    wait_for(lambda: procs.state(sleepers[1].pid) == "T", 5, "the stop")
    return t


def test_a_stopped_rank_is_named_once_it_is_past_the_step_timeout(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    events: list[str] = []
    watch = ProgressWatch(limits(step_s=0.2, step_s_high=0.25), tmp_path, 0, lambda m, echo=True: events.append(m))
    hbs, t = beats(tmp_path, sleepers), 1000.0
    assert watch.poll(sleepers, t) is None  # first heartbeats: start phase, 10 s + ... allowed
    t = _three_steps_then_stop_rank_1(watch, sleepers, hbs, t)
    assert watch.poll(sleepers, t + 2.49) is None  # 2 x 0.25 + 2 = 2.5 s
    hang = watch.poll(sleepers, t + 2.51)
    assert hang is not None and [c.rank for c in hang.culprits] == [1] and hang.culprits[0].stopped
    assert "rank 1 (pid" in hang.describe() and "last completed step 3" in hang.describe()
    assert "2 x 0.25 s predicted step upper bound + 2 s floor" in hang.describe()
    assert watch.poll(sleepers, t + 5) is None  # said once per failure
    # the runner kills the node's ranks and notes the failure: until the agent reaps them they are still among its
    # workers, and were taken for a second hang at the next poll, naming the healthy rank 0 too (QA, 2026-12-06)
    watch.note_failure(t + 5.1, ended=[w.pid for w in sleepers])
    assert watch.poll(sleepers, t + 10) is None and not watch.tracks
    os.kill(sleepers[1].pid, signal.SIGCONT)


def test_progress_is_timed_from_the_heartbeat_write_not_from_the_poll_that_saw_it(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    watch = ProgressWatch(limits(step_s=0.2, step_s_high=0.25), tmp_path, 0, lambda m, echo=True: None)
    hbs, t = beats(tmp_path, sleepers), 1000.0
    watch.poll(sleepers, t - 1.0)
    for hb in hbs:
        hb.beat(phase="train", step=1, step_s=0.2)
    time.sleep(0.4)  # the poll comes 0.4 s after the rank's last progress
    assert watch.poll(sleepers, t) is None
    deadline = watch.next_deadline()
    assert deadline is not None and t - 0.4 + 2.5 - 0.05 < deadline < t - 0.4 + 2.5 + 0.01  # 2 x 0.25 + 2 s
    assert watch.poll(sleepers, t + 2.0) is None
    hang = watch.poll(sleepers, t + 2.2)  # 2.6 s after the write: overdue, though only 2.2 s after it was seen
    assert hang is not None and hang.waited_s > 2.5
    assert watch.next_deadline() is None  # said once per failure: nothing more to wait for


def test_a_stopped_rank_is_named_when_a_rank_it_holds_up_is_overdue_first(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    """Deadlines run from each rank's own last write: rank 1 finished its step 0.3 s after rank 0 and was then
    stopped, so rank 0, waiting on it, is overdue first. The stopped rank is the one named."""
    watch = ProgressWatch(limits(step_s=0.2, step_s_high=0.25), tmp_path, 0, lambda m, echo=True: None)
    hbs, t = beats(tmp_path, sleepers), 1000.0
    watch.poll(sleepers, t - 1.0)
    hbs[0].beat(phase="train", step=3, step_s=0.2)
    time.sleep(0.3)
    hbs[1].beat(phase="train", step=3, step_s=0.2)
    os.kill(sleepers[1].pid, signal.SIGSTOP)
    wait_for(lambda: procs.state(sleepers[1].pid) == "T", 5, "the stop")
    assert watch.poll(sleepers, t) is None
    hang = watch.poll(sleepers, t + 2.3)  # rank 0: 2.6 s since its write, overdue; rank 1: 2.3 s, not yet
    os.kill(sleepers[1].pid, signal.SIGCONT)
    assert hang is not None and [c.rank for c in hang.culprits] == [1] and hang.culprits[0].stopped
    assert hang.waited_s > 2.5 and "last completed step 3" in hang.describe()


def test_without_a_stopped_rank_the_one_behind_is_named(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    watch = ProgressWatch(limits(step_s=0.2, step_s_high=0.25), tmp_path, 3, lambda m, echo=True: None)
    hbs = beats(tmp_path, sleepers)
    watch.poll(sleepers, 0.0)
    hbs[0].beat(phase="train", step=2, step_s=0.2)
    hbs[1].beat(phase="train", step=1, step_s=0.2)
    watch.poll(sleepers, 0.1)
    hang = watch.poll(sleepers, 3.0)
    assert hang is not None and [c.rank for c in hang.culprits] == [1] and "node 3" in hang.describe()


@pytest.mark.parametrize(("compute", "named"), [((0.01, 6.0), [1]), ((0.2, 0.21), [0, 1])])
def test_ranks_stuck_at_the_same_step_are_told_apart_by_their_last_compute(  # type: ignore[no-untyped-def]
    tmp_path: Path, sleepers, compute: tuple[float, float], named: list[int]
) -> None:
    """Both ranks completed step 1 and none is stopped. Rank 1 computed its last step in 6 s against rank 0's
    0.01 s: it is the one rank 0 waits for in the next collective, and the one named (both were, QA M4). With alike
    compute times the message says that the stuck rank cannot be told, rather than call both culprits."""
    watch = ProgressWatch(limits(step_s=0.2, step_s_high=0.25), tmp_path, 0, lambda m, echo=True: None)
    hbs = beats(tmp_path, sleepers)
    watch.poll(sleepers, 0.0)
    for hb, c in zip(hbs, compute, strict=True):
        hb.beat(phase="train", step=1, step_s=0.2, compute_s=c)
    watch.poll(sleepers, 0.1)
    hang = watch.poll(sleepers, 3.0)
    assert hang is not None and [c.rank for c in hang.culprits] == named
    if named == [1]:
        assert "its last step computed for 6 s against the other ranks' 0.01 s (median): they wait for it" in (
            hang.describe()
        )
    else:
        assert "all 2 at step 1, none stopped: which one is stuck cannot be told from the heartbeats" in hang.describe()


def test_a_straggler_is_reported_once_and_a_slow_job_is_warned_about(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    events: list[str] = []
    watch = ProgressWatch(limits(step_s=0.2, step_s_high=0.25), tmp_path, 0, lambda m, echo=True: events.append(m))
    hbs = beats(tmp_path, sleepers)
    for step in range(1, 8):
        hbs[0].beat(phase="train", step=step, step_s=0.6, compute_s=0.05)
        hbs[1].beat(phase="train", step=step, step_s=0.6, compute_s=0.5)
        assert watch.poll(sleepers, step * 0.6) is None
    stragglers = [e for e in events if e.startswith("straggler: ")]
    assert len(stragglers) == 1 and stragglers[0].startswith("straggler: rank 1 ")
    assert "10.0 x the median of the other ranks" in stragglers[0] and "the job goes on" in stragglers[0]
    assert any("steps take 0.6 s" in e and "above the predicted upper bound 0.25 s" in e for e in events)


def test_the_guardian_kills_the_job_when_the_launcher_is_sigkilled(tmp_path: Path) -> None:
    code = (
        "import os, subprocess, sys, time\n"
        "from launcher.guardian import Guardian, TOKEN_ENV\n"
        "g = Guardian()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True,\n"
        "                         env={**os.environ, TOKEN_ENV: g.token})\n"
        "print(child.pid, g.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=launcher_env()
    )
    assert launcher.stdout is not None
    worker, guardian = map(int, launcher.stdout.readline().split())
    wait_for(lambda: procs.environ(worker).get(TOKEN_ENV), 5, "the worker's environment", interval=0.05)
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    t0 = time.monotonic()
    wait_for(lambda: procs.state(worker) in (None, "Z"), 10, "the worker to be killed", interval=0.05)
    assert time.monotonic() - t0 < 5
    wait_for(lambda: procs.state(guardian) in (None, "Z"), 10, "the guardian to exit", interval=0.05)


def test_the_guardian_kills_a_helper_started_without_the_token_when_the_launcher_is_sigkilled(tmp_path: Path) -> None:
    """A rank's helper started with an environment of its own (no TRAINPLAN_LAUNCH_ID) in its own session, its
    parent (the rank) gone: the guardian recorded it below the launcher while it waited and kills it once the
    launcher is SIGKILLed. It survived, reparented to init (QA M7)."""
    rank_script = tmp_path / "rank.py"
    rank_script.write_text(
        "import subprocess, sys, time\n"
        "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], env={'PATH': '/usr/bin'},\n"
        "                          start_new_session=True)\n"
        "print(helper.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    code = (
        "import os, subprocess, sys, time\n"
        "from launcher.guardian import Guardian\n"
        "g = Guardian()\n"
        f"rank = subprocess.Popen([sys.executable, {str(rank_script)!r}], stdout=subprocess.PIPE, text=True)\n"
        "print(rank.stdout.readline().strip(), rank.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=launcher_env()
    )
    assert launcher.stdout is not None
    helper, rank = map(int, launcher.stdout.readline().split())
    try:
        assert TOKEN_ENV not in procs.environ(helper)
        time.sleep(2.5)  # the guardian records the tree every second
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        wait_for(lambda: procs.state(helper) in (None, "Z"), 10, "the helper to be killed", interval=0.05)
        wait_for(lambda: procs.state(rank) in (None, "Z"), 10, "the rank to be killed", interval=0.05)
    finally:
        for pid in (helper, rank):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_torn_or_foreign_record_reads_as_nothing(tmp_path: Path) -> None:
    from launcher.heartbeat import read_beat

    hb = Heartbeat(str(tmp_path), 4)
    hb.beat(phase="train", step=7, step_s=0.5)
    beat = read_beat(tmp_path, 4)
    assert beat is not None and (beat.rank, beat.step, beat.phase, beat.step_s) == (4, 7, "train", 0.5)
    assert (tmp_path / "rank4.json").stat().st_size == 4096  # rewritten in place, never grown
    raw = (tmp_path / "rank4.json").read_bytes()
    (tmp_path / "rank4.json").write_bytes(raw[:30] + b" " * (4096 - 30))  # a torn write
    assert read_beat(tmp_path, 4) is None
    (tmp_path / "rank4.json").write_text('{"rank": 4, "pid": 1, "seq": 1, "phase": "dancing"}')
    assert read_beat(tmp_path, 4) is None and read_beat(tmp_path, 5) is None


def test_a_record_whose_rank_field_is_not_its_files_is_the_files_rank(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    """rank1.json written with "rank": 7 (a trainer writing another numbering into it): the watchdog looked up rank 7
    at the first completed step, and the launcher died of a KeyError, killing the healthy job (QA 2026-12-07). The
    file's name decides: rank 1 is judged, and named when it stops."""
    watch = ProgressWatch(limits(step_s=0.2, step_s_high=0.25), tmp_path, 0, lambda m, echo=True: None)
    hbs, t = beats(tmp_path, sleepers), 1000.0
    hbs[1].beat(rank=7)
    assert watch.poll(sleepers, t) is None
    t = _three_steps_then_stop_rank_1(watch, sleepers, hbs, t)
    hang = watch.poll(sleepers, t + 2.51)
    os.kill(sleepers[1].pid, signal.SIGCONT)
    assert hang is not None and [c.rank for c in hang.culprits] == [1], hang


def test_a_step_time_of_infinity_does_not_switch_hang_detection_off(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    """Rank 0 reports its step time as JSON's Infinity (a garbled record): the slowest recent step bounds every rank's
    step timeout, which became infinite, and a rank SIGSTOPped after it was never named (QA 2026-12-07). A number
    that is not finite is no step time: rank 1's hang is found at 2 x 0.25 s + 2 s."""
    watch = ProgressWatch(limits(step_s=0.2, step_s_high=0.25), tmp_path, 0, lambda m, echo=True: None)
    hbs, t = beats(tmp_path, sleepers), 1000.0
    assert watch.poll(sleepers, t) is None
    for step in range(1, 6):
        t += 0.2
        for hb, step_s in zip(hbs, (math.inf, 0.2), strict=True):
            hb.beat(phase="train", step=step, step_s=step_s, compute_s=0.1)
        assert watch.poll(sleepers, t) is None
    assert "Infinity" in (tmp_path / "rank0.json").read_text()
    os.kill(sleepers[1].pid, signal.SIGSTOP)
    wait_for(lambda: procs.state(sleepers[1].pid) == "T", 5, "the stop")
    hang = watch.poll(sleepers, t + 2.51)
    os.kill(sleepers[1].pid, signal.SIGCONT)
    assert hang is not None and [c.rank for c in hang.culprits] == [1], hang


@contextlib.contextmanager
def _restarted_rank(tmp_path: Path) -> Iterator[tuple[procs.Worker, procs.Worker, ProgressWatch, Heartbeat, list[str]]]:
    """Rank 0 before a failure (`old`) and after its restart (`new`): two sleeping processes, a watchdog on
    `tmp_path` whose events are collected, and rank 0's heartbeat writer."""
    events: list[str] = []
    popens = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        old, new = [procs.Worker(p.pid, 0, 0, 0) for p in popens]
        watch = ProgressWatch(limits(step_s=0.2, step_s_high=0.25), tmp_path, 0, lambda m, echo=True: events.append(m))
        yield old, new, watch, Heartbeat(str(tmp_path), 0), events
    finally:
        for p in popens:
            p.kill()
            p.wait()


def test_the_resume_is_timed_at_the_first_step_after_it_whichever_step_the_poll_sees(tmp_path: Path) -> None:
    """Ranks resumed from step 1 after a failure; the first poll after the restart sees step 4 (three steps done
    between two polls). The launcher named whichever step it saw first, so resume times did not compare (QA,
    2026-12-06); it names step 2, timed from step 4's write less two steps of the reported step time."""
    with _restarted_rank(tmp_path) as (old, new, watch, hb, events):
        t = 1000.0
        hb.beat(pid=old.pid)
        watch.poll([old], t)
        for step in (1, 2):
            hb.beat(phase="train", step=step, step_s=0.2)
            watch.poll([old], t + 0.2 * step)
        watch.note_failure(t + 1.0)  # rank 0 died after step 2; the checkpoint is step 1
        hb.beat(pid=new.pid, phase="load", step=1, resumed_from=1)
        watch.poll([new], t + 2.0)
        hb.beat(phase="train", step=4, step_s=0.5)
        watch.poll([new], t + 4.0)
        said = [e for e in events if "training again" in e]
        assert len(said) == 1, events
        # step 4 written "now" (4.0 s after the failure at 1.0: 3.0 s, less the moments between write and poll),
        # less 2 x 0.5 s for steps 3 and 4
        found = re.search(
            r"training again: step 2 done about ([0-9.]+) s after the failure \(seen at step 4\)", said[0]
        )
        assert found is not None and 1.8 <= float(found.group(1)) <= 2.0, said
        assert "resumed from step 1, 1 step(s) lost (last completed: 2)" in said[0]


@pytest.mark.parametrize(
    "record",
    [
        '{"rank": 1, "pid": 7, "seq": 3, "phase": "train", "step": 1e999}',  # Infinity where an integer goes
        '{"rank": 1, "pid": 7, "seq": 3, "phase": "train", "step": 4, "resumed_from": 1e999}',
        "[1, 2, 3]",
        '"train"',
    ],
)
def test_a_record_that_does_not_parse_reads_as_nothing(record: str) -> None:
    """Any trainer may write the heartbeat: a record int() cannot take raised OverflowError through the watchdog,
    which killed the healthy job with a traceback (QA, 2026-12-06). It reads as a torn record does."""
    assert Beat.parse(record.encode()) is None


def test_a_checkpoint_note_whose_step_is_no_integer_is_left_out() -> None:
    """A trainer writing Megatron's "iter_0000500" as the checkpoint step crashed the watchdog (int('iter...'))."""
    for step in ('"iter_0000500"', "2.5", "true", "null"):
        record = f'{{"rank": 0, "pid": 7, "seq": 1, "phase": "train", "step": 5, "checkpoint": {{"step": {step}}}}}'
        beat = Beat.parse(record.encode())
        assert beat is not None and beat.step == 5 and beat.checkpoint is None, step
    kept = Beat.parse(
        b'{"rank": 0, "pid": 7, "seq": 1, "phase": "train", "step": 5, "checkpoint": {"step": 5, "saved": true}}'
    )
    assert kept is not None and kept.checkpoint == {"step": 5, "saved": True}


def test_a_rank_stuck_after_its_training_is_done_is_a_hang(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    """A rank stopped right after its heartbeat said done (the other waiting in the final barrier) was never
    awaited: the job held its nodes for ever (QA, 2026-12-06). It may take the exit wait, then it is named."""
    lim = limits(step_s=0.2, step_s_high=0.25, checkpoint_save_s=1.0)
    watch = ProgressWatch(lim, tmp_path, 0, lambda m, echo=True: None)
    hbs, t = beats(tmp_path, sleepers), 1000.0
    watch.poll(sleepers, t - 1.0)
    for hb in hbs:
        hb.beat(phase="train", step=4, step_s=0.2)
    watch.poll(sleepers, t)
    for hb in hbs:
        hb.beat(phase="done", step=4)
    os.kill(sleepers[1].pid, signal.SIGSTOP)
    wait_for(lambda: procs.state(sleepers[1].pid) == "T", 5, "the stop")
    seconds, _how = lim.exit_wait()
    assert watch.poll(sleepers, t + 0.1) is None
    hang = watch.poll(sleepers, t + seconds + 0.5)
    os.kill(sleepers[1].pid, signal.SIGCONT)
    assert hang is not None and [c.rank for c in hang.culprits] == [1] and hang.culprits[0].phase == "done"
    assert "to exit once its training was done" in hang.describe()


def test_without_a_prediction_the_first_step_bounds_the_next(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    """No prediction, and only the first (warm-up) step observed: a rank stopped right after it was awaited by
    nothing (QA, 2026-12-06). The first step's time, k x it + F, is the bound until later steps are seen."""
    watch = ProgressWatch(limits(), tmp_path, 0, lambda m, echo=True: None)
    hbs, t = beats(tmp_path, sleepers), 1000.0
    watch.poll(sleepers, t - 1.0)
    for hb in hbs:
        hb.beat(phase="train", step=1, step_s=0.5)
    os.kill(sleepers[1].pid, signal.SIGSTOP)
    wait_for(lambda: procs.state(sleepers[1].pid) == "T", 5, "the stop")
    assert watch.poll(sleepers, t) is None
    assert watch.poll(sleepers, t + 1.5) is None  # 3 s allowed: k 2 x 0.5 s + the 2 s floor
    hang = watch.poll(sleepers, t + 3.5)
    os.kill(sleepers[1].pid, signal.SIGCONT)
    assert hang is not None and [c.rank for c in hang.culprits] == [1] and "last completed step 1" in hang.describe()
    assert hang.timeout_s == 3.0


def test_a_job_far_slower_than_its_prediction_is_not_a_hang_in_its_second_step(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    """Predicted 0.1 s a step, the first step took 10 s: the second was given 2 x 0.1 s + 2 s and the healthy job was
    killed as a hang (QA, 2026-12-07). The first step's time bounds the second; from the third, k x the slowest."""
    watch = ProgressWatch(limits(step_s=0.05, step_s_high=0.1), tmp_path, 0, lambda m, echo=True: None)
    hbs, t = beats(tmp_path, sleepers), 1000.0
    watch.poll(sleepers, t - 1.0)
    for hb in hbs:
        hb.beat(phase="train", step=1, step_s=10.0)
    assert watch.poll(sleepers, t) is None
    assert watch.poll(sleepers, t + 9.0) is None  # it was a hang from 2.2 s
    for hb in hbs:
        hb.beat(phase="train", step=2, step_s=9.0)
    assert watch.poll(sleepers, t + 9.5) is None
    assert watch.poll(sleepers, t + 9.5 + 19.0) is None  # 2 x 9 s + the 2 s floor from here
    hang = watch.poll(sleepers, t + 9.5 + 20.5)
    assert hang is not None and hang.timeout_s == 20.0 and "9 s slowest recent step" in hang.describe()
    lim = limits(step_s=0.05, step_s_high=0.1)
    assert lim.step_timeout(None, 1, 10.0) == (12.0, "10 s the first step took (above 2 x 0.1 s) + 2 s floor")
    assert lim.step_timeout(None, 1, 0.1) == lim.step_timeout(None)  # a first step within k x the prediction


def test_a_signal_during_a_hangs_teardown_keeps_the_hang_in_the_summary() -> None:
    """SIGTERM to the launcher while it tore a hung job down: the last line said only "stopped by SIGTERM", and
    which rank had hung was lost (QA, 2026-12-07). It now names both, the signal first."""
    from launcher.recovery import summary
    from launcher.watchdog import Culprit, Hang

    hang = Hang((Culprit(rank=1, pid=4242, step=7, phase="step", stopped=True),), 31.0, 30.0, "3 x 10 s", 0)
    line = summary(143, 40.0, [(None, "", "/runs/x/attempt-0/agent.log")], hang, signal.SIGTERM)
    assert line.startswith("job failed: exit code 143 after 40.0 s; stopped by SIGTERM; hang: rank 1 (pid 4242")
    assert "last completed step 7" in line and line.endswith("logs: /runs/x/attempt-0")
    alone = summary(143, 40.0, [(None, "", "/runs/x/attempt-0/agent.log")], None, signal.SIGTERM, resume="resume: x")
    assert alone.startswith("job stopped: exit code 143 after 40.0 s; stopped by SIGTERM; resume: x")


def test_checkpoint_saves_that_failed_between_two_polls_are_counted(tmp_path: Path, sleepers) -> None:  # type: ignore[no-untyped-def]
    """The heartbeat holds the last save's note only: saves that failed between two polls are counted from its
    "failed" total and said, and the summary's count and last good checkpoint include them."""
    events: list[str] = []
    watch = ProgressWatch(limits(step_s=1.0, step_s_high=2.0), tmp_path, 0, lambda m, echo=True: events.append(m))
    hbs, t = beats(tmp_path, sleepers), 1000.0
    watch.poll(sleepers, t)
    hbs[0].beat(phase="train", step=10, checkpoint={"step": 10, "saved": True, "failed": 0, "last_saved": 10})
    watch.poll(sleepers, t + 0.1)
    assert not events and watch.checkpoint_report() == ""
    # steps 20, 30 and 40 failed to save; the poll sees only step 40's note
    full = {"step": 40, "saved": False, "error": "No space left", "failed": 3, "last_saved": 10}
    hbs[0].beat(step=40, checkpoint=full)
    watch.poll(sleepers, t + 0.2)
    assert "node 0: 2 more checkpoint save(s) failed between polls (3 so far); the last good checkpoint is step 10" in (
        events
    ), events
    assert "node 0: checkpoint at step 40 not saved: No space left" in events
    assert watch.checkpoint_report() == "3 checkpoint save(s) failed; the last good checkpoint is step 10"
    hbs[0].beat(step=50, checkpoint={"step": 50, "saved": True, "failed": 3, "last_saved": 50})
    watch.poll(sleepers, t + 0.3)
    assert watch.checkpoint_report() == "3 checkpoint save(s) failed; the last good checkpoint is step 50"
    assert sum("between polls" in e for e in events) == 1  # said once


def test_a_heartbeat_that_goes_missing_is_lost_not_a_hang_and_judged_again_when_it_is_back(  # type: ignore[no-untyped-def]
    tmp_path: Path, sleepers
) -> None:
    """QA 2026-12-07: the run directory's heartbeats folder deleted mid-run; the trainer wrote on into the unlinked
    files, and the watchdog declared a hang at the last step it had read (7, while the ranks trained to 25), killed
    the ranks and spent a restart. A file that was seen and is gone is "heartbeat lost", said once, and the rank is
    not judged (no log line to go by here); the example writer makes its file again at its next write, and the rank
    is judged from then on."""
    import shutil

    events: list[str] = []
    beats_dir = tmp_path / "heartbeats"
    watch = ProgressWatch(limits(step_s=0.2, step_s_high=0.25), beats_dir, 0, lambda m, echo=True: events.append(m))
    hbs, t = beats(beats_dir, sleepers), 1000.0
    watch.poll(sleepers, t)
    for step in range(1, 8):
        t += 0.2
        for hb in hbs:
            hb.beat(phase="train", step=step, step_s=0.2, compute_s=0.1)
        watch.poll(sleepers, t)
    shutil.rmtree(beats_dir)
    for later in (1.0, 3.0, 30.0):  # far past the 2.5 s step timeout
        assert watch.poll(sleepers, t + later) is None, events
    lost = [e for e in events if "heartbeat lost" in e]
    assert lost == [
        f"node 0: heartbeat lost: rank {w.rank} (pid {w.pid}): {beats_dir}/rank{w.rank}.json is gone after step 7; "
        f"not judged for hangs until it writes its heartbeat again (its log has no training line)"
        for w in sleepers
    ]
    assert watch.next_deadline() is None
    t += 31.0
    for hb in hbs:  # the trainer's next write: examples/heartbeat.py sees its file unlinked and makes it again
        hb.beat(phase="train", step=25, step_s=0.2, compute_s=0.1)
    assert (beats_dir / "rank0.json").exists() and watch.poll(sleepers, t) is None
    assert [e for e in events if "heartbeat back" in e] == [
        f"node 0: heartbeat back: rank {w.rank} (pid {w.pid}) at step 25; judged again" for w in sleepers
    ]
    hang = watch.poll(sleepers, t + 2.6)  # no write since: judged again, overdue
    assert hang is not None and "last completed step 25" in hang.describe()


def test_the_last_completed_step_is_never_below_the_step_resumed_from(tmp_path: Path) -> None:
    """QA 2026-12-07: "resumed from step 25, 0 step(s) lost (last completed: 7)": the watchdog had last read step 7,
    the ranks had trained on to 25 unseen. A checkpoint resumed from was completed."""
    with _restarted_rank(tmp_path) as (old, new, watch, hb, events):
        t = 1000.0
        hb.beat(pid=old.pid, phase="train", step=7, step_s=0.2)
        watch.poll([old], t)
        watch.note_failure(t + 1.0)
        hb.beat(pid=new.pid, phase="load", step=25, resumed_from=25)
        watch.poll([new], t + 2.0)
        hb.beat(phase="train", step=26, step_s=0.2)
        watch.poll([new], t + 3.0)
        said = [e for e in events if "training again" in e]
        assert len(said) == 1 and said[0].endswith("resumed from step 25, 0 step(s) lost (last completed: 25)"), said
