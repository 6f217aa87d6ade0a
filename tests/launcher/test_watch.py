"""Which rank died first, with real processes and signals, when the agent collects a rank's exit status before the
launcher can read it (torchrun polls its workers every 0.1 s; on a busy machine it can win the race)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from launcher import procs
from launcher.heartbeat import RECORD_BYTES
from launcher.recovery import job_code
from launcher.watch import Death, WorkerWatch


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _watching(children: list[subprocess.Popen[bytes]]) -> tuple[WorkerWatch, list[str]]:
    lines: list[str] = []
    selector = selectors.DefaultSelector()
    watch = WorkerWatch(os.getpid(), len(children), 0, selector, lambda msg, **_: lines.append(msg), None, 0)
    for rank, child in enumerate(children):
        fd = os.pidfd_open(child.pid)
        watch.alive[child.pid] = (procs.Worker(child.pid, rank, rank, 0), fd)
        selector.register(fd, selectors.EVENT_READ)
    return watch, lines


def _unreaped(child: subprocess.Popen[bytes], sig: int | None) -> None:
    """Signal the child (None: it exits by itself) and wait until it is a zombie whose status the launcher can read
    (not reaped)."""
    if sig is not None:
        os.kill(child.pid, sig)
    deadline = time.monotonic() + 10
    while procs.zombie_status(child.pid) is None:
        assert time.monotonic() < deadline, "the child did not exit"
        time.sleep(0.01)


def _collected_by_the_agent(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    child.wait()  # reaped: its status is gone before the launcher looks


def _unseen_exit_then(
    sig: int | None, beats: Path | None = None, own_beat: bool = True
) -> tuple[WorkerWatch, list[str], int, int]:
    """Rank 0 killed and reaped by its agent before the launcher reads it, then rank 1 killed by `sig` (None: it
    exits with code 1 by itself, as a rank does when its peer's connection goes), its status read by the launcher;
    returns the watch, its log lines and the two pids. With `beats`, rank 0's last heartbeat there says it is
    training: its own process's (`own_beat`), or another's (an earlier group)."""
    first = _child()
    exits = "import sys, time; time.sleep(0.5); sys.exit(1)"
    second = _child() if sig is not None else subprocess.Popen([sys.executable, "-c", exits])
    watch, lines = _watching([first, second])
    if beats is not None:
        beats.mkdir()
        record = {"rank": 0, "pid": first.pid if own_beat else 1, "seq": 7, "phase": "train", "step": 3}
        (beats / "rank0.json").write_text(json.dumps(record).ljust(RECORD_BYTES))  # as examples/heartbeat.py does
        watch.beats = beats
    _collected_by_the_agent(first)
    watch.on_exit(first.pid)
    _unreaped(second, sig)
    watch.on_exit(second.pid)
    second.wait()
    return watch, lines, first.pid, second.pid


def test_a_rank_whose_status_the_agent_collected_first_is_named_before_the_ranks_it_stopped() -> None:
    """Rank 0 is killed and reaped by its agent before the launcher reads it; the agent then stops rank 1 with
    SIGTERM. Rank 1's SIGTERM is the agent's doing, so rank 0 died first (in the CI run of 2026-12-05 the launcher
    named rank 1's SIGTERM instead)."""
    watch, lines, first, second = _unseen_exit_then(signal.SIGTERM)
    root = watch.first_failure
    assert root is not None and root.worker.rank == 0 and root.status is None
    assert lines[-2] == (
        f"died first: rank 0 (local_rank 0, pid {first}, node 0) exited (status already collected by its "
        f"parent) before its training was done; the agent then stopped the other ranks (its report gives the status)"
    )
    assert lines[-1] == f"stopped: rank 1 (local_rank 1, pid {second}, node 0) killed by signal 15 (SIGTERM)"


def test_a_crash_after_an_unseen_exit_is_itself_the_first_failure() -> None:
    """A SIGABRT is not how an agent stops a group: the rank that aborted is named, not the one before it whose
    status is unknown (it may have finished normally)."""
    watch, lines, _, second = _unseen_exit_then(signal.SIGABRT)
    root = watch.first_failure
    assert root is not None and root.worker.rank == 1
    assert lines[-1].startswith(f"died first: rank 1 (local_rank 1, pid {second}, node 0) killed by signal 6")


def test_a_rank_whose_heartbeat_shows_it_training_died_before_the_rank_that_failed_after_it(tmp_path: Path) -> None:
    """The fresh-clone CI run of 2026-12-06: a rank SIGKILLed and reaped by torchrun before the launcher read it,
    then the other rank exits with code 1 (its peer gone), not by the agent's signal. The first rank's own heartbeat
    says it was still training, so it died first; the launcher had named the other."""
    watch, lines, first, second = _unseen_exit_then(None, tmp_path / "heartbeats")
    root = watch.first_failure
    assert root is not None and root.worker.rank == 0 and root.status is None
    assert lines[-2] == (
        f"died first: rank 0 (local_rank 0, pid {first}, node 0) exited (status already collected by its "
        f"parent) before its training was done; rank 1 failed after it (its report gives the status)"
    )
    assert lines[-1] == f"stopped: rank 1 (local_rank 1, pid {second}, node 0) exited with code 1"


def test_without_its_own_heartbeat_an_unseen_exit_is_not_blamed_for_a_failure_after_it(tmp_path: Path) -> None:
    """The same exits, but the heartbeat is another process's: nothing shows rank 0 was still training (it may have
    finished), so the rank that exited with code 1 is the first failure."""
    watch, lines, _, second = _unseen_exit_then(None, tmp_path / "heartbeats", own_beat=False)
    root = watch.first_failure
    assert root is not None and root.worker.rank == 1
    assert lines[-1] == f"died first: rank 1 (local_rank 1, pid {second}, node 0) exited with code 1"


def test_an_unseen_exit_of_a_group_the_agent_restarted_is_not_blamed_for_the_next_group() -> None:
    """After a restart the new group's first SIGTERM death is not pinned on a rank of the old group."""
    old = _child()
    watch, lines = _watching([old])
    _collected_by_the_agent(old)
    watch.on_exit(old.pid)
    watch._note_restart()  # the agent started a new group (as the /proc scan notices)
    new = _child()
    fd = os.pidfd_open(new.pid)
    watch.alive[new.pid] = (procs.Worker(new.pid, 0, 0, 0), fd)
    watch.selector.register(fd, selectors.EVENT_READ)
    _unreaped(new, signal.SIGTERM)
    watch.on_exit(new.pid)
    new.wait()
    root = watch.first_failure
    assert root is not None and root.worker.pid == new.pid
    assert watch.restarts == 1 and lines[-1].startswith("died first: rank 0")


def test_when_the_agent_collected_both_statuses_the_rank_that_ended_first_mid_training_died_first(
    tmp_path: Path,
) -> None:
    """CI of 2026-12-06 (fault matrix, deepspeed-rank-sigkill): DeepSpeed's launch.py reaped the SIGKILLed rank 1 and
    then rank 0 (its gloo peer gone) before the launcher read either; no rank was named. Both heartbeats say they
    were training: the one that ended first died first, named when the second ends. Without the second's own
    heartbeat (it may have finished), nothing is named."""
    first, second = _child(), _child()
    watch, lines = _watching([second, first])  # rank 0: `second`, rank 1: `first` (rank 1 dies first)
    beats = tmp_path / "heartbeats"
    beats.mkdir()
    for rank, child in ((0, second), (1, first)):
        record = {"rank": rank, "pid": child.pid, "seq": 7, "phase": "train", "step": 3}
        (beats / f"rank{rank}.json").write_text(json.dumps(record).ljust(RECORD_BYTES))
    watch.beats = beats
    _collected_by_the_agent(first)
    watch.on_exit(first.pid)
    assert watch.first_failure is None  # one unknown exit alone proves nothing yet
    _collected_by_the_agent(second)
    watch.on_exit(second.pid)
    root = watch.first_failure
    assert root is not None and root.worker.rank == 1 and root.status is None
    assert lines[-2] == (
        f"died first: rank 1 (local_rank 1, pid {first.pid}, node 0) exited (status already collected by its "
        f"parent) before its training was done; rank 0 ended after it (its report gives the status)"
    )


def test_every_failure_that_ends_a_groups_training_interrupts_it_whether_or_not_it_is_the_root() -> None:
    """The resume is timed from the moment a group's training ends ("training again ... after the failure"). In the
    CI run of 2026-12-06 rank 1 was SIGKILLed and reaped by torchrun first, then rank 0 stopped by it with SIGTERM:
    neither exit was the root when it was read (rank 0's made rank 1 the root afterwards), so the launcher never
    timed the resume. Both interrupt, as does a later group's failure; an exit with code 0, and a rank the watchdog
    killed itself, do not."""
    first, second = _child(), _child()
    watch, _ = _watching([first, second])
    _collected_by_the_agent(first)
    unseen = watch.on_exit(first.pid)
    _unreaped(second, signal.SIGTERM)
    stopped = watch.on_exit(second.pid)
    second.wait()
    assert unseen is not None and stopped is not None and not unseen.root and not stopped.root
    assert unseen.interrupts and stopped.interrupts

    watch._note_restart()
    again, clean, ours = _child(), subprocess.Popen([sys.executable, "-c", "pass"]), _child()
    for rank, child in enumerate((again, clean, ours)):
        fd = os.pidfd_open(child.pid)
        watch.alive[child.pid] = (procs.Worker(child.pid, rank, rank, 0), fd)
        watch.selector.register(fd, selectors.EVENT_READ)
    watch.killed.add(ours.pid)
    deaths = []
    for child, sig in ((again, signal.SIGKILL), (clean, None), (ours, signal.SIGKILL)):
        _unreaped(child, sig)
        deaths.append(watch.on_exit(child.pid))
        child.wait()
    assert [d is not None and d.interrupts for d in deaths] == [True, False, False]
    # the first failure is the latest group's: the first group's, recovered from by the restart, ended nothing
    assert watch.first_failure is not None and watch.first_failure.worker.pid == again.pid


def _new_group(watch: WorkerWatch, children: list[subprocess.Popen[bytes]]) -> None:
    """The agent restarted its worker group with these children as ranks 0, 1, ... (as the /proc scan notices)."""
    watch._note_restart()
    for rank, child in enumerate(children):
        fd = os.pidfd_open(child.pid)
        watch.alive[child.pid] = (procs.Worker(child.pid, rank, rank, 0), fd)
        watch.selector.register(fd, selectors.EVENT_READ)


def _dies(watch: WorkerWatch, child: subprocess.Popen[bytes], sig: int) -> None:
    _unreaped(child, sig)
    watch.on_exit(child.pid)
    child.wait()


def test_the_failure_that_ended_the_job_is_the_latest_groups_not_the_one_the_agent_recovered_from() -> None:
    """QA 2026-12-07 (max_restarts 1): rank 1 SIGKILLed at step 7, torchrun restarted the group and it resumed; then
    rank 0 of the new group died of SIGSEGV and the job failed. The summary blamed the recovered SIGKILL (a pid long
    gone) and logged the SIGSEGV only as "stopped:". The new group's first failure is named, as "died first:" on the
    console too, and is what the summary gives."""
    from launcher.recovery import summary

    old = [_child(), _child()]
    watch, lines = _watching(old)
    _dies(watch, old[1], signal.SIGKILL)
    _dies(watch, old[0], signal.SIGTERM)  # the agent stops the rest of the group
    new = [_child(), _child()]
    _new_group(watch, new)
    _dies(watch, new[0], signal.SIGSEGV)
    _dies(watch, new[1], signal.SIGTERM)
    segv = f"rank 0 (local_rank 0, pid {new[0].pid}, node 0) killed by signal 11 (SIGSEGV)"
    root = watch.first_failure
    assert root is not None and root.worker.pid == new[0].pid
    assert f"died first: {segv}" in lines and watch.restarts == 1
    line = summary(1, 9.0, [(watch, "", "/run/logs/node0/agent.log")], None, None)
    assert line == f"job failed: exit code 1 after 9.0 s; {segv}; logs: /run/logs/node0"


def _watch_with_root(status: int | None) -> WorkerWatch:
    watch = WorkerWatch(1, 2, 0, selectors.DefaultSelector(), lambda *a, **k: None, None, 0)
    watch.deaths.append(Death(procs.Worker(1001, 1, 1, 0), 0, status, root=True))
    return watch


SIGKILLED = signal.SIGKILL  # a raw wait status of a process killed by SIGKILL is the signal number
DS_SAID_1 = "[launch.py:...] ['python', 'train.py'] exits with return code = 1\n"
DS_SAID_KILL = "[launch.py:...] ['python', 'train.py'] exits with return code = -9\n"


def test_deepspeeds_code_of_a_later_failure_is_replaced_by_the_first_ranks() -> None:
    """DeepSpeed's launch.py exits with the code of the first failed rank its poll meets in a set: after rank 1 is
    SIGKILLed, rank 0's gloo error (exit 1) can come first (a CI run of 2026-12-05 got exit 1 instead of 137). The
    launcher saw rank 1 die first and reports its code; a DeepSpeed code that is the first failure's, or a first
    failure whose status is unknown, is left as it was."""
    lines: list[str] = []
    code = job_code(1, DS_SAID_1, _watch_with_root(SIGKILLED), False, 0, lambda msg, **_: lines.append(msg))
    assert code == -signal.SIGKILL  # the launcher exits 137
    assert lines == [
        "node 0: DeepSpeed's launcher exited with return code 1, a rank that failed after rank 1 (local_rank 1, "
        "pid 1001, node 0) killed by signal 9 (SIGKILL): reporting that first failure's code, 137"
    ]
    assert job_code(247, DS_SAID_KILL, _watch_with_root(SIGKILLED), False, 0, lambda *a, **k: None) == -9
    assert job_code(1, DS_SAID_1, _watch_with_root(None), False, 0, lambda *a, **k: None) == 1
    assert job_code(1, DS_SAID_1, _watch_with_root(SIGKILLED), True, 0, lambda *a, **k: None) == 1  # stopping
    assert job_code(1, "torchrun output\n", _watch_with_root(SIGKILLED), False, 0, lambda *a, **k: None) == 1


def _beats(directory: Path, records: list[tuple[int, subprocess.Popen[bytes], str]]) -> Path:
    """Heartbeat records (rank, its process, phase) at step 3, as examples/heartbeat.py writes them."""
    directory.mkdir()
    for rank, child, phase in records:
        record = {"rank": rank, "pid": child.pid, "seq": 7, "phase": phase, "step": 3}
        (directory / f"rank{rank}.json").write_text(json.dumps(record).ljust(RECORD_BYTES))
    return directory


def _exits_with(code: int, after_s: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"import sys, time; time.sleep({after_s}); sys.exit({code})"])


def test_a_rank_that_exits_0_mid_training_died_first_not_the_peer_that_failed_for_want_of_it(tmp_path: Path) -> None:
    """QA 2026-12-07: rank 1 exited 0 at step 3 of 12 while its own heartbeat said phase train; rank 0 then failed
    with code 1 (its gloo peer gone) and was named as the first failure, rank 1's exit logged as a plain "exited".
    Rank 1 is named, with its step; alone, its exit 0 names nothing yet (every rank may stop early, exit 75)."""
    early, peer = _exits_with(0, 0.2), _exits_with(1, 1.0)
    watch, lines = _watching([peer, early])  # rank 0: peer, rank 1: early
    watch.beats = _beats(tmp_path / "heartbeats", [(0, peer, "train"), (1, early, "train")])
    _unreaped(early, None)
    watch.on_exit(early.pid)
    early.wait()
    said = f"rank 1 (local_rank 1, pid {early.pid}, node 0) exited 0 at step 3 before its training was done"
    assert watch.first_failure is None and lines[-1] == f"exited early: {said} (its own heartbeat says so)"
    _unreaped(peer, None)
    watch.on_exit(peer.pid)
    peer.wait()
    root = watch.first_failure
    assert root is not None and root.worker.rank == 1 and root.status == 0
    assert lines[-2:] == [
        f"died first: {said}; rank 0 failed after it",
        f"stopped: rank 0 (local_rank 0, pid {peer.pid}, node 0) exited with code 1",
    ]
    from launcher.recovery import summary

    line = summary(1, 9.0, [(watch, "", "/run/logs/node0/agent.log")], None, None)
    assert line == f"job failed: exit code 1 after 9.0 s; {said}; logs: /run/logs/node0"
    # a DeepSpeed launcher's code is not replaced by the first failure's, 0 (the job would have "succeeded")
    assert job_code(1, DS_SAID_1, watch, False, 0, lambda *a, **k: None) == 1


def test_an_exit_0_after_done_or_without_its_own_heartbeat_is_not_blamed(tmp_path: Path) -> None:
    """Rank 1 exits 0 after its heartbeat said done, or with another process's record: nothing shows it left early,
    so rank 0's failure after it is the first."""
    for phase, own in (("done", True), ("train", False)):
        early, peer = _exits_with(0, 0.2), _exits_with(1, 1.0)
        watch, lines = _watching([peer, early])
        watch.beats = _beats(tmp_path / f"{phase}-{own}", [(1, early if own else peer, phase)])
        for child in (early, peer):
            _unreaped(child, None)
            watch.on_exit(child.pid)
            child.wait()
        root = watch.first_failure
        assert root is not None and root.worker.rank == 0, lines
        assert lines[-2] == f"exited: rank 1 (local_rank 1, pid {early.pid}, node 0) exited with code 0"


def test_a_hang_asks_for_stacks_only_where_the_ranks_own_heartbeat_says_it_listens(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """QA 2026-12-07: the teardown of a hang sent SIGUSR1 to every local rank whose heartbeat FILE said faulthandler
    listens, without checking the record was that process's. After a restart, a rank still in its imports (its file
    holds the previous process's record) does not listen yet, and SIGUSR1's default action killed it: it died "killed
    by signal 10 (SIGUSR1)", not by the watchdog's SIGKILL, and the launcher waited 3 s for a dump that never came."""
    from launcher.limits import Limits
    from launcher.recovery import tear_down_hung
    from launcher.watchdog import Culprit, Hang, ProgressWatch

    children = [_child(), _child()]  # neither listens for SIGUSR1
    monkeypatch.setenv("PATH", str(tmp_path))  # no py-spy: the stacks are asked for with SIGUSR1
    watch, lines = _watching(children)
    beats = tmp_path / "heartbeats"
    beats.mkdir()
    for rank, child in enumerate(children):  # rank 1's file: the record of the process before the restart
        record = {"rank": rank, "pid": child.pid if rank == 0 else 1, "seq": 3, "phase": "train", "step": 5}
        stale = {"stacks": "SIGUSR1"} if rank == 1 else {}
        (beats / f"rank{rank}.json").write_text(json.dumps({**record, **stale}).ljust(RECORD_BYTES))
    limits = Limits(2.0, 2.0, 10.0, 0.25, 0.0, 60.0, 1.5, 5, True)
    progress = ProgressWatch(limits, beats, 0, lambda msg, **_: lines.append(msg))
    hang = Hang((Culprit(0, children[0].pid, 5, "train", False),), 2.6, 2.5, "test", 0)
    try:
        tear_down_hung(watch, progress, hang, tmp_path, True, lambda msg, **_: lines.append(msg))
        for child in children:
            child.wait(timeout=10)
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert [c.returncode for c in children] == [-signal.SIGKILL, -signal.SIGKILL], lines
    assert "no stack traces: py-spy is not on PATH and no rank listens for SIGUSR1" in lines, lines
