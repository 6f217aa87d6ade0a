"""The bound on an agent that outlives its workers (torchrun's exit barrier): where it comes from, the signals
it leads to, and when a node's workers count as having succeeded."""

from __future__ import annotations

import selectors
import signal

from launcher import procs
from launcher.limits import Limits
from launcher.linger import TERM_S, Linger
from launcher.recovery import node_finished
from launcher.watch import Death, WorkerWatch


def limits(step_high_s: float | None, checkpoint_s: float) -> Limits:
    return Limits(2.0, 30.0, 600.0, step_high_s, 0.0, checkpoint_s, 1.5, 5, False)


def test_the_bound_is_the_longer_of_a_step_and_a_checkpoint_save() -> None:
    # a step: 2 x 40 s + 30 s = 110 s > a save's 2 x 10 s + 30 s = 50 s
    assert limits(40.0, 50.0).exit_wait() == (110.0, "2 x 40 s predicted step upper bound + 30 s floor")
    # a save's 2 x 60 s + 30 s = 150 s > a step's 2 x 5 s + 30 s = 40 s
    assert limits(5.0, 150.0).exit_wait() == (150.0, "the checkpoint-save timeout")
    # no predicted step: the floor alone against the save
    assert limits(None, 20.0).exit_wait()[0] == 30.0


def test_sigterm_at_the_bound_then_sigkill_term_s_later() -> None:
    linger = Linger(node=1, workers=8, since=100.0, bound_s=50.0, how="x")
    assert not linger.ended and linger.deadline() == 150.0
    assert linger.due(149.9) is None
    assert linger.due(150.0) == signal.SIGTERM and linger.ended
    assert linger.deadline() == 150.0 + TERM_S and linger.due(150.0 + TERM_S / 2) is None
    assert linger.due(150.0 + TERM_S) == signal.SIGKILL
    assert linger.deadline() == float("inf") and linger.due(1e9) is None


def test_the_message_names_the_node_the_wait_and_the_nodes_still_running() -> None:
    text = Linger(0, 8, 0.0, 34.0, "the checkpoint-save timeout").describe(34.04, [2, 3])
    assert text.startswith("node 0: all 8 worker(s) exited 0 34.0 s ago, but its agent still runs")
    assert "still running under this launcher: node(s) 2, 3" in text
    assert text.endswith("at the plan's bound of 34.0 s (the checkpoint-save timeout): node 0 succeeded")


def _watch(statuses: list[int | None], alive: int = 0) -> WorkerWatch:
    watch = WorkerWatch(1, 2, 0, selectors.DefaultSelector(), lambda *a, **k: None, None, 0)
    for i, status in enumerate(statuses):
        watch.deaths.append(Death(procs.Worker(1000 + i, i % 2, i % 2, 0), 0, status))
    for i in range(alive):
        watch.alive[2000 + i] = (procs.Worker(2000 + i, i, i, 0), -1)
    return watch


def test_a_node_succeeded_only_when_every_worker_of_its_latest_group_exited_0() -> None:
    assert _watch([0, 0]).succeeded
    assert not _watch([0]).succeeded  # one of two workers seen to exit
    assert not _watch([0, 256]).succeeded  # exit code 1
    assert not _watch([0, None]).succeeded  # the agent collected one status first: unknown
    assert not _watch([0, 0], alive=1).succeeded
    assert _watch([9, 0, 0, 0]).succeeded  # a failed group, restarted, then a group that succeeded


def test_an_exit_after_a_done_heartbeat_counts_as_finished_whatever_its_status() -> None:
    finished = [Death(procs.Worker(1000 + i, i, i, 0), 0, status, done_step=5) for i, status in enumerate((None, 134))]
    watch = _watch([])
    watch.deaths.extend(finished)
    assert watch.succeeded  # an unknown status and a SIGABRT, each after the rank reported done
    assert [d.worker.rank for d in watch.teardown_failures] == [1]  # only the known failure is a teardown failure


def test_an_agent_failing_after_every_rank_reported_done_leaves_the_node_succeeded_even_with_unknown_statuses() -> None:
    """The race the CI met: rank 1 aborted after its done heartbeat and the agent reaped it before the launcher read
    its status, then exited 1. The training had finished, so the node has; an agent failing before that has not."""
    said: list[str] = []
    done = [Death(procs.Worker(1000 + i, i, i, 0), 0, status, done_step=5) for i, status in enumerate((0, None))]
    watch = _watch([])
    watch.deaths.extend(done)
    assert watch.teardown_failures == []  # nothing known to have failed, so the agent is not ended early
    assert node_finished(1, watch, None, False, 0, said.append)
    assert said == [
        "node 0: agent exited with code 1, but every rank of the node had finished its training (rank(s) 1 exited "
        "after reporting done, status collected by the agent): node 0 succeeded"
    ]
    assert not node_finished(1, _watch([0, None]), None, False, 0, said.append)  # no done heartbeat: unknown
    assert not node_finished(1, watch, None, True, 0, said.append)  # the launcher was stopping the job
    assert len(said) == 1
