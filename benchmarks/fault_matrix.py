"""The launcher under faults, with real processes on CPU: for each fault, the time to detect it, the time to resume,
the steps lost, the processes left behind (must be 0), the exit code and the message a user reads.

    python benchmarks/fault_matrix.py [--only NAME ...] [--json out.json]

Each fault runs a 2-rank job of examples/train_gpt.py (tiny GPT, gloo) through `python -m launcher run`
(benchmarks/faultlib.py). The plans carry a prediction (step 0.15 s, upper bound 0.25 s; the planner has no CPU
model, so these are this machine's measured times) and a watchdog floor of 2 s: a hang must be detected within
2 x 0.25 s + 2 s + one poll (0.25 s). Faults that need root (tmpfs, network namespaces) are skipped without it.
tests/launcher/test_fault_matrix.py runs every fault and asserts its bounds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from faultlib import (
    ADDRS,
    FLOOR_S,
    IFNAME,
    PREDICTED_HIGH_S,
    PYTHON,
    ROOT,
    SAVE_INTERVAL,
    Outcome,
    Run,
    fault_plan,
    fill,
    launcher_env,
    need_root,
    netem_available,
    netns_unavailable,
    stand_in_scontrol,
    steps_lost,
    tmpfs,
    two_hosts,
)

from launcher.linger import TERM_S
from launcher.watchdog import Limits

POLL_S = Limits.from_plan(fault_plan("x")).poll_s  # type: ignore[union-attr]
HANG_BOUND_S = 2 * PREDICTED_HIGH_S + FLOOR_S + POLL_S
Fault = Callable[[Path], Outcome]


def _restarted(name: str, run: Run, t0: float, detected: tuple[float, str], code: int) -> Outcome:
    resumed = run.event("training again", t0)
    lost = steps_lost(resumed[1]) if resumed else None
    return Outcome(
        name,
        detected[0] - t0,
        resumed[0] - t0 if resumed else None,
        lost,
        run.orphans(),
        code,
        detected[1],
        {
            "exit 0": code == 0,
            "resumed": resumed is not None,
            "lost <= save interval": lost is not None and lost <= SAVE_INTERVAL,
        },
    )


def worker_sigkill(work: Path) -> Outcome:
    run = Run(work, fault_plan("worker-kill", steps=20))
    run.wait_step(SAVE_INTERVAL + 2)
    pid = run.pid_of_rank(1)
    t0 = time.time()
    os.kill(pid, signal.SIGKILL)
    detected = run.wait_event(r"died first: rank 1", 30, t0)
    out = _restarted("worker SIGKILL (torchrun restarts it)", run, t0, detected, run.finish())
    out.checks["the agent's restart seen"] = (
        run.event(r"worker group restarted by the agent \(restart 1 of at most 1\)") is not None
    )
    out.checks["rank 1 named"] = f"rank 1 (local_rank 1, pid {pid}, node 0) killed by signal 9 (SIGKILL)" in detected[1]
    return out


def agent_sigkill(work: Path) -> Outcome:
    run = Run(work, fault_plan("agent-kill", steps=20))
    run.wait_step(SAVE_INTERVAL + 2)
    agent = int(run.wait_event(r"node 0: started pid \d+", 10)[1].rsplit("pid ", 1)[1])
    t0 = time.time()
    os.kill(agent, signal.SIGKILL)
    detected = run.wait_event(r"agent killed by signal 9", 30, t0)
    out = _restarted("agent SIGKILL (the launcher re-runs it)", run, t0, detected, run.finish())
    out.checks["re-run within the budget"] = run.event(r"restart 1 of at most 1: the agent on node 0", t0) is not None
    return out


def rank_sigstop(work: Path) -> Outcome:
    run = Run(work, fault_plan("hang", steps=25))
    run.wait_step(SAVE_INTERVAL + 2)
    pid = run.pid_of_rank(1)
    t0 = time.time()
    os.kill(pid, signal.SIGSTOP)
    detected = run.wait_event(r"^hang: ", 30, t0)
    out = _restarted("SIGSTOP of one rank (hang)", run, t0, detected, run.finish())
    out.checks[f"detected within {HANG_BOUND_S:.2f} s"] = out.detect_s is not None and out.detect_s <= HANG_BOUND_S
    out.checks["rank 1 named"] = f"rank 1 (pid {pid}, node 0, stopped (state T))" in detected[1]
    stack = run.run_dir / "stacks" / "rank1.txt"
    out.checks["stack trace of rank 1"] = stack.exists() and "train_gpt.py" in stack.read_text(errors="replace")
    return out


def slow_rank(work: Path) -> Outcome:
    extra = ("--inject-slow-rank", "1", "--inject-slow-s", "0.3")
    run = Run(work, fault_plan("straggler", steps=16, restarts=0, extra=extra))
    run.wait_step(1)
    t0 = time.time()
    flagged = run.wait_event(r"^straggler: rank 1 ", 60)
    code = run.finish()
    kept = run.event(r"^hang:|restart") is None
    return Outcome(
        "slow rank (0.3 s sleep injected in rank 1)",
        max(0.0, flagged[0] - t0),
        None,
        0,
        run.orphans(),
        code,
        flagged[1],
        {"exit 0": code == 0, "not killed": kept, "rank 1 named": True},
    )


def teardown_abort(work: Path) -> Outcome:
    """Rank 1 aborts (SIGABRT) after its last step, once it reported done (as a crash in destroying the process group
    does). The training had finished: the job succeeded. The launcher ends the agent as soon as it sees the abort, so
    torchrun, with a restart left, does not restart the group when the launcher is first; torchrun polls its workers
    every 0.1 s and on a loaded machine can be first (seen in one CI run), and the restarted group then finishes the
    same way. The launcher being first is tested deterministically in tests/launcher/test_runner.py."""
    run = Run(work, fault_plan("teardown", steps=8, restarts=1, extra=("--inject-teardown-abort", "1")))
    code = run.finish()
    detected = run.wait_event(r"^after its training: rank 1 ", 1)
    beat = run.beat(1)
    t0 = float(beat["time"]) if beat else detected[0]  # rank 1's "done" heartbeat, just before its abort
    return Outcome(
        "a rank aborts in its teardown, after reporting done (SIGABRT)",
        detected[0] - t0,
        None,
        0,
        run.orphans(),
        code,
        detected[1],
        {
            "exit 0": code == 0,
            "rank 1 named": "killed by signal 6 (SIGABRT) once its heartbeat said done at step 8" in detected[1],
            "node 0 succeeded": run.event(r"node 0 succeeded$") is not None,
        },
    )


def disk_full_at_checkpoint(work: Path) -> Outcome:
    with tmpfs(work / "ckpt", "3m") as ckpt:
        extra = ("--save", str(ckpt), "--load", str(ckpt))
        run = Run(work, fault_plan("disk-full", steps=20, restarts=0, extra=extra))
        run.wait_step(SAVE_INTERVAL + 1)
        t0 = time.time()
        fill(ckpt)
        detected = run.wait_event(r"checkpoint at step \d+ not saved", 30, t0)
        code = run.finish()
        latest = (ckpt / "latest").read_text() if (ckpt / "latest").exists() else ""
        intact = latest == f"step{SAVE_INTERVAL}" and (ckpt / latest).is_dir()
        # the summary counts the failed saves, the last one too, and names the checkpoint a resume would take (it
        # said "exit code 0" and nothing more, QA 2026-12-07)
        summary = next((line for line in run.text().splitlines() if "job finished" in line), "")
        told = f"checkpoint save(s) failed; the last good checkpoint is step {SAVE_INTERVAL}" in summary
    return Outcome(
        "disk full during a checkpoint (3 MiB tmpfs)",
        detected[0] - t0,
        None,
        None,
        run.orphans(),
        code,
        detected[1],
        {"exit 0": code == 0, "last good checkpoint intact": intact, "summary names it": told},
    )


def full_run_directory(work: Path) -> Outcome:
    with tmpfs(work / "rundir", "16m") as rd:
        extra = ("--save", str(work / "ckpt"), "--load", str(work / "ckpt"))
        run = Run(work, fault_plan("full-run-dir", steps=25, restarts=0, extra=extra), run_dir=rd / "run")
        run.wait_step(3)
        fill(rd)
        code = run.finish()
        text = run.text()
    said = next((line for line in text.splitlines() if "cannot write" in line), "")
    return Outcome(
        "full run directory (16 MiB tmpfs)",
        None,
        None,
        0,
        run.orphans(),
        code,
        said,
        {
            "exit 0": code == 0,
            "told": bool(said),
            "summary": "job finished: exit code 0" in text,
            "no traceback": "Traceback" not in text,
            "not a hang": "hang:" not in text,
        },
    )


def signal_to_launcher(sig: signal.Signals) -> Fault:
    def fault(work: Path) -> Outcome:
        run = Run(work, fault_plan(f"sig{int(sig)}", steps=300))
        run.wait_step(SAVE_INTERVAL + 2)
        t0 = time.time()
        run.proc.send_signal(sig)
        detected = run.wait_event(f"received {sig.name}", 10, t0)
        code = run.finish(60)
        beat = run.beat(0) or {}
        saved = (beat.get("checkpoint") or {}).get("step")
        lost = None if saved is None else beat.get("step", 0) - saved
        return Outcome(
            f"{sig.name} to the launcher (grace 15 s)",
            detected[0] - t0,
            None,
            lost,
            run.orphans(),
            code,
            detected[1],
            {f"exit {128 + sig}": code == 128 + sig, "saved at the last step": lost == 0},
        )

    return fault


def slurm_preemption(work: Path) -> Outcome:
    record = work / "scontrol.args"
    stand_in_scontrol(work / "bin", record)
    env = launcher_env(PATH=f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}", SLURM_JOB_ID="4242")
    plan = fault_plan("preempt", steps=30)
    run = Run(work, plan, env=env)
    run.wait_step(SAVE_INTERVAL + 2)
    t0 = time.time()
    os.kill(run.proc.pid, signal.SIGUSR1)
    detected = run.wait_event(r"preemption notice", 10, t0)
    code = run.finish(60)
    last = (run.beat(0) or {}).get("step", -1)
    requeued = record.exists() and record.read_text().split() == ["requeue", "4242"]
    again = Run(work, plan, env=env, name="requeued")  # what Slurm starts after the requeue
    relaunched = again.started
    again.wait_step(last + 1)
    resumed = (again.beat(0) or {}).get("resumed_from")
    code2, orphans = again.finish(), run.orphans()
    return Outcome(
        "Slurm preemption (SIGUSR1, scontrol requeue, rerun)",
        detected[0] - t0,
        time.time() - relaunched,
        None if resumed is None else last - resumed,
        orphans,
        code,
        detected[1],
        {
            "exit 138": code == 138,
            "requeued": requeued,
            "rerun resumed at the last step": resumed == last,
            "rerun finished": code2 == 0,
        },
    )


def launcher_sigkill(work: Path) -> Outcome:
    run = Run(work, fault_plan("launcher-kill", steps=300))
    run.wait_step(3)
    t0 = time.time()
    os.kill(run.proc.pid, signal.SIGKILL)
    code = 128 + signal.SIGKILL if run.proc.wait() == -signal.SIGKILL else run.proc.returncode
    orphans = run.orphans()
    return Outcome(
        "SIGKILL of the launcher (the guardian)",
        time.time() - t0,
        None,
        None,
        orphans,
        code,
        "(the launcher is gone; its guardian SIGKILLs the job)",
        {"exit 137": code == 137},
    )


def deepspeed_rank_sigkill(work: Path) -> Outcome:
    run = Run(work, fault_plan("ds-kill", steps=300, restarts=0, backend="deepspeed"))
    run.wait_step(3)
    pid = run.pid_of_rank(1)
    t0 = time.time()
    os.kill(pid, signal.SIGKILL)
    detected = run.wait_event(r"died first: rank 1", 30, t0)
    code = run.finish()
    said = run.event(r"is DeepSpeed's for a rank killed by signal 9")
    failed = run.event(r"^job failed: exit code 137")
    return Outcome(
        "rank SIGKILL under the deepspeed backend",
        detected[0] - t0,
        None,
        None,
        run.orphans(),
        code,
        said[1] if said else detected[1],
        {"exit 137 (not 247)": code == 137, "summary says so": failed is not None},
    )


def unwritable_checkpoint_dir(work: Path) -> Outcome:
    with tmpfs(work / "ro", "1m") as ro:
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True, timeout=30)
        plan = fault_plan("ro-ckpt", steps=5, extra=("--save", str(ro / "ckpt"), "--load", str(ro / "ckpt")))
        run = Run(work, plan)
        code = run.finish(60)
        pre = subprocess.run(
            [PYTHON, "-m", "launcher", "preflight", str(run.plan_path), "--run-dir", str(work / "pre")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=launcher_env(),
            timeout=300,
        )
    row = next((line for line in pre.stdout.splitlines() if line.startswith("checkpoints")), "")
    return Outcome(
        "unwritable checkpoint directory (read-only mount)",
        None,
        None,
        None,
        run.orphans(),
        code,
        " ".join(row.split()),
        {
            "run refused (2)": code == 2,
            "preflight fails (1)": pre.returncode == 1,
            "read-only named": "Read-only file system" in row,
        },
    )


def malformed_plans(work: Path) -> Outcome:
    sys.path.insert(0, str(ROOT / "tests" / "launcher"))
    from malformed import write_corpus

    from launcher.cli import main

    failures, tried = [], 0
    for case in write_corpus(work / "corpus"):
        for verb in case.verbs:
            tried += 1
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    own_dir = verb == "show" or case.name.startswith("run_dir")  # that case is about job.run_dir
                    code = main([verb, str(case.path), *([] if own_dir else ["--run-dir", str(work / "x")])])
            except Exception as exc:  # a traceback: exactly what must not happen
                code, err = -1, io.StringIO(repr(exc))
            if code != 2 or case.expect not in err.getvalue():
                failures.append(f"{case.name} ({verb})")
    return Outcome(
        f"malformed plan.json ({tried} invocations)",
        None,
        None,
        None,
        0,
        2,
        f"{tried - len(failures)} of {tried} refused with exit 2 naming the field"
        + (f"; failed: {failures[:3]}" if failures else ""),
        {"all refused": not failures},
    )


# Two hosts ------------------------------------------------------------------------------------------------------
def _two_node_runs(work: Path, ns: tuple[str, str], name: str, steps: int, restarts: int = 1) -> list[Run]:
    plan = fault_plan(
        name,
        steps=steps,
        restarts=restarts,
        nodes=2,
        procs=1,
        hosts=ADDRS,
        master_addr=ADDRS[0],
        env={"GLOO_SOCKET_IFNAME": IFNAME},
    )
    plan = replace(plan, parallel=replace(plan.parallel))
    return [
        Run(work, plan, "--node-rank", str(k), prefix=("ip", "netns", "exec", n), name=f"node{k}")
        for k, n in enumerate(ns)
    ]


def _finish_all(runs: list[Run]) -> tuple[list[int], int]:
    codes = [r.finish(180) for r in runs]
    return codes, sum(r.orphans() for r in runs)


def _two_node_outcome(name: str, runs: list[Run], t0: float, detected: tuple[float, str]) -> Outcome:
    """Both launchers finish; the resume as node 0's launcher saw it."""
    codes, orphans = _finish_all(runs)
    resumed = runs[0].event("training again", t0)
    lost = steps_lost(resumed[1]) if resumed else None
    return Outcome(
        name,
        detected[0] - t0,
        resumed[0] - t0 if resumed else None,
        lost,
        orphans,
        max(codes, key=abs),
        detected[1],
        {"both exit 0": codes == [0, 0], "resumed": resumed is not None},
    )


def rendezvous_store_lost(work: Path) -> Outcome:
    with two_hosts(f"s{os.getpid() % 10000}") as ns:
        runs = _two_node_runs(work, ns, "store-lost", steps=25)
        runs[0].wait_step(SAVE_INTERVAL + 2)
        agent = int(runs[0].wait_event(r"node 0: started pid \d+", 10)[1].rsplit("pid ", 1)[1])
        t0 = time.time()
        os.kill(agent, signal.SIGKILL)  # the c10d store lives in node 0's agent
        detected = runs[0].wait_event(r"agent killed by signal 9", 30, t0)
        return _two_node_outcome("head's rendezvous store lost (2 netns hosts)", runs, t0, detected)


def link_down(work: Path) -> Outcome:
    with two_hosts(f"l{os.getpid() % 10000}") as ns:
        runs = _two_node_runs(work, ns, "link-down", steps=25)
        runs[0].wait_step(SAVE_INTERVAL + 2)
        t0 = time.time()
        subprocess.run(["ip", "-n", ns[1], "link", "set", IFNAME, "down"], check=True)
        detected = runs[0].wait_event(r"^hang: ", 30, t0)
        subprocess.run(["ip", "-n", ns[1], "link", "set", IFNAME, "up"], check=True)
        out = _two_node_outcome("link down between the hosts (up again after detection)", runs, t0, detected)
    out.checks[f"detected within {HANG_BOUND_S:.2f} s"] = out.detect_s is not None and out.detect_s <= HANG_BOUND_S
    return out


def slow_link(work: Path) -> Outcome:
    with two_hosts(f"d{os.getpid() % 10000}") as ns:
        netem = netem_available(ns[0])
        shape = ["netem", "delay", "20ms"] if netem else ["tbf", "rate", "4mbit", "burst", "32kb", "latency", "400ms"]
        runs = _two_node_runs(work, ns, "slow-link", steps=16, restarts=0)
        runs[0].wait_step(3)
        t0 = time.time()
        for n in ns:
            subprocess.run(["ip", "netns", "exec", n, "tc", "qdisc", "add", "dev", IFNAME, "root", *shape], check=True)
        warned = runs[0].wait_event(r"steps take .* above the predicted upper bound", 60, t0)
        codes, orphans = _finish_all(runs)
        kept = all(r.event(r"^hang:|restart") is None for r in runs)
    how = "tc netem delay 20ms" if netem else "tc tbf 4 Mbit/s (this kernel has no sch_netem)"
    return Outcome(
        f"slow link: {how}",
        warned[0] - t0,
        None,
        0,
        orphans,
        max(codes, key=abs),
        warned[1],
        {"both exit 0": codes == [0, 0], "not killed": kept},
    )


def agent_missing_at_exit(work: Path) -> Outcome:
    """Node 1's torchrun agent is stopped (SIGSTOP) while its rank trains on: the training ends everywhere, and
    node 0's agent waits in torch's exit barrier for an agent that never comes (torch: 300 s). Each launcher ends
    its node's lingering agent at the plan's bound (`Limits.exit_wait`) and exits 0."""
    with two_hosts(f"x{os.getpid() % 10000}") as ns:
        runs = _two_node_runs(work, ns, "exit-barrier", steps=8, restarts=0)
        runs[0].wait_step(2)
        agent = int(runs[1].wait_event(r"node 1: started pid \d+", 10)[1].rsplit("pid ", 1)[1])
        os.kill(agent, signal.SIGSTOP)
        # rank 0's end of training: the launcher reads its exit status, unless torchrun's agent reaped it first
        t0 = runs[0].wait_event(r"exited: rank 0 .* exited (with code 0|\(status already collected)", 60)[0]
        detected = runs[0].wait_event(r"worker\(s\) exited 0 .* ago", 60, t0)
        codes, orphans = _finish_all(runs)
        ended = max(r.wait_event(r"^job finished", 1, t0)[0] for r in runs)
    bound = Limits.from_plan(runs[0].plan).exit_wait()[0]  # type: ignore[union-attr]
    limit = bound + TERM_S + POLL_S + 2.0  # 2 s for the processes to go and the logs to land on a busy machine
    return Outcome(
        "an agent missing at torch's exit barrier (SIGSTOP of node 1's agent)",
        detected[0] - t0,
        None,
        0,
        orphans,
        max(codes, key=abs),
        detected[1],
        {
            "both exit 0": codes == [0, 0],
            f"both done within {limit:.1f} s of the training's end": ended - t0 <= limit,
            "node 0 named": detected[1].startswith("node 0: "),
            "node 1's stopped agent ended": runs[1].event(r"^node 1: all 1 worker\(s\) exited 0", t0) is not None,
        },
    )


FAULTS: dict[str, tuple[Fault, str | None]] = {  # name -> (fault, what it needs)
    "worker-sigkill": (worker_sigkill, None),
    "agent-sigkill": (agent_sigkill, None),
    "rank-sigstop": (rank_sigstop, None),
    "slow-rank": (slow_rank, None),
    "teardown-abort": (teardown_abort, None),
    "store-lost": (rendezvous_store_lost, "netns"),
    "link-down": (link_down, "netns"),
    "slow-link": (slow_link, "netns"),
    "agent-missing-at-exit": (agent_missing_at_exit, "netns"),
    "disk-full": (disk_full_at_checkpoint, "root"),
    "sigterm": (signal_to_launcher(signal.SIGTERM), None),
    "sigint": (signal_to_launcher(signal.SIGINT), None),
    "sighup": (signal_to_launcher(signal.SIGHUP), None),
    "slurm-preemption": (slurm_preemption, None),
    "launcher-sigkill": (launcher_sigkill, None),
    "full-run-dir": (full_run_directory, "root"),
    "unwritable-checkpoint-dir": (unwritable_checkpoint_dir, "root"),
    "deepspeed-rank-sigkill": (deepspeed_rank_sigkill, None),
    "malformed-plans": (malformed_plans, None),
}


def unavailable(need: str | None) -> str | None:
    return {"netns": netns_unavailable, "root": need_root}[need]() if need else None


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _verdict(o: Outcome) -> str:
    return "yes" if o.ok else "NO: " + ", ".join(k for k, v in o.checks.items() if not v)


def table(outcomes: list[Outcome]) -> str:
    head = "| fault | detect s | resume s | steps lost | orphans | exit | ok | what the user reads |\n"
    head += "|---|---|---|---|---|---|---|---|\n"
    rows = [
        f"| {o.fault} | {_s(o.detect_s)} | {_s(o.resume_s)} | {'-' if o.steps_lost is None else o.steps_lost} "
        f"| {o.orphans} | {o.exit_code} | {_verdict(o)} "
        f"| `{o.message.replace('|', '/')[:160]}` |"
        for o in outcomes
    ]
    return head + "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="*", choices=sorted(FAULTS), help="run only these faults")
    p.add_argument("--json", default=None, help="also write the outcomes here")
    p.add_argument("--work", default=None, help="directory for the runs (default: a new one under /tmp)")
    args = p.parse_args()
    work = Path(args.work or f"/tmp/fault-matrix-{os.getpid()}")
    outcomes, started = [], time.monotonic()
    for name in args.only or FAULTS:
        fault, need = FAULTS[name]
        why = unavailable(need)
        if why:
            print(f"{name}: skipped ({why})", flush=True)
            continue
        t = time.monotonic()
        outcome = fault(work / name)
        outcomes.append(outcome)
        print(f"{name}: {'ok' if outcome.ok else 'FAILED'} in {time.monotonic() - t:.0f} s", flush=True)
    print(
        f"\n{table(outcomes)}\n\n{len(outcomes)} faults in {time.monotonic() - started:.0f} s; "
        f"{sum(o.orphans for o in outcomes)} orphans; {sum(not o.ok for o in outcomes)} failed"
    )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(o) for o in outcomes], indent=2) + "\n")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
