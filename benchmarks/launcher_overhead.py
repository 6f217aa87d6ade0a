"""What the launcher costs over calling torchrun by hand, measured in one run (A vs B, alternating).

The same 2-process CPU job (examples/train_gpt.py, tiny GPT, gloo) is started by bare `torchrun` and by
`python -m launcher run plan.json`, alternately, several runs each. From rank 0's metrics file (wall-clock
time of each step) it prints the median time from start to the end of the first training step and the
median step time after warm-up, for both, and their ratios, and the CPU time the top process itself used (the
launcher; bare torchrun's agent) as a share of one core: what the launcher takes from the job, a figure the
machine's noise moves little, and the launcher's own start-up: from its start to its Popen of the agent (the
`node 0: started` line of launcher.log). Targets (issue 14): time to the first step and step time within 1 %
of bare torchrun's. It also times `python -m launcher --help` (target: under 150 ms).

The launcher's modules are byte-compiled first, as an installed package's are: with PYTHONDONTWRITEBYTECODE=1
and sources newer than their .pyc, every run would otherwise compile them again (tens of ms that torch, whose
.pyc files pip wrote, does not pay).

    python benchmarks/launcher_overhead.py [--runs 5] [--steps 40] [--agent-command]

With --agent-command a third way runs the launcher's own agent command (argv and environment) without the launcher,
in rotating order, and the paired differences split the launcher's extra time into its agent's flags and
environment and its own process.
"""

from __future__ import annotations

import argparse
import compileall
import itertools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from make_plan import tiny_plan  # noqa: E402

from launcher.backends import build  # noqa: E402
from launcher.context import make_context  # noqa: E402
from launcher.spec import Model, Plan, dump  # noqa: E402

WARMUP_STEPS = 3
# What both ways start from; the launcher passes PYTHONPATH on to the workers, so bare torchrun gets it too.
CALLER_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# Big enough that a step is compute (tens of ms on one core per rank), small enough to start in seconds.
MODEL = Model(
    name="bench-gpt", num_layers=4, hidden_size=128, num_attention_heads=4, vocab_size=512, seq_length=128, swiglu=True
)


def bare_torchrun(plan: Plan, plan_path: Path, run_dir: Path) -> tuple[list[str], dict[str, str]]:
    """torchrun by hand: the same script, arguments, files, environment and directory the launcher uses."""
    run_dir.mkdir(parents=True)
    for name, text in plan.files.items():
        (run_dir / name).write_text(text)
    ctx = make_context(plan, plan_path, run_dir=str(run_dir), caller_env=CALLER_ENV)
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(plan.world.gpus_per_node),
        *ctx.script_argv(0),
        "--metrics-dir",
        str(run_dir / "metrics"),
    ]
    return argv, ctx.worker_env(0)


def agent_command(plan: Plan, plan_path: Path, run_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The agent command the launcher starts (its argv and its `env -i` environment, from the launcher's own
    backend), run without the launcher: what the launcher adds through its agent's flags and environment, apart
    from its own process (a fresh rendezvous store per round cost this job's first step 7 %, docs/launcher.md)."""
    run_dir.mkdir(parents=True)
    metrics = ("--metrics-dir", str(run_dir / "metrics"))
    ctx = make_context(plan, plan_path, run_dir=str(run_dir), caller_env=CALLER_ENV, extra_args=metrics)
    backend, (command,) = build(ctx)
    for name, text in {**plan.files, **backend.derived_files(ctx)}.items():
        (run_dir / name).write_text(text)
    Path(command.log).parent.mkdir(parents=True, exist_ok=True)  # the launcher makes its agents' log directories
    return list(command.argv), dict(command.env)


def via_launcher(plan: Plan, plan_path: Path, run_dir: Path) -> tuple[list[str], dict[str, str]]:
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "run",
        str(plan_path),
        "--run-dir",
        str(run_dir),
        "--",
        "--metrics-dir",
        str(run_dir / "metrics"),
    ]
    return argv, CALLER_ENV


def own_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) the process itself has used, not its children's."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def agent_started_s(run_dir: Path, started: float) -> float | None:
    """Seconds from `started` to the launcher's Popen of the agent (launcher.log; None for bare torchrun)."""
    log = run_dir / "launcher.log"
    found = re.search(r"^(\S+ \S+)\.(\d{3}) node \S+: started pid", log.read_text(), re.M) if log.exists() else None
    if not found:
        return None
    return time.mktime(time.strptime(found[1], "%Y-%m-%d %H:%M:%S")) + int(found[2]) / 1e3 - started


Run = tuple[float, float, float, float, float, float | None]


def one_run(argv: list[str], env: dict[str, str], run_dir: Path, cwd: Path) -> Run:
    """(seconds from start to the end of step 1, median step time after warm-up, from rank 0's metrics; CPU
    seconds of the top process itself, the launcher or bare torchrun's agent, sampled until it exits; wall s;
    median CPU seconds rank 0 spent per step, which contention on the machine moves far less than wall time;
    seconds from start to the launcher's Popen of the agent, None for bare torchrun)."""
    started = time.time()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cpu = 0.0
    while proc.poll() is None:
        cpu = own_cpu_s(proc.pid) or cpu
        time.sleep(0.1)
    wall = time.time() - started
    if proc.returncode:
        raise SystemExit(f"run failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
    metrics = json.loads((run_dir / "metrics" / "rank0.json").read_text())
    steps = metrics["steps"]
    kept = steps[WARMUP_STEPS:]
    return (
        steps[0]["time"] - started,
        statistics.median(s["step_s"] for s in kept),
        cpu,
        wall,
        statistics.median(s["cpu_s"] for s in kept),
        agent_started_s(run_dir, started),
    )


def median_interval(values: list[float], confidence: float = 0.9) -> tuple[float, float, float]:
    """(median, low, high): the sign test's distribution-free interval for the median of `values`, the order
    statistics x_(k) and x_(n+1-k) for the largest k with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 (its
    coverage is at least `confidence`; with under 5 values there is none and the range is given)."""
    xs, n = sorted(values), len(values)
    tail, k, below = (1 - confidence) / 2, 0, 0.0
    while k < n // 2 and below + math.comb(n, k) / 2**n <= tail:
        below += math.comb(n, k) / 2**n
        k += 1
    k = max(k, 1)
    return statistics.median(xs), xs[k - 1], xs[n - k]


def rotation(ways: list[str], i: int) -> list[str]:
    """Round i's order, through every order of the ways in turn: two alternate (AB, BA), three go through all six, so
    that no way always follows the same other one."""
    orders = [list(p) for p in itertools.permutations(ways)]
    return orders[i % len(orders)]


def paired_first_step(base: list[Run], other: list[Run]) -> tuple[float, float, float]:
    """(median, low, high) of the relative differences of the first step, run i of `other` against run i of
    `base`: runs of one round ran next to each other."""
    return median_interval([(b[0] - a[0]) / a[0] for a, b in zip(base, other, strict=True)])


def help_startup_s(repeats: int) -> tuple[float, float]:
    """Median wall time of `python -m launcher --help`, and of `python -c pass` for reference."""

    def timed(argv: list[str]) -> float:
        t0 = time.perf_counter()
        subprocess.run(argv, env=CALLER_ENV, cwd=ROOT, stdout=subprocess.DEVNULL, check=True)
        return time.perf_counter() - t0

    launcher = [timed([sys.executable, "-m", "launcher", "--help"]) for _ in range(repeats)]
    bare = [timed([sys.executable, "-c", "pass"]) for _ in range(repeats)]
    return statistics.median(launcher), statistics.median(bare)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5, help="runs of each way (alternating)")
    p.add_argument("--steps", type=int, default=40, help="training steps per run")
    p.add_argument(
        "--agent-command",
        action="store_true",
        help="a third way: the launcher's agent command run without the launcher (rotating order)",
    )
    args = p.parse_args()
    compileall.compile_dir(ROOT / "launcher", quiet=1)
    work = Path(tempfile.mkdtemp(prefix="launcher-overhead-"))
    plan = tiny_plan("overhead", procs=2, steps=args.steps, model=MODEL, mbs=2)
    plan_path = work / "plan.json"
    dump(plan, plan_path)
    ways = {"torchrun": bare_torchrun, "launcher": via_launcher}
    if args.agent_command:
        ways["agent"] = agent_command
    results: dict[str, list[Run]] = {way: [] for way in ways}
    for i in range(args.runs):
        for way in rotation(list(ways), i):
            run_dir = work / f"{way}-{i}"
            argv, env = ways[way](plan, plan_path, run_dir)
            results[way].append(one_run(argv, env, run_dir, cwd=work))  # the plan's directory, for both
            r = results[way][-1]
            print(
                f"run {i + 1} {way:8s}: first step after {r[0] * 1e3:7.0f} ms, median step {r[1] * 1e3:6.2f} ms, "
                f"top process CPU {r[2] * 1e3:5.0f} ms in {r[3]:5.1f} s"
                + (f", agent started after {r[5] * 1e3:4.0f} ms" if r[5] is not None else ""),
                flush=True,
            )
    first = {w: statistics.median(r[0] for r in rs) for w, rs in results.items()}
    step = {w: statistics.median(r[1] for r in rs) for w, rs in results.items()}
    cpu = {w: statistics.median(r[2] / r[3] for r in rs) for w, rs in results.items()}
    step_cpu = {w: statistics.median(r[4] for r in rs) for w, rs in results.items()}
    popens = [r[5] for r in results["launcher"] if r[5] is not None]
    help_s, python_s = help_startup_s(11)
    print(f"\n2 processes, {args.steps} steps, {args.runs} runs each (alternating), medians:")
    print(
        f"  time to first step   torchrun {first['torchrun'] * 1e3:7.0f} ms   launcher "
        f"{first['launcher'] * 1e3:7.0f} ms   difference {(first['launcher'] - first['torchrun']) * 1e3:+6.0f} ms"
        f"   ratio {first['launcher'] / first['torchrun']:.3f}   (target: within 1 %)"
    )
    # Runs alternate, so run i of each way ran next to the other's: their differences cancel the machine's drift.
    mid, low, high = paired_first_step(results["torchrun"], results["launcher"])
    verdict = "within 1 %" if high <= 0.01 else "not shown within 1 %" if low <= 0.01 else "over 1 %"
    print(
        f"  paired (run i of each way): the launcher's first step later by {100 * mid:+.1f} %, 90 % interval "
        f"{100 * low:+.1f} .. {100 * high:+.1f} % over {args.runs} pairs: {verdict}"
    )
    if "agent" in results:
        print(f"  the launcher's agent command without the launcher: first step {first['agent'] * 1e3:7.0f} ms")
        for what, base, other in (
            ("the agent command's flags and environment", "torchrun", "agent"),
            ("the launcher's own process", "agent", "launcher"),
        ):
            mid, low, high = paired_first_step(results[base], results[other])
            print(f"    {what}: {100 * mid:+.1f} % ({100 * low:+.1f} .. {100 * high:+.1f} %)")
    if popens:
        print(
            f"  launcher's start to its Popen of the agent {statistics.median(popens) * 1e3:5.0f} ms "
            f"({min(popens) * 1e3:.0f}-{max(popens) * 1e3:.0f}; 1 % of bare torchrun's time to the first step: "
            f"{first['torchrun'] * 10:.0f} ms)"
        )
    print(
        f"  step time            torchrun {step['torchrun'] * 1e3:7.2f} ms   launcher "
        f"{step['launcher'] * 1e3:7.2f} ms   ratio {step['launcher'] / step['torchrun']:.3f}"
        f"   (target: within 1 %)"
    )
    print(
        f"  rank 0's CPU per step  torchrun {step_cpu['torchrun'] * 1e3:7.2f} ms   launcher "
        f"{step_cpu['launcher'] * 1e3:7.2f} ms   ratio {step_cpu['launcher'] / step_cpu['torchrun']:.3f}"
    )
    print(
        f"  own CPU of the top process (share of one core over the run): torchrun's agent {100 * cpu['torchrun']:.2f} %"
        f"   launcher {100 * cpu['launcher']:.2f} % (plus the same agent below it)"
    )
    print(
        f"  python -m launcher --help: {help_s * 1e3:.0f} ms (python -c pass: {python_s * 1e3:.0f} ms; target < 150 ms)"
    )
    print(f"  runs kept in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
