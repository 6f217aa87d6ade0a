"""Nothing outlives a launcher that is SIGKILLed: a guardian process kills the job when the launcher dies.

The launcher forks the guardian first thing, before it starts anything, and keeps the write end of a pipe whose
read end only the guardian holds. The kernel closes that end when the launcher exits for any reason, SIGKILL
included; the guardian then sees end-of-file and SIGKILLs every process whose environment carries this run's
TRAINPLAN_LAUNCH_ID (each command gets it, and every process below inherits it, orphans that escaped their parent
too). A parent-death signal (PR_SET_PDEATHSIG) alone would not do: it reaches only the direct children (the
agents), not the workers they start in their own sessions. The guardian runs in its own session, so the signals
that stop the launcher's terminal group (Ctrl-C) do not stop it first.

A process a rank starts with an environment of its own (an uploader, a profiler: `Popen(..., env={...})`) does not
carry the token: the guardian also records, every `RECORD_S` while it waits, the processes below the launcher (by
pid and start time, so that a recycled pid is never taken for one of them), and kills those that are still there
once the launcher is gone (QA M7: such a helper in its own session outlived a SIGKILLed launcher).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time

from launcher import procs

TOKEN_ENV = "TRAINPLAN_LAUNCH_ID"
SWEEPS = 50
RECORD_S = 1.0  # how often the guardian records the processes below the launcher: /proc/<pid>/task/*/children reads


def carrying(token: str) -> list[int]:
    """Processes (not the caller) whose environment has TRAINPLAN_LAUNCH_ID=token."""
    me, found = os.getpid(), []
    for name in os.listdir(procs.PROC):
        if name.isdigit() and int(name) != me and procs.environ(int(name)).get(TOKEN_ENV) == token:
            found.append(int(name))
    return found


def _detach(read_fd: int) -> None:
    """Hold none of the launcher's files (a reader of its output must see end-of-file when it exits)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, read_fd)
    os.closerange(read_fd + 1, 1 << 16)
    os.setsid()


def _record(launcher: int, skip: frozenset[int], seen: dict[int, int]) -> None:
    """Add the processes below the launcher (less the subtrees in `skip`) to `seen`: pid -> start time."""
    for pid in procs.descendants(launcher, skip):
        started = procs.start_ticks(pid)
        if started is not None:
            seen.setdefault(pid, started)


def _watch(read_fd: int, token: str, skip: frozenset[int]) -> None:
    launcher = os.getppid()
    _detach(read_fd)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    seen: dict[int, int] = {}
    with contextlib.suppress(OSError):
        while True:
            ready, _, _ = select.select([read_fd], [], [], RECORD_S)
            if ready and not os.read(read_fd, 64):
                break  # end of file: the launcher is gone (or closed it when done)
            _record(launcher, skip | {os.getpid()}, seen)
    for _ in range(SWEEPS):
        recorded = [p for p, started in seen.items() if procs.start_ticks(p) == started]
        left = [p for p in {*carrying(token), *recorded} if procs.state(p) not in (None, "Z")]
        if not left:
            return
        procs.signal_pids(left, signal.SIGKILL)
        time.sleep(0.1)


class Guardian:
    def __init__(self, skip: frozenset[int] = frozenset()) -> None:
        """`skip`: children the launcher's process had before the job (not the job's; never recorded)."""
        self.token = os.urandom(16).hex()  # 32 hex digits, like uuid4().hex, without importing uuid (~2.5 ms)
        read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        self.pid = os.fork()
        if self.pid == 0:  # the guardian: only os-level calls from here on, then _exit
            try:
                _watch(read_fd, self.token, skip)
            finally:
                os._exit(0)
        os.close(read_fd)

    def close(self) -> None:
        """The launcher is done (it cleaned up itself): let the guardian sweep once and exit, and collect it."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
