"""Runs a list of Commands: output to per-node logs (rank 0 live on the console), signals forwarded to the
whole process tree with a grace period then SIGKILL, the job's exit code propagated, restarts logged, the ranks'
progress watched (launcher/watchdog.py), and nothing left behind even if the launcher itself is SIGKILLed
(launcher/guardian.py).

One thread, one selector: agent output pipes, pidfds of agents and workers, and the signal wake-up fd. Nothing
polls while the job runs except a /proc scan while workers are being found, the 0.25 s read of a rank-0 log file
for backends whose ranks write to files only (deepspeed), and the watchdog's read of one small heartbeat file per
local rank every poll_s (0.1-1 s).

The way from the launcher's start to the agents' Popen is kept short (docs/launcher.md, "Overhead"): what only
a running job needs (the worker and progress watches, the follower, recovery, the subreaper's ctypes) is
imported or done just after the agents start.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from launcher import procs, startup
from launcher.command import Command, is_local, launch_argv, with_max_restarts
from launcher.events import EventLog
from launcher.guardian import TOKEN_ENV, Guardian

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (mypy reads it so), without importing typing: docs/launcher.md
if TYPE_CHECKING:  # types only: the modules are imported where used, once the agents run (not before their start)
    from typing import BinaryIO

    from launcher.follow import Follower
    from launcher.limits import Limits
    from launcher.linger import Linger
    from launcher.watch import WorkerWatch
    from launcher.watchdog import Hang, ProgressWatch

    Started = tuple[Command, subprocess.Popen[bytes], BinaryIO | None, bool]  # an agent, its log, whether it is local

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PREEMPT = signal.SIGUSR1  # Slurm's `--signal=B:USR1@T`: stop gracefully (the job saves), then requeue
STOPPED_SHORT = 75  # sysexits.h EX_TEMPFAIL: the ranks exited 0 before the last step; running it again goes on
TAIL_BYTES = 64 * 1024
DEADLINE_SLACK_S = 0.002  # the watchdog's next poll: this long after the first rank's deadline, at the soonest


@dataclass
class Running:
    """An agent of the current attempt: its process, its log, what watches it and the tail of its output."""

    command: Command
    popen: subprocess.Popen[bytes]
    pidfd: int
    log: BinaryIO | None
    watch: WorkerWatch | None
    follower: Follower | None
    tail: bytearray = field(default_factory=bytearray)
    pipe_open: bool = True
    linger: Linger | None = None  # its workers all exited 0 while it still runs (torchrun's exit barrier)


@dataclass(frozen=True)
class RunPolicy:
    """What the runner does about restarts, stops and progress: derived from the plan once, in launch.py."""

    grace_s: float
    max_restarts: int
    restarts_inside: bool  # the agent restarts workers itself (torchrun); else the launcher re-runs the job
    run_dir: Path
    limits: Limits | None = None  # the watchdog's, from the plan; None: progress is not watched
    requeue_job_id: str | None = None  # SLURM_JOB_ID: `scontrol requeue` it after a preemption notice
    train_iters: int | None = None  # the trainer's --train-iters: a job whose ranks all exit 0 short of it stopped
    log_interval: int = 1  # steps per training log line, where progress is read from the logs
    resume_hint: str = "run the same command to go on from its last checkpoint"  # LaunchContext.resume_hint
    checkpoint_dirs: tuple[Path, ...] = ()  # the job's --save directories where this launcher can see them

    def resume(self) -> str:
        """How to go on after the job stopped: `resume_hint`, unless no checkpoint was saved yet (every checkpoint
        directory missing or empty), when the next run starts from step 0 (it said "go on from its last checkpoint",
        QA 2026-12-07). Without a directory to look at (none named, or on another machine) the hint stands."""
        if not self.checkpoint_dirs or any(_has_entries(d) for d in self.checkpoint_dirs):
            return self.resume_hint
        where = ", ".join(str(d) for d in self.checkpoint_dirs)
        return f"no checkpoint was saved yet ({where} empty): the next run starts from step 0"


def _has_entries(directory: Path) -> bool:
    """The directory holds something (or cannot be read: then it may)."""
    try:
        with os.scandir(directory) as entries:
            return next(entries, None) is not None
    except FileNotFoundError:
        return False
    except OSError:
        return True


@contextlib.contextmanager
def signals_to_fd() -> Iterator[int]:
    """Deliver SIGINT/SIGTERM/SIGHUP/SIGUSR1 as bytes on a pipe the selector watches."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    old = {s: signal.signal(s, lambda *_: None) for s in (*FORWARDED, PREEMPT)}
    try:
        yield r
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(old_fd)
        os.close(r)
        os.close(w)


class Runner:
    def __init__(
        self, commands: list[Command], policy: RunPolicy, log: EventLog, console: BinaryIO | None = None
    ) -> None:
        self.commands, self.policy, self.log = commands, policy, log
        self.console = console if console is not None else sys.stdout.buffer
        self.signalled: int | None = None
        self.selector = selectors.DefaultSelector()
        self.running: list[Running] = []
        self.failed_rc: int | None = None
        self.stopping = False
        self.stop_deadline: float | None = None  # when the grace period ends (None: not stopping, or killed)
        self.restarts = 0
        self.agent_restarts = 0  # worker-group restarts the agents did themselves, over all attempts
        self.agent_killed: str | None = None  # an agent died of a signal the launcher did not send
        self.hang: Hang | None = None
        self.hang_group: tuple[WorkerWatch, int] | None = None  # the watch and worker group the hang was in
        self.short: str | None = None  # why a job that exited 0 stopped short of its last step
        self.unrecorded = False  # a job of --train-iters that exited 0 with no step reported by any rank
        self.progress: dict[int | None, ProgressWatch] = {}
        self.next_poll = 0.0
        self.guardian: Guardian | None = None
        self.before: frozenset[int] = frozenset()

    def run(self) -> int:
        # Children this process had before the job (a program that embeds the runner, e.g. its multiprocessing
        # forkserver) are not the job's: cleanup never signals or reaps them, nor anything below them.
        self.before = frozenset(procs.children(os.getpid()))
        self.guardian = Guardian(self.before)  # first: it must exist before anything it guards
        try:
            with signals_to_fd() as sig_fd:
                self.selector.register(sig_fd, selectors.EVENT_READ, ("signal", None))
                code = self._attempts()
        finally:
            self.selector.close()
            self.guardian.close()
        if self.signalled == PREEMPT:
            from launcher import recovery

            recovery.requeue(self.policy.requeue_job_id, self.log)
        return code

    def _attempts(self) -> int:
        attempt, started = 0, time.monotonic()
        while True:
            code = self._attempt(attempt)
            reason = self._restartable(code)
            if reason is None:
                break
            attempt += 1
            self.restarts = attempt
            self.log(f"restart {self.restarts + self.agent_restarts} of at most {self.policy.max_restarts}: {reason}")
        if code == 0 and not self.signalled and self.policy.train_iters is not None:
            reached, logged = self._last_step()
            # no heartbeat and no training log line: how far it trained is not known (said, not failed: a run
            # resumed from its last iteration's checkpoint trains nothing and exits 0 rightly)
            self.unrecorded = reached is None
            self.short = None if reached is None else self._short_of(reached, logged, self.policy.train_iters)
            code = STOPPED_SHORT if self.short else 0
        self._summary(code, time.monotonic() - started)
        return code

    def _last_step(self) -> tuple[int | None, bool]:
        """The last step the ranks of the job's last worker groups reported, and whether it came from the training
        log (None: none reported one): their heartbeats, else the log each agent captured, read to the end (the
        ranks may have logged after the watchdog's last poll)."""
        from launcher.heartbeat import HEARTBEAT_DIR, read_beat
        from launcher.logprogress import LogProgress

        reached, logged = None, False
        for r in self.running:
            if r.watch is None:
                continue
            for death in r.watch.deaths[-r.watch.expected :]:
                beat = read_beat(self.policy.run_dir / HEARTBEAT_DIR, death.worker.rank)
                if beat is not None and beat.pid == death.worker.pid:
                    reached = max(reached or 0, beat.step, beat.resumed_from or 0)
            if reached is None:
                progress = self.progress.get(r.command.node_rank)
                logs = progress.logs if progress and progress.logs else LogProgress(Path(r.command.log).parent)
                steps = [b.step for d in r.watch.deaths[-r.watch.expected :] if (b := logs.beat(d.worker))]
                if steps:
                    reached, logged = max(steps), True
        return reached, logged

    def _short_of(self, reached: int, logged: bool, total: int) -> str | None:
        """Why a job whose ranks all exited 0, with no stop asked of the launcher, did not finish its training: the
        last step its ranks reported (`_last_step`) is short of --train-iters. A signal sent to the ranks themselves
        (an operator's kill, a health daemon, Slurm's --signal without B:), Megatron's --exit-duration-in-mins or
        --exit-interval all end a run so, with exit code 0 (training.py `sys.exit(exit_code)`); reported as success,
        a workflow went on as if the training had finished (QA, 2026-12-07)."""
        unlogged = self.policy.log_interval - 1 if logged else 0  # steps after the last log line
        if reached + unlogged >= total:
            return None
        seen = f"its last logged step {reached}" if logged else f"step {reached}"
        return (
            f"every rank exited 0 at {seen} of --train-iters {total}, and no stop was asked of the launcher: a "
            f"signal sent to the ranks themselves, --exit-duration-in-mins or --exit-interval ended the training; "
            f"{self.policy.resume()}"
        )

    def _restartable(self, code: int) -> str | None:
        """Why the launcher runs the job again (None: it does not), within the restart budget."""
        p = self.policy
        left = p.max_restarts - self.restarts - self.agent_restarts
        if code == 0 or self.signalled or left <= 0:
            return None
        if not p.restarts_inside:
            return f"the job failed with exit code {code}"
        # The agent failed with restarts left: it was killed, or it could not regroup (its rendezvous store went
        # away). Its successor gets what is left of the budget.
        self.commands = [with_max_restarts(c, left - 1) for c in self.commands]
        return self.agent_killed or f"the agent failed (exit code {code}) before using its restarts"

    # One attempt --------------------------------------------------------------------------------------------
    def _attempt(self, attempt: int) -> int:
        self.running, self.failed_rc, self.stopping, self.stop_deadline = [], None, False, None
        self.agent_killed = None
        started, failed = [], None
        for command in self.commands:  # every agent first; what watches them is set up once they all run
            try:
                started.append(self._start(command, attempt))
            except OSError as exc:
                failed = f"cannot start node {command.node_rank}: {exc}"
                break
        self.running = [self._watch(*agent) for agent in started]
        # Orphans of killed agents come back to us and are cleaned up. Set after the Popen (ctypes costs ~5 ms
        # of start-up): an agent that has just been exec'd has no children yet that could be orphaned, and the
        # guardian's sweep by TRAINPLAN_LAUNCH_ID (at close, or when we die) reaches even those that were.
        procs.make_subreaper()
        startup.resume_collection()  # deferred by `python -m launcher` until the agents run
        if failed:
            self.log(failed)
            self.failed_rc = 127
            self._begin_stop(signal.SIGTERM, "a command could not start")
        try:
            while any(r.popen.returncode is None for r in self.running):
                self._step()
        except BaseException:
            self.log("launcher error: killing the job before re-raising")
            self._signal_tree(signal.SIGKILL)
            for r in self.running:
                r.popen.wait()
            raise
        finally:
            self._finish_attempt()
        return self._exit_code()

    def _start(self, command: Command, attempt: int) -> Started:
        """Open the agent's log and start the agent; raises OSError if it cannot be started."""
        local = command.host == "localhost" or is_local(command.host)
        log: BinaryIO | None = None
        try:
            log = open(command.log, "ab", buffering=0)  # noqa: SIM115 (closed in _finish_attempt)
            log.write(f"=== attempt {attempt}: {command.shell()}\n".encode())
        except OSError as exc:
            log = self._log_lost(log, command, exc)
        assert self.guardian is not None
        env = {**(command.env if local else os.environ), TOKEN_ENV: self.guardian.token}
        popen = subprocess.Popen(
            launch_argv(command, local),
            env=env,
            cwd=command.cwd,
            stdin=subprocess.DEVNULL if local else subprocess.PIPE,  # ssh -tt: keep its stdin open
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert popen.stdout is not None
        os.set_blocking(popen.stdout.fileno(), False)
        where = "" if local else f" on {command.host} over ssh"
        self.log(f"node {command.node_rank}: started pid {popen.pid}{where}", echo=False)
        return command, popen, log, local

    def _watch(self, command: Command, popen: subprocess.Popen[bytes], log: BinaryIO | None, local: bool) -> Running:
        """What watches an agent that has started: its workers, their progress, its output."""
        from launcher.follow import Follower
        from launcher.heartbeat import HEARTBEAT_DIR
        from launcher.watch import WorkerWatch
        from launcher.watchdog import ProgressWatch

        assert popen.stdout is not None
        watch = None
        if local and command.workers:
            name = "workers.json" if command.node_rank is None else f"workers.node{command.node_rank}.json"
            watch = WorkerWatch(
                popen.pid,
                command.workers,
                command.node_rank,
                self.selector,
                self.log,
                self.policy.run_dir / name,
                self.policy.max_restarts,
                self.policy.run_dir / HEARTBEAT_DIR,
                self.restarts + self.agent_restarts,
            )
            if self.policy.limits and command.node_rank not in self.progress:
                self.progress[command.node_rank] = ProgressWatch(
                    self.policy.limits,
                    self.policy.run_dir / HEARTBEAT_DIR,
                    command.node_rank,
                    self.log,
                    Path(command.log).parent,
                )
        follower = Follower(command.follow, self.console) if command.follow and command.console else None
        running = Running(command, popen, os.pidfd_open(popen.pid), log, watch, follower)
        self.selector.register(popen.stdout.fileno(), selectors.EVENT_READ, ("out", running))
        self.selector.register(running.pidfd, selectors.EVENT_READ, ("agent", running))
        return running

    def _log_lost(self, log: BinaryIO | None, command: Command, exc: OSError) -> BinaryIO | None:
        """An agent log that cannot be written (a full disk): the job goes on, its output reaches the console."""
        if log is not None:
            with contextlib.suppress(OSError):
                log.close()
        self.log(f"cannot write {command.log} ({exc.strerror}); the job goes on without this log")
        return None

    def _timeout(self) -> float | None:
        waits = []
        if any(r.watch and r.watch.scanning for r in self.running if r.popen.returncode is None):
            waits.append(0.2)
        if any(r.follower for r in self.running):
            waits.append(0.25)
        if self.progress and self.policy.limits and not self.stopping:
            waits.append(max(0.0, self.next_poll - time.monotonic()))
        if self.stop_deadline is not None:
            waits.append(max(0.0, self.stop_deadline - time.monotonic()))
        waits += [max(0.0, linger.deadline() - time.monotonic()) for _, linger in self._lingering()]
        return min(waits) if waits else None

    def _step(self) -> None:
        for key, _ in self.selector.select(self._timeout()):
            kind, obj = key.data[0], key.data[1]
            if kind == "out":
                self._read_output(obj)
            elif kind == "agent":
                self._on_agent_exit(obj)
            elif kind == "worker":
                self._on_worker_exit(obj, key.data[2])
            else:
                self._on_signal(key.fd)
        for r in self.running:
            if r.watch and r.popen.returncode is None:
                r.watch.tick()
            if r.follower:
                r.follower.poll()
        now = time.monotonic()
        if self.progress and self.policy.limits and not self.stopping and now >= self.next_poll:
            self._watch_progress(now)
            deadlines = [d + DEADLINE_SLACK_S for p in self.progress.values() if (d := p.next_deadline()) is not None]
            self.next_poll = max(min([now + self.policy.limits.poll_s, *deadlines]), now + DEADLINE_SLACK_S)
        if self.stop_deadline is not None and time.monotonic() >= self.stop_deadline:
            self._kill_all()
        for r, linger in self._lingering():
            others = [o.command.node_rank for o in self.running if o is not r and o.popen.returncode is None]
            if linger.act(time.monotonic(), r.popen.pid, others, self.log) and r.watch:
                r.watch.stopping = True  # the deaths that follow (a teardown the agent cuts short) are ours

    # Progress -------------------------------------------------------------------------------------------------
    def _watch_progress(self, now: float) -> None:
        for r in self.running:
            progress = self.progress.get(r.command.node_rank)
            if r.watch is None or progress is None or r.popen.returncode is not None:
                continue
            hang = progress.poll(r.watch.workers(), now)
            if hang:
                from launcher import recovery

                # the latest hang, with the worker group it stopped: the summary cites it only if that group is
                # the one the job ended with (it cited the first hang's pids beside a later group's, QA L4)
                self.hang, self.hang_group = hang, (r.watch, r.watch.restarts)
                assert self.policy.limits is not None
                left = self.policy.max_restarts - self.restarts - self.agent_restarts - r.watch.restarts
                recovery.tear_down_hung(
                    r.watch, progress, hang, self.policy.run_dir, self.policy.limits.stack_traces, self.log, left > 0
                )
                progress.note_failure(time.monotonic(), ended=r.watch.killed)

    def _on_worker_exit(self, watch: WorkerWatch, pid: int) -> None:
        death = watch.on_exit(pid)
        progress = self.progress.get(watch.node_rank)
        if death and death.interrupts and progress:  # times the resume ("training again") from here
            progress.note_failure(time.monotonic())
        r = next(r for r in self.running if r.watch is watch)
        if not self.stopping and not (r.linger and r.linger.ended):  # an agent being ended stays so
            from launcher.linger import arm

            r.linger = arm(watch, self.policy.limits, time.monotonic())

    # Agents that outlive their workers (launcher/linger.py) -------------------------------------------------------
    def _lingering(self) -> list[tuple[Running, Linger]]:
        """Agents whose workers have all finished while they still run (not while a restarted group runs), and
        those the launcher has begun to end."""
        if self.stopping:
            return []
        return [
            (r, r.linger)
            for r in self.running
            if r.linger
            and (r.linger.ended or r.linger.teardown or (r.watch and r.watch.succeeded))
            and r.popen.returncode is None
        ]

    # Events -----------------------------------------------------------------------------------------------------
    def _read_output(self, r: Running) -> None:
        assert r.popen.stdout is not None
        while r.pipe_open:
            try:
                data = os.read(r.popen.stdout.fileno(), 65536)
            except BlockingIOError:
                return
            if not data:
                self.selector.unregister(r.popen.stdout.fileno())
                r.pipe_open = False
                return
            if r.log is not None:
                try:
                    r.log.write(data)
                except OSError as exc:
                    r.log = self._log_lost(r.log, r.command, exc)
            r.tail += data
            del r.tail[:-TAIL_BYTES]
            if r.command.console and not r.follower:
                with contextlib.suppress(OSError, ValueError):
                    self.console.write(data)
                    self.console.flush()

    def _on_agent_exit(self, r: Running) -> None:
        code = r.popen.wait()
        self.selector.unregister(r.pidfd)
        os.close(r.pidfd)
        self._read_output(r)
        if r.pipe_open:  # a leftover grandchild holds the pipe: stop reading it
            assert r.popen.stdout is not None
            self.selector.unregister(r.popen.stdout.fileno())
            r.pipe_open = False
        if r.follower:
            r.follower.poll()
        node = r.command.node_rank
        from launcher import recovery

        if recovery.node_finished(code, r.watch, r.linger, self.stopping, node, self.log):
            return
        self.log(f"node {node}: agent {procs.describe_returncode(code)}", echo=code != 0)
        if code < 0 and not self.stopping and not self.signalled:  # killed, and not by us
            self.agent_killed = f"the agent on node {node} was {procs.describe_returncode(code)}"
            progress = self.progress.get(node)
            if progress:
                progress.note_failure(time.monotonic())
        code = recovery.job_code(code, r.tail.decode(errors="replace"), r.watch, self.stopping, node, self.log)
        if code != 0 and self.failed_rc is None:
            self.failed_rc = code
            self._begin_stop(signal.SIGTERM, f"node {node} failed")

    def _on_signal(self, fd: int) -> None:
        with contextlib.suppress(BlockingIOError):
            for sig in os.read(fd, 64):
                if self.signalled is not None and sig == signal.SIGINT:
                    self._kill_all("second SIGINT: killing the job now")
                self.signalled = self.signalled or sig
                if sig == PREEMPT:
                    self._begin_stop(signal.SIGTERM, "received SIGUSR1 (preemption notice): the job saves and stops")
                elif sig == signal.SIGHUP:  # a closed terminal or ssh session: trainers save on SIGTERM (Megatron's
                    # --exit-signal-handler takes SIGTERM alone), and die of a SIGHUP passed on as it is
                    self._begin_stop(
                        signal.SIGTERM, "received SIGHUP (terminal or session closed): the job saves and stops"
                    )
                else:
                    self._begin_stop(signal.Signals(sig), f"received {procs.signal_name(sig)}")

    def _begin_stop(self, sig: signal.Signals, reason: str) -> None:
        if self.stopping:
            return
        alive = [r for r in self.running if r.popen.returncode is None]
        if not alive:
            return
        self.stopping, self.stop_deadline = True, time.monotonic() + self.policy.grace_s
        for r in self.running:
            if r.watch:
                r.watch.stopping = True
        self.log(f"{reason}: sending {sig.name} to the job, SIGKILL in {self.policy.grace_s:g} s")
        self._signal_tree(sig)

    def _signal_tree(self, sig: int) -> int:
        """Signal every agent's process group and every process below the launcher (workers run in their
        own sessions, so a group alone would miss them)."""
        for r in self.running:
            if r.popen.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(r.popen.pid, sig)
        return len(procs.signal_pids(self._below(), sig))

    def _kill_all(self, why: str = "grace period over") -> None:
        n = self._signal_tree(signal.SIGKILL)
        self.log(f"{why}: sent SIGKILL to {n} process(es)")
        self.stopping, self.stop_deadline = True, None  # nothing more to escalate to

    def _finish_attempt(self) -> None:
        """Nothing may outlive the job: kill and collect whatever is left below the launcher."""
        own = {r.popen.pid for r in self.running}
        while self.stop_deadline is not None and time.monotonic() < self.stop_deadline and self._leftovers():
            self._drain(0.1)
            procs.reap_orphans(own, self.before)  # orphans of a stopped agent get the rest of the grace period
        for attempt in range(50):
            left = self._leftovers()
            if not left:
                break
            if attempt == 0:
                self.log(f"killing {len(left)} leftover process(es): {left}")
            for r in self.running:
                if r.watch:
                    r.watch.end_leftovers(left)
            procs.signal_pids(left, signal.SIGKILL)
            procs.reap_orphans(own, self.before)
            time.sleep(0.1)
        procs.reap_orphans(own, self.before)
        # the exits of ranks killed just now (SIGKILL at the grace period's end): into the worker table and the log
        # before the watches close (workers.node0.json said "alive" for them, QA 2026-12-07)
        self._drain(0)
        for r in self.running:
            self.agent_restarts += r.watch.restarts if r.watch else 0
            for closable in (r.watch, r.follower, r.popen.stdout, r.popen.stdin, r.log):
                if closable is not None:
                    with contextlib.suppress(OSError):
                        closable.close()

    def _drain(self, timeout: float) -> None:
        """While the ranks of a stopped agent finish in the grace period: their exits (read before they are reaped)
        and the console's last lines. DeepSpeed's runner dies of the SIGTERM at once while its ranks save and exit
        after it: the console and launcher.log ended at the save before (QA L2). A second SIGINT still kills."""
        for key, _ in self.selector.select(timeout):
            kind, obj = key.data[0], key.data[1]
            if kind == "worker":
                self._on_worker_exit(obj, key.data[2])
            elif kind == "signal":
                self._on_signal(key.fd)
        for r in self.running:
            if r.follower:
                r.follower.poll()

    def _below(self) -> list[int]:
        guardian = self.guardian.pid if self.guardian else -1
        return [p for p in procs.descendants(os.getpid(), self.before) if p != guardian]

    def _leftovers(self) -> list[int]:
        return [p for p in self._below() if procs.zombie_status(p) is None]

    # Results --------------------------------------------------------------------------------------------------
    def _exit_code(self) -> int:
        if self.signalled:
            return 128 + self.signalled
        rc = self.failed_rc or 0
        return 128 - rc if rc < 0 else rc

    def _summary(self, code: int, elapsed_s: float) -> None:
        from launcher import recovery

        watched = [(r.watch, r.tail.decode(errors="replace"), r.command.log) for r in self.running]
        last = self.hang_group is not None and any(
            r.watch is self.hang_group[0] and r.watch.restarts == self.hang_group[1] for r in self.running
        )
        hang = self.hang if last else None
        used, budget = self.restarts + self.agent_restarts, self.policy.max_restarts
        # a failure that ends the job once every restart is spent says so (it did not, QA 2026-12-07)
        spent = f"no restart left ({used} of at most {budget} used)" if budget and used >= budget else ""
        line = recovery.summary(
            code,
            elapsed_s,
            watched,
            hang,
            self.signalled,
            self.short,
            self.policy.resume(),
            self.agent_killed,
            spent,
            self.unrecorded,
        )
        seen = [pid for r in self.running if r.watch for pid in r.watch.seen]  # a rank that ended before a poll
        notes = [note for p in self.progress.values() if (note := p.checkpoint_report(seen))]
        self.log("; ".join([line, *notes[:1]]))
