"""Runs a list of Commands: output to per-node logs (rank 0 live on the console), signals forwarded to the
whole process tree with a grace period then SIGKILL, the job's exit code propagated, restarts logged.

One thread, one selector: agent output pipes, pidfds of agents and workers, and the signal wake-up fd.
Nothing polls while the job runs, except a /proc scan while workers are being found and the 0.25 s read of
a rank-0 log file for backends whose ranks write to files only (deepspeed).
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
from typing import BinaryIO

from launcher import procs
from launcher.command import Command, is_local, launch_argv
from launcher.events import EventLog
from launcher.explain import agent_report
from launcher.follow import Follower
from launcher.watch import WorkerWatch

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TAIL_BYTES = 64 * 1024


@dataclass
class Running:
    command: Command
    popen: subprocess.Popen[bytes]
    pidfd: int
    log: BinaryIO
    watch: WorkerWatch | None
    follower: Follower | None
    tail: bytearray = field(default_factory=bytearray)
    pipe_open: bool = True


@dataclass(frozen=True)
class RunPolicy:
    grace_s: float
    max_restarts: int
    restarts_inside: bool  # the agent restarts workers itself (torchrun); else the launcher re-runs the job
    run_dir: Path


@contextlib.contextmanager
def signals_to_fd() -> Iterator[int]:
    """Deliver SIGINT/SIGTERM/SIGHUP as bytes on a pipe the selector watches."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    old = {s: signal.signal(s, lambda *_: None) for s in FORWARDED}
    try:
        yield r
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(old_fd)
        os.close(r)
        os.close(w)


class Runner:
    def __init__(self, commands: list[Command], policy: RunPolicy, log: EventLog,
                 console: BinaryIO | None = None) -> None:
        self.commands, self.policy, self.log = commands, policy, log
        self.console = console if console is not None else sys.stdout.buffer
        self.signalled: int | None = None
        self.selector = selectors.DefaultSelector()
        self.running: list[Running] = []
        self.failed_rc: int | None = None
        self.stopping = False
        self.stop_deadline: float | None = None  # when the grace period ends (None: not stopping, or killed)
        self.restarts = 0

    def run(self) -> int:
        procs.make_subreaper()  # orphans of killed agents come back to us and are cleaned up
        with signals_to_fd() as sig_fd:
            self.selector.register(sig_fd, selectors.EVENT_READ, ("signal", None))
            code = self._attempts()
        self.selector.close()
        return code

    def _attempts(self) -> int:
        attempt, started = 0, time.monotonic()
        while True:
            code = self._attempt(attempt)
            p = self.policy
            if code == 0 or self.signalled or p.restarts_inside or attempt >= p.max_restarts:
                break
            attempt += 1
            self.restarts = attempt
            self.log(f"restart {attempt} of at most {p.max_restarts}: the job failed with exit code {code}")
        self._summary(code, time.monotonic() - started)
        return code

    # One attempt --------------------------------------------------------------------------------------------
    def _attempt(self, attempt: int) -> int:
        self.running, self.failed_rc, self.stopping, self.stop_deadline = [], None, False, None
        for command in self.commands:
            try:
                self.running.append(self._start(command, attempt))
            except OSError as exc:
                self.log(f"cannot start node {command.node_rank}: {exc}")
                self.failed_rc = 127
                self._begin_stop(signal.SIGTERM, "a command could not start")
                break
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

    def _start(self, command: Command, attempt: int) -> Running:
        local = command.host == "localhost" or is_local(command.host)
        log = open(command.log, "ab", buffering=0)  # noqa: SIM115 (closed in _finish_attempt)
        log.write(f"=== attempt {attempt}: {command.shell()}\n".encode())
        popen = subprocess.Popen(
            launch_argv(command, local), env=command.env if local else dict(os.environ), cwd=command.cwd,
            stdin=subprocess.DEVNULL if local else subprocess.PIPE,  # ssh -tt: keep its stdin open
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        assert popen.stdout is not None
        os.set_blocking(popen.stdout.fileno(), False)
        watch = None
        if local and command.workers:
            name = "workers.json" if command.node_rank is None else f"workers.node{command.node_rank}.json"
            watch = WorkerWatch(popen.pid, command.workers, command.node_rank, self.selector, self.log,
                                self.policy.run_dir / name, self.policy.max_restarts)
        follower = Follower(command.follow, self.console) if command.follow and command.console else None
        running = Running(command, popen, os.pidfd_open(popen.pid), log, watch, follower)
        self.selector.register(popen.stdout.fileno(), selectors.EVENT_READ, ("out", running))
        self.selector.register(running.pidfd, selectors.EVENT_READ, ("agent", running))
        where = "" if local else f" on {command.host} over ssh"
        self.log(f"node {command.node_rank}: started pid {popen.pid}{where}", echo=False)
        return running

    def _timeout(self) -> float | None:
        waits = []
        if any(r.watch and r.watch.scanning for r in self.running if r.popen.returncode is None):
            waits.append(0.2)
        if any(r.follower for r in self.running):
            waits.append(0.25)
        if self.stop_deadline is not None:
            waits.append(max(0.0, self.stop_deadline - time.monotonic()))
        return min(waits) if waits else None

    def _step(self) -> None:
        for key, _ in self.selector.select(self._timeout()):
            kind, obj = key.data[0], key.data[1]
            if kind == "out":
                self._read_output(obj)
            elif kind == "agent":
                self._on_agent_exit(obj)
            elif kind == "worker":
                obj.on_exit(key.data[2])
            else:
                self._on_signal(key.fd)
        for r in self.running:
            if r.watch and r.popen.returncode is None:
                r.watch.tick()
            if r.follower:
                r.follower.poll()
        if self.stop_deadline is not None and time.monotonic() >= self.stop_deadline:
            self._kill_all()

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
            r.log.write(data)
            r.tail += data
            del r.tail[:-TAIL_BYTES]
            if r.command.console and not r.follower:
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
        self.log(f"node {r.command.node_rank}: agent {procs.describe_returncode(code)}", echo=code != 0)
        if code != 0 and self.failed_rc is None:
            self.failed_rc = code
            self._begin_stop(signal.SIGTERM, f"node {r.command.node_rank} failed")

    def _on_signal(self, fd: int) -> None:
        with contextlib.suppress(BlockingIOError):
            for sig in os.read(fd, 64):
                if self.signalled is not None and sig == signal.SIGINT:
                    self.log("second SIGINT: killing the job now")
                    self._kill_all()
                self.signalled = self.signalled or sig
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
        return len(procs.signal_pids(procs.descendants(os.getpid()), sig))

    def _kill_all(self) -> None:
        n = self._signal_tree(signal.SIGKILL)
        self.log(f"grace period over: sent SIGKILL to {n} process(es)")
        self.stopping, self.stop_deadline = True, None  # nothing more to escalate to

    def _finish_attempt(self) -> None:
        """Nothing may outlive the job: kill and collect whatever is left below the launcher."""
        own = {r.popen.pid for r in self.running}
        while self.stop_deadline is not None and time.monotonic() < self.stop_deadline and self._leftovers():
            procs.reap_orphans(own)  # orphans of a stopped agent get the rest of the grace period
            time.sleep(0.1)
        for attempt in range(50):
            left = self._leftovers()
            if not left:
                break
            if attempt == 0:
                self.log(f"killing {len(left)} leftover process(es): {left}")
            procs.signal_pids(left, signal.SIGKILL)
            procs.reap_orphans(own)
            time.sleep(0.1)
        procs.reap_orphans(own)
        for r in self.running:
            if r.watch:
                r.watch.close()
            if r.follower:
                r.follower.close()
            if r.popen.stdout:
                r.popen.stdout.close()
            if r.popen.stdin:
                r.popen.stdin.close()
            r.log.close()

    def _leftovers(self) -> list[int]:
        return [p for p in procs.descendants(os.getpid()) if procs.zombie_status(p) is None]

    # Results --------------------------------------------------------------------------------------------------
    def _exit_code(self) -> int:
        if self.signalled:
            return 128 + self.signalled
        rc = self.failed_rc or 0
        return 128 - rc if rc < 0 else rc

    def _summary(self, code: int, elapsed_s: float) -> None:
        if code == 0:
            self.log(f"job finished: exit code 0 after {elapsed_s:.1f} s")
            return
        why = [d.describe() for r in self.running if r.watch and (d := r.watch.first_failure)]
        reports = [rep for r in self.running if (rep := agent_report(r.tail.decode(errors="replace")))]
        if self.signalled:
            why.insert(0, f"stopped by {procs.signal_name(self.signalled)}")
        detail = "; ".join(why[:1] + reports[:1]) or "see the logs"
        logs = sorted({str(Path(r.command.log).parent) for r in self.running})
        self.log(f"job failed: exit code {code} after {elapsed_s:.1f} s; {detail}; logs: {', '.join(logs)}")
