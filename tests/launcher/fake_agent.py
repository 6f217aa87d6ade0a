"""A stand-in for torchrun in the runner tests (no torch): starts N workers with RANK/LOCAL_RANK in their
own sessions, as torchrun does, and fails when one of them fails.

    fake_agent.py N MODE [TAG]     MODE: ok | fail1 | hang | deaf | orphan | abandon | linger | teardown | early-abort
                                         | early-exit0 | killed | flaky:<marker file> | regroup:<marker file>

deaf: the agent and its workers ignore SIGINT and SIGTERM (only SIGKILL ends them).
killed: the agent SIGKILLs itself 1 s after starting its workers, which go on running (their heartbeats say they
train).

linger: once its workers have all exited 0 (each reporting done in its heartbeat first) the agent stays, deaf to
SIGTERM, as torchrun's does in its exit barrier (a C++ store wait for the other nodes' agents that a Python signal
handler cannot interrupt).
teardown: every worker writes a "done" heartbeat (examples/heartbeat.py, in $TRAINPLAN_RUN_DIR), then rank 1 aborts
(SIGABRT), as a rank whose process-group teardown crashes does. early-abort: rank 0 reports done and exits 0, rank 1
aborts at step 3 without reporting done. early-exit0: both report step 3 in their heartbeats; rank 1 exits 0 there
(before its training is done) and rank 0 fails (code 1) a second later, as a rank whose gloo peer vanished does; the
agent reaps a rank 1 s after it exits, so that the launcher reads rank 1's code 0 itself.

regroup: the first time (no marker file) the agent fails at once (exit 5), before using its restarts; then rank 1
fails as in fail1, the agent restarts its worker group once (as torchrun's --max-restarts does), and when rank 1 of
that group fails too it exits 1.

TAG is appended to every process's command line, so that a test can find whatever it left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
WORKER = r"""
import os, signal, sys, time
rank, mode = int(os.environ["RANK"]), sys.argv[1]
if mode in ("teardown", "early-abort"):
    sys.path.insert(0, os.environ["EXAMPLES_DIR"])
    from heartbeat import Heartbeat, heartbeat_dir
    beat = Heartbeat(heartbeat_dir(), rank)
    beat.beat(phase="train", step=3)
    if mode == "early-abort" and rank == 1:
        time.sleep(0.3)
        os.abort()
    beat.beat(phase="done", step=5)
    time.sleep(0.3)
    if rank == 1:
        os.abort()
    sys.exit(0)
if mode == "early-exit0":
    sys.path.insert(0, os.environ["EXAMPLES_DIR"])
    from heartbeat import Heartbeat, heartbeat_dir
    Heartbeat(heartbeat_dir(), rank).beat(phase="train", step=3)
    time.sleep(1.5 if rank == 1 else 2.5)  # the launcher's /proc scan sees both first
    sys.exit(0 if rank == 1 else 1)
if mode == "killed":  # mid-training, as its heartbeat says: the launcher reads it when the rank dies
    sys.path.insert(0, os.environ["EXAMPLES_DIR"])
    from heartbeat import Heartbeat, heartbeat_dir
    Heartbeat(heartbeat_dir(), rank).beat(phase="train", step=3)
if mode in ("hang", "deaf"):  # before anything else: a SIGTERM may come as soon as the launcher has seen this process
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "deaf":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
print(f"worker rank {rank} pid {os.getpid()} up", flush=True)
if mode in ("hang", "deaf", "killed"):
    time.sleep(600)
if (mode == "fail1" or mode.startswith("regroup")) and rank == 1:
    time.sleep(0.5)
    sys.exit(3)
# 1.5 s: long enough that the launcher's /proc scan (every 0.2 s) sees every worker even on a CI core starved by the
# planner tests beside it (0.5 s was not, once); a worker it never saw leaves the group's success unknown, and then
# nothing bounds a lingering agent's stay
time.sleep(1.5 if mode in ("ok", "orphan", "linger") or mode.startswith("flaky") else 600)  # abandon: 600
if mode == "linger":
    # the training's end, reported as the example trainer reports it: on a starved core the agent can reap a worker
    # before the launcher reads its exit status, and without this the group's success would stay unknown
    sys.path.insert(0, os.environ["EXAMPLES_DIR"])
    from heartbeat import Heartbeat, heartbeat_dir
    Heartbeat(heartbeat_dir(), rank).beat(phase="done", step=5)
"""


def main() -> int:
    n, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "deaf":
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    tag = sys.argv[3] if len(sys.argv) > 3 else ""
    if mode.startswith(("flaky:", "regroup:")):
        marker = mode.split(":", 1)[1]
        if not os.path.exists(marker):
            open(marker, "w").close()
            print("flaky agent: failing this time", flush=True)
            return 5
    if mode == "orphan":  # a grandchild that escapes its parent (double fork), as stray helpers do
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)", "escaped-orphan", tag], start_new_session=True
        )

    def group() -> list[subprocess.Popen[bytes]]:
        return [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, mode, tag],
                start_new_session=True,
                env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "EXAMPLES_DIR": EXAMPLES},
            )
            for r in range(n)
        ]

    procs, regrouped = group(), False

    def stop(signum: int, frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    if mode == "abandon":  # exits 0 while its workers still run, as DeepSpeed's runner does when launch.py dies
        time.sleep(0.8)
        return 0
    if mode == "killed":  # SIGKILLed (an operator, the OOM killer) while its workers train: they are left running
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        if mode == "teardown":
            # exits are seen without reaping (WNOWAIT), and a failed rank is reaped 1 s later: its zombie's status
            # stays readable to the launcher, so the test follows the path where the launcher knows the SIGABRT
            # (test_linger covers the one where the agent reaps first)
            exited = [os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) for p in procs]
            if any(e is not None and (e.si_code != os.CLD_EXITED or e.si_status != 0) for e in exited):
                time.sleep(1.0)
        if mode == "early-exit0" and any(
            os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) for p in procs if p.returncode is None
        ):
            time.sleep(1.0)  # the launcher reads the exit status (code 0) before this agent reaps it
        codes = [p.poll() for p in procs]
        if any(c not in (None, 0) for c in codes):
            time.sleep(0.3)  # like torchrun's monitor interval
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            if mode.startswith("regroup") and not regrouped:
                for p in procs:
                    p.wait()
                print("fake agent: a worker failed; restarting the worker group", flush=True)
                procs, regrouped = group(), True
                continue
            print("fake agent: a worker failed", flush=True)
            return 1
        if all(c == 0 for c in codes):
            if mode == "linger":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                time.sleep(600)
            return 0
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
