"""What the runner does when a job goes wrong: tear down a hung node, read an agent's exit code as the job's,
and requeue a preempted Slurm job. Plain functions over the runner's data (launcher/runner.py)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from launcher import procs, stacks
from launcher.explain import DEEPSPEED_RC, agent_report, signal_of_negative_exit
from launcher.heartbeat import read_beat
from launcher.linger import Linger
from launcher.watch import WorkerWatch
from launcher.watchdog import Hang, ProgressWatch

REQUEUE_TIMEOUT_S = 60
Log = Callable[..., None]


def tear_down_hung(
    watch: WorkerWatch,
    progress: ProgressWatch,
    hang: Hang,
    run_dir: Path,
    take_stacks: bool,
    log: Log,
    restarts_left: bool = True,
) -> None:
    """Name the hung ranks, take every local rank's stack, and SIGKILL the node's workers, so that the agent (or
    the launcher, for backends without restarts of their own) restarts them from the last checkpoint while
    restarts are left."""
    log(hang.describe())
    workers = watch.workers()
    if take_stacks:
        # only a process's own record says it listens for SIGUSR1: after a restart a rank's file can still hold the
        # previous process's, and SIGUSR1's default action killed a rank not listening yet (QA 2026-12-07)
        beats = [(w, read_beat(progress.directory, w.rank)) for w in workers]
        ranks = [(w.rank, w.pid, b.stacks if b is not None and b.pid == w.pid else None) for w, b in beats]
        log(stacks.collect(ranks, run_dir))
    watch.killed.update(w.pid for w in workers)
    killed = procs.signal_pids([w.pid for w in workers], signal.SIGKILL)
    ranks_killed = ", ".join(str(w.rank) for w in workers if w.pid in killed)
    why = "to restart from the last checkpoint" if restarts_left else "(no restart left: the job ends)"
    log(f"node {watch.node_rank}: watchdog killed rank(s) {ranks_killed} {why}")


def node_finished(
    code: int, watch: WorkerWatch | None, linger: Linger | None, stopping: bool, node: int | None, log: Log
) -> bool:
    """An agent's exit that does not fail the node, said why: the launcher ended it after its workers finished
    (launcher/linger.py), or it failed (on its own) after every rank had finished training and one failed in
    teardown (or exited with a status the agent collected before the launcher could read it)."""
    if linger and linger.ended:
        log(f"node {node}: agent {procs.describe_returncode(code)} once ended; its workers had succeeded")
        return True
    if code != 0 and not stopping and watch and watch.succeeded and watch.exits_after_done:
        failed = [str(d.worker.rank) for d in watch.teardown_failures]
        unknown = [str(d.worker.rank) for d in watch.exits_after_done if d.status is None]
        reasons = []
        if failed:
            reasons.append(f"rank(s) {', '.join(failed)} failed only in teardown")
        if unknown:
            reasons.append(f"rank(s) {', '.join(unknown)} exited after reporting done, status collected by the agent")
        why = "; ".join(reasons)
        log(
            f"node {node}: agent {procs.describe_returncode(code)}, but every rank of the node had finished its "
            f"training ({why}): node {node} succeeded"
        )
        return True
    return False


def job_code(code: int, output: str, watch: WorkerWatch | None, stopping: bool, node: int | None, log: Log) -> int:
    """An agent's exit code as the job's (negative: killed by that signal). DeepSpeed's 256 - n for a rank killed
    by signal n becomes -n (so the launcher exits 128 + n: 137, not 247); where DeepSpeed's launch.py reports the
    code of a rank that failed after the one the launcher saw die first, the first one's is reported; and an agent
    that exits 0 while its ranks still run has not finished the job (DeepSpeed's runner exits 0 when its launch.py
    is killed)."""
    root = watch.first_failure if watch and not stopping else None
    said = DEEPSPEED_RC.findall(output)
    if root is not None and root.status and said and code == int(said[-1]) % 256:
        # DeepSpeed's launch.py exits with the code of the first failed rank its poll meets in a set of processes:
        # when the peers of a killed rank have failed too by then, that can be a peer's (exit 1), not the cause's
        first = os.waitstatus_to_exitcode(root.status)  # a Popen returncode: -n for signal n
        if first != int(said[-1]):
            shown = 128 - first if first < 0 else first
            log(
                f"node {node}: DeepSpeed's launcher exited with return code {said[-1]}, a rank that failed after "
                f"{root.describe()}: reporting that first failure's code, {shown}"
            )
            return first
    sig = signal_of_negative_exit(code, output)
    if sig is not None:
        log(
            f"node {node}: exit code {code} is DeepSpeed's for a rank killed by signal {sig} "
            f"({procs.signal_name(sig)}): reporting {128 + sig}"
        )
        return -sig
    alive = watch.workers() if watch else []
    if code == 0 and alive and not stopping:
        log(
            f"node {node}: the agent exited with code 0 while rank(s) {', '.join(str(w.rank) for w in alive)} "
            f"still run: the job did not finish"
        )
        return 1
    return code


def summary(
    code: int,
    elapsed_s: float,
    watched: list[tuple[WorkerWatch | None, str, str]],
    hang: Hang | None,
    signalled: int | None,
    short: str | None = None,
    resume: str = "",
    agent_killed: str | None = None,
    spent: str = "",
    unrecorded: bool = False,
) -> str:
    """The last line a user reads: the exit code, the first cause found (a signal, a hang, the first rank that
    died, the agent's own report) and where the logs are. `watched`: (worker watch, agent output, agent log);
    `short`: why a job whose ranks exited 0 stopped before its last step; `resume`: how to go on from its last
    checkpoint, said where the launcher was asked to stop the job (it said "job failed", QA 2026-12-07);
    `agent_killed`: an agent killed by a signal the launcher did not send, the cause where no rank failed first (the
    summary blamed a rank the launcher had killed itself as the agent's leftover, QA 2026-12-07); `spent`: that the
    restart budget is used up, said of a failure (QA 2026-12-07); `unrecorded`: that a job of --train-iters
    finished without any rank reporting a step (no heartbeat, no training log line), so how far it trained is not
    known (it read as a finished training, QA 2026-12-07)."""
    if code == 0:
        unknown = (
            "; no rank reported a training step (no heartbeat, no iteration line in its log): how far it trained is "
            "not known"
            if unrecorded
            else ""
        )
        return f"job finished: exit code 0 after {elapsed_s:.1f} s{unknown}"
    if short:
        return f"job stopped early: exit code {code} after {elapsed_s:.1f} s; {short}"
    logs = ", ".join(sorted({str(Path(log).parent) for _, _, log in watched}))
    if signalled and not hang:
        hint = f"; {resume}" if resume else ""
        return (
            f"job stopped: exit code {code} after {elapsed_s:.1f} s; stopped by {procs.signal_name(signalled)}"
            f"{hint}; logs: {logs}"
        )
    why = [d.describe() for watch, _, _ in watched if watch and (d := watch.first_failure)]
    if agent_killed:
        why.append(agent_killed)
    reports = [rep for _, output, _ in watched if (rep := agent_report(output))]
    if hang:
        why.insert(0, hang.describe())
    if signalled:
        why.insert(0, f"stopped by {procs.signal_name(signalled)}")
    # a signal that came while a hang was being torn down names both (it named only the signal, QA 2026-12-07)
    detail = (
        "; ".join(why[: 2 if signalled and hang else 1] + reports[:1] + ([spent] if spent else [])) or "see the logs"
    )
    return f"job failed: exit code {code} after {elapsed_s:.1f} s; {detail}; logs: {logs}"


def requeue(job: str | None, log: Log) -> None:
    """After a preemption notice inside Slurm: put the job back in the queue (it resumes from its checkpoint)."""
    if not job:
        log("preemption notice outside Slurm (no SLURM_JOB_ID): not requeued")
        return
    try:
        done = subprocess.run(
            ["scontrol", "requeue", job],
            capture_output=True,
            text=True,
            timeout=REQUEUE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        result = "done" if done.returncode == 0 else f"failed ({done.returncode}): {done.stderr.strip()[-300:]}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        result = f"failed: {exc}"
    log(f"scontrol requeue {job}: {result}")
