"""The plan-aware watchdog: hangs and stragglers of the local ranks, from their heartbeats (launcher/heartbeat.py),
with timeouts that come from the plan's prediction (docs/launcher.md, "Watchdog").

With k = watchdog.hang_factor, F = watchdog.floor_s and step_high the upper end of the predicted step time
(prediction.step_s_high, else prediction.step_s x STEP_HIGH_FACTOR):
- before the first step: watchdog.startup_s + k x (prediction.checkpoint_load_s + step_high) + F, from the rank's
  first heartbeat;
- a step: k x max(step_high, the slowest step seen lately) + F, from the rank's last progress. Observed steps only
  ever lengthen the timeout, so a job slower than planned is warned about, not killed;
- a checkpoint save: watchdog.checkpoint_timeout_s, else k x prediction.checkpoint_save_s + F, else 1800 s.

A rank past its timeout is hung. Of the hung ranks the watchdog names those the kernel shows stopped (state T),
else those with the fewest completed steps. A rank whose compute time is at least watchdog.straggler_factor x the
median of the other local ranks' on watchdog.straggler_steps heartbeats in a row, while its steps take longer than
step_high, is a straggler: reported once, the job goes on. The idea of per-rank progress with a timeout scaled
from measured intervals is nvidia-resiliency-ext's (fault_tolerance/timeouts_calc.py: max interval x a safety
factor); here the interval is the planner's prediction and observations only extend it.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from launcher import procs
from launcher.heartbeat import Beat, read_beat
from launcher.limits import Limits  # worked out from the plan (launcher/limits.py)
from launcher.logprogress import LogProgress

WINDOW = 20  # recent steps kept per rank


@dataclass
class Track:
    worker: procs.Worker
    beat: Beat
    since: float  # monotonic time of this worker's first heartbeat
    changed: float  # ... of its last progress (step or phase)
    from_log: bool = False  # progress read from its training log, not a heartbeat
    lost: bool = False  # its heartbeat file went missing and its log gives no progress: not judged until it is back
    steps: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    warmup_s: float | None = None  # the first step after a (re)start: it warms up, and is kept out of `steps`
    slow: int = 0
    straggler: bool = False
    judged: int = -1  # the heartbeat seq last judged for stragglers


@dataclass(frozen=True)
class Culprit:
    rank: int
    pid: int
    step: int
    phase: str
    stopped: bool
    from_log: bool = False


@dataclass(frozen=True)
class Hang:
    culprits: tuple[Culprit, ...]
    waited_s: float
    timeout_s: float
    how: str
    node_rank: int | None
    why: str = ""  # how the named rank was told from the others, or that it could not be

    def describe(self) -> str:
        node = "" if self.node_rank is None else f", node {self.node_rank}"
        who = "; ".join(
            f"rank {c.rank} (pid {c.pid}{node}{', stopped (state T)' if c.stopped else ''}) "
            f"last completed step {c.step}{' (from its log)' if c.from_log else ''}, in phase {c.phase}"
            for c in self.culprits
        )
        why = f"; {self.why}" if self.why else ""
        return f"hang: {who}: no progress for {self.waited_s:.1f} s (timeout {self.timeout_s:.1f} s = {self.how}){why}"


def _written(beat: Beat, now: float) -> float:
    """When the rank wrote this record, on the monotonic clock of `now`; a record read from a log, which has no
    write time, counts from the poll that saw it."""
    return now if beat.written is None else now - max(0.0, time.time() - beat.written)


def _first_step_done(beat: Beat, resumed: int, since_failure_s: float) -> str:
    """When the first step after the resume (resumed + 1) was done, counted from the failure. The poll may first see
    a later step (QA, 2026-12-06: it named steps 11, 12 or 13 of a resume from 10, so the times did not compare):
    that step's write time less the steps between, at the step time the rank reported."""
    first, ahead = resumed + 1, beat.step - resumed - 1
    if ahead <= 0:
        return f"step {beat.step} done {max(0.0, since_failure_s):.1f} s after the failure"
    if beat.step_s is None:
        return (
            f"step {beat.step} done {since_failure_s:.1f} s after the failure (step {first}, the first, was not seen)"
        )
    estimate = max(0.0, since_failure_s - ahead * beat.step_s)
    return f"step {first} done about {estimate:.1f} s after the failure (seen at step {beat.step})"


def _step_or_none(step: int | None) -> str:
    return "none" if step is None else f"step {step}"


class ProgressWatch:
    """Polled by the runner every `limits.poll_s` while the job runs."""

    def __init__(
        self,
        limits: Limits,
        directory: Path,
        node_rank: int | None,
        log: Callable[..., None],
        log_dir: Path | None = None,
    ) -> None:
        self.limits, self.directory, self.node_rank, self.log = limits, directory, node_rank, log
        self.logs = LogProgress(log_dir) if log_dir else None  # for ranks that write no heartbeat
        self.tracks: dict[int, Track] = {}
        self.fired = False
        self.slow_warned = False
        self.checkpoint_events: set[tuple[int, bool]] = set()
        self.saves_failed = 0  # the most failed saves any rank's heartbeat has counted ("failed")
        self.last_saved: int | None = None  # the step of the last checkpoint saved ("last_saved")
        self.interrupted: tuple[float, int] | None = None  # (monotonic time, last completed step) of a failure
        self.last_step = 0
        self.ended: set[int] = set()  # pids the watchdog had killed: no longer watched while they are reaped
        self.pids: set[int] = set()  # every worker of this run it polled: only their records are this run's
        self.since = time.time()  # a record written before this run began is an earlier run's, whatever its pid

    # Polling ----------------------------------------------------------------------------------------------------
    def poll(self, workers: list[procs.Worker], now: float) -> Hang | None:
        self.pids.update(w.pid for w in workers)
        live = {w.rank: w for w in workers if w.pid not in self.ended}
        for rank in [r for r, t in self.tracks.items() if live.get(r) != t.worker]:
            del self.tracks[rank]  # gone, or replaced by the agent's restart
        for rank, worker in live.items():
            beat, from_log = read_beat(self.directory, rank), False
            if (beat is None or beat.pid != worker.pid) and self.logs:
                beat, from_log = self.logs.beat(worker), True
            track = self.tracks.get(rank)
            silent = track is not None and not track.from_log and (beat is None or from_log)
            if silent and track and not self._heartbeat_gone(track, beat if from_log else None):
                continue  # a torn record (retried at the next poll), or a lost heartbeat and nothing to go by
            if beat is None or beat.pid != worker.pid:
                continue
            if track is None:
                self.tracks[rank] = Track(worker, beat, now, now, from_log)
                self._first_beat(beat, now)
                continue
            if track.lost or track.from_log != from_log:  # its heartbeat is back, or its log takes over
                track.changed = max(track.changed, _written(beat, now))
                if not from_log:
                    self.log(
                        f"node {self.node_rank}: heartbeat back: rank {rank} (pid {worker.pid}) at step {beat.step}; "
                        f"judged again"
                    )
                track.lost, track.from_log = False, from_log
            if beat.seq != track.beat.seq:
                self._update(track, beat, now)
        self._stragglers()
        self._slow_steps()
        return None if self.fired else self._hang(now)

    def _heartbeat_gone(self, track: Track, logged: Beat | None) -> bool:
        """A rank whose heartbeat was read gave none this poll (True: go on with `logged`, its log's progress). A
        torn record is retried at the next poll. A file that is gone (its folder deleted: the trainer writes on into
        the unlinked file) is reported once, "heartbeat lost", and the rank's progress is read from its log where
        that has it, else the rank is not judged for hangs until its heartbeat is back. It was declared hung, its
        ranks SIGKILLed and a restart spent on a healthy job (QA 2026-12-07)."""
        rank, pid = track.worker.rank, track.worker.pid
        path = self.directory / f"rank{rank}.json"
        if path.exists():
            return False
        from_log = logged is not None and logged.pid == pid
        if not track.lost:
            then = (
                "its progress is read from its log from now on"
                if from_log
                else "not judged for hangs until it writes its heartbeat again (its log has no training line)"
            )
            self.log(
                f"node {self.node_rank}: heartbeat lost: rank {rank} (pid {pid}): {path} is gone after step "
                f"{track.beat.step}; {then}"
            )
        track.lost = not from_log
        return from_log

    def note_failure(self, now: float, ended: Iterable[int] = ()) -> None:
        """The job was interrupted (a rank died or was killed): time the resume from here. `ended`: the pids the
        watchdog killed, which stay among the agent's workers until they are reaped and must not be taken for a
        second hang (it named the healthy ranks and signalled the dead ones)."""
        self.ended.update(ended)
        for rank, track in self.tracks.items():  # the last records, the dead ranks' included
            beat = read_beat(self.directory, rank) or track.beat  # a record that is gone: the last one read
            self.last_step = max(self.last_step, beat.step)
        if self.interrupted is None:
            self.interrupted = (now, self.last_step)
        self.fired = False

    def _first_beat(self, beat: Beat, now: float) -> None:
        if beat.resumed_from is not None and self.interrupted and beat.rank == min(self.tracks):
            self.log(f"node {self.node_rank}: rank {beat.rank} resumed from the checkpoint at step {beat.resumed_from}")

    def _update(self, track: Track, beat: Beat, now: float) -> None:
        old, track.beat = track.beat, beat
        if (beat.step, beat.phase) != (old.step, old.phase):
            track.changed = max(track.changed, _written(beat, now))
        if beat.step != old.step:
            if beat.step_s is not None and old.phase == "train":  # the first step after a (re)start warms up
                track.steps.append(beat.step_s)
            elif beat.step_s is not None and track.warmup_s is None:
                track.warmup_s = beat.step_s
            self._progress(beat, now)
        if beat.checkpoint and beat.checkpoint != old.checkpoint:
            self._checkpoint(beat)

    def _progress(self, beat: Beat, now: float) -> None:
        track = self.tracks[beat.rank]
        if self.interrupted is not None and track.since >= self.interrupted[0]:  # a worker started after it
            at, last = self.interrupted
            resumed = track.beat.resumed_from or 0
            # the checkpoint resumed from was completed too: progress the watchdog did not see (a heartbeat lost) is
            # not "lost steps" below it (it said "resumed from step 25, 0 step(s) lost (last completed: 7)")
            last = max(last, resumed)
            lost = max(0, last - resumed)
            self.log(
                f"node {self.node_rank}: training again: {_first_step_done(beat, resumed, _written(beat, now) - at)}"
                f"; resumed from step {resumed}, {lost} step(s) lost (last completed: {last})"
            )
            self.interrupted = None
        self.last_step = max(self.last_step, beat.step)

    def _checkpoint(self, beat: Beat) -> None:
        ck = beat.checkpoint or {}
        key = (int(ck.get("step", -1)), bool(ck.get("saved")))
        failed, last = ck.get("failed"), ck.get("last_saved")
        if isinstance(last, int) and not isinstance(last, bool):
            self.last_saved = max(self.last_saved or 0, last)
        elif key[1]:
            self.last_saved = max(self.last_saved or 0, key[0])
        if isinstance(failed, int) and not isinstance(failed, bool) and failed > self.saves_failed:
            # the record holds the last attempt only: failures between two polls are counted here, not lost
            unseen = failed - self.saves_failed - (0 if key[1] or key in self.checkpoint_events else 1)
            self.saves_failed = failed
            if unseen > 0:
                self.log(
                    f"node {self.node_rank}: {unseen} more checkpoint save(s) failed between polls "
                    f"({failed} so far); the last good checkpoint is {_step_or_none(self.last_saved)}"
                )
        if key in self.checkpoint_events or key[1]:
            self.checkpoint_events.add(key)
            return
        self.checkpoint_events.add(key)
        self.saves_failed = max(self.saves_failed, 1)
        self.log(f"node {self.node_rank}: checkpoint at step {key[0]} not saved: {ck.get('error', '?')}")

    def checkpoint_report(self, pids: Iterable[int] = ()) -> str:
        """For the summary, after a last read of every rank's record: how many saves failed and the last good
        checkpoint ("" when none failed). A run whose last saves failed ended "exit code 0" and nothing more, its
        final checkpoint missing (QA, 2026-12-07). Only records of this run's workers count (those it polled, and
        `pids`: every worker the runner saw): a reused run directory keeps an earlier run's records, and a stale
        rank5.json made a clean 2-rank run's summary say "3 checkpoint save(s) failed" (QA 2026-12-07)."""
        ours = self.pids | set(pids)
        for path in sorted(self.directory.glob("rank*.json")):
            rank = path.stem.removeprefix("rank")
            beat = read_beat(self.directory, int(rank)) if rank.isdigit() else None
            # by pid and by time: fresh containers hand out the same pids run after run
            fresh = beat is not None and (beat.written is None or beat.written >= self.since)
            if beat is not None and fresh and beat.checkpoint and beat.pid in ours:
                self._checkpoint(beat)
        if not self.saves_failed:
            return ""
        last = _step_or_none(self.last_saved)
        return f"{self.saves_failed} checkpoint save(s) failed; the last good checkpoint is {last}"

    # Hangs -------------------------------------------------------------------------------------------------------
    def _timeout(
        self, track: Track, observed: float | None, first: float | None = None
    ) -> tuple[float, float, str] | None:
        """(deadline base, seconds, how) for this rank's phase (`observed`: the slowest recent step of any rank;
        `first`: the slowest first step, while no later one was seen); None when nothing is awaited."""
        lim, phase = self.limits, track.beat.phase
        if phase in ("start", "load"):
            how = (
                f"{lim.startup_s:g} s start-up + {lim.k:g} x ({lim.load_s:.3g} s load + "
                f"{lim.step_high_s or 0:.3g} s step) + {lim.floor_s:g} s floor"
            )
            return track.since, lim.first_step_s, how
        if phase == "save":
            return track.changed, lim.checkpoint_s, "checkpoint timeout"
        if phase == "train":
            step = lim.step_timeout(observed, lim.log_interval if track.from_log else 1, first)
            return None if step is None else (track.changed, step[0], step[1])
        if phase == "done":
            # its training is over, and so is every rank's but the tail of a step or a last save: a rank that has
            # not exited by then is stuck in its teardown (a barrier, destroying the process group); nothing was
            # awaited, and such a job held its nodes for ever (QA, 2026-12-06)
            seconds, how = lim.exit_wait()
            return track.changed, seconds, f"{how}, to exit once its training was done"
        return None

    def _deadlines(self) -> list[tuple[Track, float, float, str]]:
        """(track, monotonic deadline, seconds allowed, how) of every rank that is awaited."""
        observed = max((s for t in self.tracks.values() for s in t.steps), default=None)
        first = None
        if observed is None:
            first = max((t.warmup_s for t in self.tracks.values() if t.warmup_s is not None), default=None)
        if observed is None and not self.limits.step_high_s:
            # no prediction and no step past the first: the first one, warm-up and all, bounds the next (a rank hung
            # right after its first step was awaited by nothing, QA 2026-12-06)
            observed, first = first, None
        return [
            (t, limit[0] + limit[1], limit[1], limit[2])
            for t in self.tracks.values()
            if not t.lost and (limit := self._timeout(t, observed, first))
        ]

    def next_deadline(self) -> float | None:
        """The monotonic time at which the first rank would be overdue if it made no progress: the runner polls
        then, so that a hang is caught at its deadline rather than up to one poll after it."""
        return None if self.fired else min((d[1] for d in self._deadlines()), default=None)

    def _hang(self, now: float) -> Hang | None:
        overdue = [
            (track, now - deadline + seconds, seconds, how)
            for track, deadline, seconds, how in self._deadlines()
            if now > deadline
        ]
        if not overdue:
            return None
        # a stopped rank holds the others up, and may have made its last progress after them (each deadline runs
        # from its own rank's last write): it is named though its own deadline has not passed yet
        stopped = [t for t in self.tracks.values() if procs.state(t.worker.pid) == "T"]
        fewest = min(o[0].beat.step for o in overdue)
        named = stopped or [o[0] for o in overdue if o[0].beat.step == fewest]
        why = ""
        if not stopped and len(named) > 1:
            named, why = self._slowest_computing(named)
        self.fired = True
        culprits = tuple(
            Culprit(t.worker.rank, t.worker.pid, t.beat.step, t.beat.phase, bool(stopped), t.from_log) for t in named
        )
        _, waited, seconds, how = max(overdue, key=lambda o: o[1])
        return Hang(culprits, waited, seconds, how, self.node_rank, why)

    def _slowest_computing(self, named: list[Track]) -> tuple[list[Track], str]:
        """Of ranks stuck at the same step, none stopped: the one whose last step computed `straggler_factor` x
        longer than the others' median is the one they wait for (a rank stuck in its own work holds every other
        in the next collective, at the same step); else which one is stuck cannot be told from the heartbeats, and
        the message says so rather than call them all culprits (QA M4)."""
        computed = {t.worker.rank: t.beat.compute_s for t in named if t.beat.compute_s}
        if len(computed) == len(named):
            for track in named:
                others = statistics.median(v for r, v in computed.items() if r != track.worker.rank)
                mine = computed[track.worker.rank]
                if others > 0 and mine >= self.limits.straggler_factor * others:
                    return [track], (
                        f"its last step computed for {mine:.3g} s against the other ranks' {others:.3g} s (median): "
                        f"they wait for it"
                    )
        return named, (
            f"all {len(named)} at step {named[0].beat.step}, none stopped: which one is stuck cannot be told from "
            f"the heartbeats (the stack traces show the rank that is not in a collective)"
        )

    # Stragglers ---------------------------------------------------------------------------------------------------
    def _stragglers(self) -> None:
        lim = self.limits
        latest = {r: t.beat.compute_s for r, t in self.tracks.items() if t.beat.compute_s and t.beat.phase == "train"}
        if len(latest) < 2:
            return
        for rank, track in self.tracks.items():
            mine = latest.get(rank)
            if mine is None or track.straggler or track.judged == track.beat.seq:
                continue
            track.judged = track.beat.seq  # one judgement per heartbeat
            others = statistics.median(v for r, v in latest.items() if r != rank)
            track.slow = track.slow + 1 if others > 0 and mine >= lim.straggler_factor * others else 0
            step_s = track.beat.step_s or 0.0
            if track.slow >= lim.straggler_steps and (lim.step_high_s is None or step_s > lim.step_high_s):
                track.straggler = True
                versus = "" if lim.step_high_s is None else f", above the predicted upper bound {lim.step_high_s:.3g} s"
                self.log(
                    f"straggler: rank {rank} (pid {track.worker.pid}, node {self.node_rank}) computes in "
                    f"{mine:.3g} s, {mine / others:.1f} x the median of the other ranks ({others:.3g} s), on "
                    f"{track.slow} heartbeats in a row; steps take {step_s:.3g} s{versus}; the job goes on"
                )

    def _slow_steps(self) -> None:
        high = self.limits.step_high_s
        recent = [s for t in self.tracks.values() for s in list(t.steps)[-self.limits.straggler_steps :]]
        if self.slow_warned or high is None or len(recent) < self.limits.straggler_steps:
            return
        median = statistics.median(recent)
        if median > high:
            self.slow_warned = True
            self.log(
                f"node {self.node_rank}: steps take {median:.3g} s (median of the last heartbeats), above the "
                f"predicted upper bound {high:.3g} s"
            )
