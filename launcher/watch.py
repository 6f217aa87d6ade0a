"""Watches the worker processes of the local agents: which rank died first, how, and restarts.

Workers are found by a short /proc scan (only while some are missing); each is then watched with a pidfd,
which wakes the launcher the moment it exits, at no cost while it runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from launcher import procs

if TYPE_CHECKING:
    from launcher.heartbeat import Beat

SCAN_INTERVAL_S = 0.2
SCAN_GIVE_UP_S = 60.0


@dataclass(frozen=True)
class Death:
    worker: procs.Worker
    node_rank: int | None
    status: int | None  # raw wait status, None if the agent collected it first
    root: bool = False  # the first failure of its worker group, not one caused by stopping the job
    done_step: int | None = None  # a failed or unknown exit after its heartbeat said "done" at this step: teardown
    interrupts: bool = False  # it ended its group's training: a failed or unknown exit before "done", not ours
    early_step: int | None = None  # an exit 0 while its own heartbeat said it was still training, at this step

    @property
    def failed(self) -> bool:
        """Known to have failed (None: the agent collected the status first, so we cannot tell)."""
        return self.status not in (0, None)

    def describe(self) -> str:
        w = self.worker
        node = "" if self.node_rank is None else f", node {self.node_rank}"
        how = (
            procs.describe_status(self.status)
            if self.early_step is None
            else f"exited 0 at step {self.early_step} before its training was done"
        )
        return f"rank {w.rank} (local_rank {w.local_rank}, pid {w.pid}{node}) {how}"


def _stopped_by_agent(status: int | None) -> bool:
    """Killed by the signal an agent stops a worker group with (torchrun: SIGTERM, then SIGKILL after a grace)."""
    return status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGTERM, signal.SIGKILL)


class WorkerWatch:
    def __init__(
        self,
        agent_pid: int,
        expected: int,
        node_rank: int | None,
        selector: selectors.BaseSelector,
        log: Callable[..., None],
        workers_file: Path | None,
        max_restarts: int,
        beats: Path | None = None,
        restarts_before: int = 0,
    ) -> None:
        self.agent_pid, self.expected, self.node_rank = agent_pid, expected, node_rank
        self.selector, self.log, self.workers_file = selector, log, workers_file
        self.max_restarts = max_restarts  # the job's whole budget
        # restarts the job used before this agent started (the launcher's restarts of the agent, and the groups its
        # earlier agents restarted): this agent's first group restart is the job's next, not its first (QA 2026-12-07)
        self.restarts_before = restarts_before
        self.beats = beats  # the heartbeat directory: a rank that fails after reporting done is not a failure
        self.alive: dict[int, tuple[procs.Worker, int]] = {}  # pid -> (worker, pidfd)
        self.seen: dict[int, procs.Worker] = {}
        self.deaths: list[Death] = []
        self.restarts = 0
        self.stopping = False  # set by the runner once it stops the job: later deaths are its doing
        self.killed: set[int] = set()  # pids the runner killed itself (a hang): not a failure of their own
        self.ended: set[int] = set()  # leftovers the runner killed once their agent was gone: not failures either
        self._write_failed = False
        self._died_since_restart = False
        self._group_start = 0  # the index in `deaths` of the agent's current worker group's first (its last restart)
        self._scan_since = time.monotonic()
        self._last_scan = 0.0

    @property
    def scanning(self) -> bool:
        return len(self.alive) < self.expected and time.monotonic() - self._scan_since < SCAN_GIVE_UP_S

    def workers(self) -> list[procs.Worker]:
        return [worker for worker, _ in self.alive.values()]

    @property
    def succeeded(self) -> bool:
        """Every worker of the agent's latest group has exited with code 0, read from its own wait status, or
        exited (failed, or with a status the agent collected first) after its heartbeat said its training was done
        (`Death.done_step`). An unknown status without that heartbeat is not counted as a success."""
        return not self.alive and self.finished_training()

    @property
    def teardown_failures(self) -> list[Death]:
        """The latest group's workers that failed only after their training was done (`Death.done_step`)."""
        return [d for d in self.deaths[-self.expected :] if d.done_step is not None and d.failed]

    @property
    def exits_after_done(self) -> list[Death]:
        """The latest group's workers that failed, or exited with a status their agent collected first, after their
        heartbeat said done: an agent that exits non-zero for one of them failed in teardown, not in training."""
        return [d for d in self.deaths[-self.expected :] if d.done_step is not None and d.status != 0]

    def finished_training(self) -> bool:
        """Every worker of the latest group is past its training: exited 0, or reported done in its heartbeat
        (the ones still alive included: they are in their teardown)."""
        gone = self.expected - len(self.alive)
        last = self.deaths[-gone:] if gone > 0 else []
        return (
            len(last) == gone
            and all(d.status == 0 or d.done_step is not None for d in last)
            and all(self._done_step(w) is not None for w in self.workers())
        )

    @property
    def first_failure(self) -> Death | None:
        """The first failure of the agent's latest worker group, the one that ended the job. An earlier group's
        failure, which the agent recovered from by a restart, is not the job's cause: the summary blamed a rank
        SIGKILLed and resumed from beside a later group's SIGSEGV that ended the job (QA 2026-12-07)."""
        return next((d for d in self.deaths[self._group_start :] if d.root), None)

    def tick(self) -> None:
        now = time.monotonic()
        if self.scanning and now - self._last_scan >= SCAN_INTERVAL_S:
            self._last_scan = now
            self.scan()

    def scan(self) -> None:
        found = procs.find_workers(self.agent_pid, known=self.seen.keys())
        new = [w for w in found if w.pid not in self.alive and w.pid not in self.seen]
        for worker in new:
            try:
                fd = os.pidfd_open(worker.pid)
            except OSError:
                continue  # already gone
            self.alive[worker.pid] = (worker, fd)
            self.seen[worker.pid] = worker
            self.selector.register(fd, selectors.EVENT_READ, ("worker", self, worker.pid))
        if new:
            self._note_restart()
            ranks = ", ".join(f"rank {w.rank} pid {w.pid}" for w in new)
            self.log(f"node {self.node_rank}: workers started: {ranks}", echo=False)
            self._write_workers()

    def _note_restart(self) -> None:
        if self._died_since_restart:
            self.restarts += 1
            self._died_since_restart = False
            self._group_start = len(self.deaths)
            self.log(
                f"node {self.node_rank}: worker group restarted by the agent "
                f"(restart {self.restarts_before + self.restarts} of at most {self.max_restarts})"
            )

    def on_exit(self, pid: int) -> Death | None:
        entry = self.alive.pop(pid, None)
        if entry is None:
            return None
        worker, fd = entry
        status = procs.zombie_status(pid)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fd)
        os.close(fd)
        failed = status not in (0, None)
        watched = not self.stopping and not self._ours(pid)
        # a failed or unknown exit after the rank's heartbeat said done: its training had finished
        done = self._done_step(worker) if status != 0 and watched else None
        # an exit 0 while its own heartbeat says it was still training: it left the job before the end (a peer then
        # fails for want of it; the launcher named that peer, QA 2026-12-07), or every rank did and the job stopped
        # early (runner.py, exit 75)
        early = self._training_step(worker) if status == 0 and watched else None
        first = self.first_failure is None and failed and done is None and watched
        # the agent stops the rest of a group when one of its ranks has died: a rank it stopped died after the
        # one before it whose status the agent collected before we could; a rank that failed on its own (its peer's
        # connection gone) did too, where that earlier rank's own heartbeat shows it was still training
        stopped = _stopped_by_agent(status)
        earlier = None
        if first:
            earlier = self._unexplained_exit(proven=not stopped)
        elif status is None and done is None and watched and self.first_failure is None and self._training(worker):
            # both statuses collected by the agent first (DeepSpeed's launch.py polls its ranks too; CI 2026-12-06
            # named no rank at all): a rank whose own heartbeat shows it mid-training ends after another one that
            # did, which died first
            earlier = self._unexplained_exit(proven=True)
        if earlier is not None:
            cause = self.deaths[earlier] = replace(self.deaths[earlier], root=True)
            first = False
            after = (
                "the agent then stopped the other ranks"
                if stopped
                else f"rank {worker.rank} {'ended' if status is None else 'failed'} after it"
            )
            if cause.early_step is not None:  # its exit status is known: 0
                self.log(f"died first: {cause.describe()}; {after}")
            else:
                self.log(
                    f"died first: {cause.describe()} before its training was done; {after} (its report gives the "
                    f"status)"
                )
        # any failure of the group, not only its first (root): a rank whose status the agent collected first
        # interrupts as much as the one the agent then stopped, which is not root either
        interrupts = watched and status != 0 and done is None
        death = Death(worker, self.node_rank, status, first, done, interrupts, early)
        self.deaths.append(death)
        self._died_since_restart = True
        if pid in self.killed:
            self.log(f"stopped by the watchdog: {death.describe()}", echo=False)
        elif pid in self.ended:
            self.log(f"killed by the launcher as a leftover of its agent: {death.describe()}", echo=False)
        elif done is not None and failed:
            self.log(
                f"after its training: {death.describe()} once its heartbeat said done at step {done}; a failure in "
                f"its teardown (e.g. destroying the process group), not in training"
            )
        elif failed:
            self.log(("died first: " if first else "stopped: ") + death.describe(), echo=first)
        elif early is not None:
            self.log(f"exited early: {death.describe()} (its own heartbeat says so)")
        else:
            self.log(f"exited: {death.describe()}", echo=False)
        self._scan_since = time.monotonic()  # an agent with restarts left will start new workers
        self._write_workers()
        return death

    def _unexplained_exit(self, proven: bool = False) -> int | None:
        """The index of a rank of the current group that exited before its training was done, and that the launcher
        did not stop itself; None if there is none. Either with a status its agent collected before the launcher
        could read it (no "done" heartbeat), or with code 0 while its own heartbeat said it was still training
        (`Death.early_step`, proven when it exited). `proven`: of the former, only a rank whose own last heartbeat
        (from its pid) shows it still training, not one that may have finished without reporting."""
        return next(
            (i for i in range(self._group_start, len(self.deaths))
             if not self._ours((d := self.deaths[i]).worker.pid)
             and (d.early_step is not None
                  or (d.status is None and d.done_step is None and (not proven or self._training(d.worker))))),
            None,
        )  # fmt: skip

    def end_leftovers(self, pids: list[int]) -> None:
        """The runner is about to kill these processes, left after the agent exited (or was killed): those that are
        this agent's workers die by the launcher's hand, not of a failure of their own. Their deaths were read as
        exits before their training was done, and one of them named "died first" in place of the agent's SIGKILL
        that ended the job (QA 2026-12-07)."""
        self.ended.update(pid for pid in pids if pid in self.alive)

    def _ours(self, pid: int) -> bool:
        """The runner killed this worker itself: the watchdog (a hang) or the cleanup of its agent's leftovers."""
        return pid in self.killed or pid in self.ended

    def _done_step(self, worker: procs.Worker) -> int | None:
        """The step at which this very process (its pid) reported its training done in its heartbeat, if it did."""
        beat = self._own_beat(worker)
        if not beat or beat.phase != "done":
            return None
        # a group restarted after the last save resumes at the last step and trains none: its records keep step 0
        return max(beat.step, beat.resumed_from or 0)

    def _training(self, worker: procs.Worker) -> bool:
        """This very process's last heartbeat says it was still short of done."""
        return self._training_step(worker) is not None

    def _training_step(self, worker: procs.Worker) -> int | None:
        """The last completed step in this very process's last heartbeat, if that says it was still short of done."""
        beat = self._own_beat(worker)
        return None if beat is None or beat.phase == "done" else max(beat.step, beat.resumed_from or 0)

    def _own_beat(self, worker: procs.Worker) -> Beat | None:
        """The rank's last heartbeat, if this very process (its pid) wrote it."""
        if self.beats is None:
            return None
        from launcher.heartbeat import read_beat

        beat = read_beat(self.beats, worker.rank)
        return beat if beat and beat.pid == worker.pid else None

    def close(self) -> None:
        for _, fd in self.alive.values():
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fd)
            os.close(fd)
        self.alive.clear()

    def _write_workers(self) -> None:
        if not self.workers_file:
            return
        doc = {
            "node_rank": self.node_rank,
            "agent_pid": self.agent_pid,
            "workers": [
                {"pid": w.pid, "rank": w.rank, "local_rank": w.local_rank, "alive": w.pid in self.alive}
                for w in self.seen.values()
            ],
            "deaths": [
                {"rank": d.worker.rank, "pid": d.worker.pid, "how": procs.describe_status(d.status)}
                for d in self.deaths
            ],
        }
        tmp = self.workers_file.with_name(f".{self.workers_file.name}.tmp")
        try:
            tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            tmp.replace(self.workers_file)
        except OSError as exc:  # a full run directory: the job goes on without this file
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            if not self._write_failed:
                self._write_failed = True
                self.log(f"cannot write {self.workers_file} ({exc.strerror}); the job goes on")
