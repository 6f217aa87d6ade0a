"""An agent that outlives its workers: torchrun's exit barrier, bounded by the plan; and a finished group that
torchrun would restart because a rank failed in its teardown.

Once every worker of a node has exited 0, its torchrun agent waits in an exit barrier for every other node's agent
(torch/distributed/elastic/agent/server/api.py `_exit_barrier`: 300 s by default, not settable from the torchrun
command line). An agent that never arrives there (stopped, wedged in its own teardown, cut off from the store)
keeps every other node's launcher waiting that long after the training itself has finished. The other nodes' ranks
have passed the job's last collective too, so all they may still do is the tail of a step or a final checkpoint
save: the launcher gives the agent that long (`Limits.exit_wait`), then ends it: SIGTERM, then SIGKILL after
TERM_S. The agent turns a SIGTERM into an exception only between Python steps, and the barrier's store wait is one
C++ call that returns at its own timeout (seen: a SIGTERMed agent in the barrier still there 15 s later), so the
job's grace period, meant for saving, would only be waited out. The node's result is its workers' success: the
agent's own exit code or signal after that is not a failure.

A rank that fails after its heartbeat said its training was done (a crash while destroying the process group,
an abort at interpreter exit) fails the worker group in torchrun's eyes, which restarts it: every rank loads the
last checkpoint again to find nothing left to train, minutes on a large model. When every rank of the node had
finished, the launcher ends the agent at once instead (bound 0), and the node succeeded.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

from launcher.limits import Limits
from launcher.watch import WorkerWatch

TERM_S = 2.0  # from the SIGTERM to the SIGKILL of a lingering agent


@dataclass
class Linger:
    node: int | None
    workers: int  # the node's workers, all exited 0
    since: float  # monotonic time the last of them exited
    bound_s: float  # how long the agent may outlive them (Limits.exit_wait)
    how: str  # where the bound comes from, for the message
    teardown: tuple[int, ...] = ()  # ranks that failed only in their teardown, after reporting done
    ended_at: float | None = None  # when the launcher sent the SIGTERM
    killed: bool = False

    def deadline(self) -> float:
        """When the launcher next acts on the agent (inf: it has done all it can)."""
        if self.killed:
            return float("inf")
        return self.since + self.bound_s if self.ended_at is None else self.ended_at + TERM_S

    def due(self, now: float) -> signal.Signals | None:
        """The signal the agent gets now: SIGTERM once the bound has passed, SIGKILL TERM_S later."""
        if now < self.deadline():
            return None
        if self.ended_at is None:
            self.ended_at = now
            return signal.SIGTERM
        self.killed = True
        return signal.SIGKILL

    @property
    def ended(self) -> bool:
        """The launcher ended the agent: its exit (whatever its code or signal) follows the workers' success."""
        return self.ended_at is not None

    def act(self, now: float, pgid: int, others: list[int | None], log: Callable[[str], None]) -> bool:
        """Signal the agent's process group `pgid` if `due`, saying why (True when it was signalled); `others`: the
        nodes still running under this launcher."""
        sig = self.due(now)
        if sig == signal.SIGTERM:
            log(self.describe(now, others))
        elif sig == signal.SIGKILL:
            log(f"node {self.node}: its agent is still there {TERM_S:g} s after the SIGTERM: SIGKILL")
        if sig is None:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        return True

    def describe(self, now: float, others: list[int | None]) -> str:
        still = f"; still running under this launcher: node(s) {', '.join(map(str, others))}" if others else ""
        if self.teardown:
            return (
                f"node {self.node}: every rank finished its training and rank(s) {', '.join(map(str, self.teardown))} "
                f"failed only in teardown{still}; ending the agent now ({self.how}): node {self.node} succeeded"
            )
        return (
            f"node {self.node}: all {self.workers} worker(s) exited 0 {now - self.since:.1f} s ago, but its agent "
            f"still runs (under torchrun, its exit barrier waits up to 300 s for every other node's agent; DeepSpeed's "
            f"runner has none and is only slow to exit){still}; ending it "
            f"at the plan's bound of {self.bound_s:.1f} s ({self.how}): node {self.node} succeeded"
        )


def arm(watch: WorkerWatch, limits: Limits | None, now: float) -> Linger | None:
    """The bound on the agent of `watch` after one of its workers exited at `now`: at once when every rank had
    finished training and one failed in teardown (torchrun would restart the group), the plan's exit wait when
    they all exited 0 (torchrun's exit barrier); None otherwise (also without the plan's limits, for the barrier)."""
    teardown = tuple(d.worker.rank for d in watch.teardown_failures)
    if teardown and watch.finished_training():
        return Linger(
            watch.node_rank, watch.expected, now, 0.0, "no restart of a group whose training is done", teardown
        )
    if watch.succeeded and limits:
        bound, how = limits.exit_wait()
        return Linger(watch.node_rank, watch.expected, now, bound, how)
    return None
