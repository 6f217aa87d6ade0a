"""The `bench` verb: run the plan's trainer for a fixed number of steps and put measured peak memory per rank
and tokens/s next to the planner's prediction (plan.json `prediction`).

The entrypoint must accept `--train-iters N --metrics-dir DIR` and write DIR/rank<R>.json as
examples/train_gpt.py does (per-step `step_s`, `tokens_per_step`, `peak_memory_bytes`, `memory_kind`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from launcher.context import LaunchContext
from launcher.launch import context_from_args, launch
from launcher.rundir import write_atomic
from launcher.spec import Plan
from launcher.storage import output_refusal
from launcher.table import error_pct, gib, table

CPU_MEMORY_NOTE = (
    "measured on CPU: the process's max RSS (interpreter, torch and all), not comparable with a GPU-memory prediction"
)


def stage_of(rank: int, plan: Plan) -> int:
    """Pipeline stage of a global rank in Megatron's default order (tp fastest, then cp, dp, pp outermost)."""
    p = plan.parallel
    return rank // (p.tp * p.cp * p.dp)


def measured_step_s(metrics: list[dict[str, Any]], warmup: int) -> float:
    """Median over steps after warm-up of the slowest rank's step time (ranks wait for each other)."""
    per_step: dict[int, float] = {}
    for m in metrics:
        for s in m["steps"]:
            per_step[s["step"]] = max(per_step.get(s["step"], 0.0), s["step_s"])
    kept = [per_step[k] for k in sorted(per_step)][warmup:] or list(per_step.values())
    if not kept:
        raise SystemExit("launcher bench: the entrypoint reported no step (its metrics list none)")
    return statistics.median(kept)


def make_report(plan: Plan, metrics: list[dict[str, Any]], steps: int, warmup: int) -> dict[str, Any]:
    pred = plan.prediction
    step_s = measured_step_s(metrics, warmup)
    tokens_per_s = metrics[0]["tokens_per_step"] / step_s
    kind = metrics[0]["memory_kind"]
    memory = []
    for m in sorted(metrics, key=lambda m: m["rank"]):
        stage = stage_of(m["rank"], plan)
        values = pred.peak_memory_bytes if pred else ()
        predicted = values[stage] if len(values) > 1 else (values[0] if values else None)
        memory.append(
            {
                "rank": m["rank"],
                "stage": stage,
                "predicted_bytes": predicted,
                "measured_bytes": m["peak_memory_bytes"],
                "error_pct": _pct(predicted, m["peak_memory_bytes"]),
            }
        )
    return {
        "kind": "trainplan.bench_report",
        "schema_version": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "plan": plan.job.name,
        "steps": steps,
        "warmup": warmup,
        "tokens_per_s": {
            "predicted": pred.tokens_per_s if pred else None,
            "measured": tokens_per_s,
            "error_pct": _pct(pred.tokens_per_s if pred else None, tokens_per_s),
        },
        "step_s": {
            "predicted": pred.step_s if pred else None,
            "measured": step_s,
            "error_pct": _pct(pred.step_s if pred else None, step_s),
        },
        "memory_kind": kind,
        "peak_memory": memory,
        "note": CPU_MEMORY_NOTE if kind == "cpu_max_rss" else "torch.cuda.max_memory_allocated after reset",
    }


def _pct(predicted: float | None, measured: float) -> float | None:
    return None if not predicted else 100.0 * (measured - predicted) / predicted


def report_table(report: dict[str, Any]) -> str:
    rows = []
    for key, unit in (("tokens_per_s", "tokens/s"), ("step_s", "s")):
        r = report[key]
        pred = "-" if r["predicted"] is None else f"{r['predicted']:.4g} {unit}"
        rows.append((key, pred, f"{r['measured']:.4g} {unit}", error_pct(r["predicted"], r["measured"])))
    for m in report["peak_memory"]:
        rows.append(
            (
                f"peak memory rank {m['rank']} (stage {m['stage']})",
                gib(m["predicted_bytes"]),
                gib(m["measured_bytes"]),
                error_pct(m["predicted_bytes"], m["measured_bytes"]),
            )
        )
    return table(("metric", "predicted", "measured", "error"), rows) + f"\n({report['note']})"


def bench_context(args: argparse.Namespace) -> LaunchContext:
    """The plan's job for `--steps` steps, measured from step 0 and saving nothing: the empty --save and --load come
    last, so they win (Megatron's and the example trainer's argparse; an empty directory is none). It resumed from,
    and wrote its checkpoints into, the plan's real checkpoint directory, and crashed once that held a step past
    --steps (QA, 2026-12-06)."""
    ctx = context_from_args(args)
    extra = (
        *ctx.extra_args,
        "--train-iters",
        str(args.steps),
        "--metrics-dir",
        str(ctx.run_dir / "metrics"),
        "--save=",
        "--load=",
    )
    plan = replace(ctx.plan, job=replace(ctx.plan.job, max_restarts=0))
    return replace(ctx, plan=plan, extra_args=extra)


def refused_counts(steps: int, warmup: int) -> str | None:
    """Why `--steps` / `--warmup` cannot be benchmarked, None if they can. A negative warm-up let `--steps -1
    --warmup -5` through: a non-positive --train-iters is no count to the launcher, so 0 steps trained and the run
    was reported "stopped early" with exit 75 (QA 2026-12-07)."""
    if warmup < 0:
        return f"--warmup({warmup}) must be >= 0"
    if steps <= warmup:
        return f"--steps({steps}) must be > --warmup({warmup})"
    return None


def bench(args: argparse.Namespace) -> int:
    why = refused_counts(args.steps, args.warmup) or output_refusal(args.output)
    if why:  # a refusal before the start: exit 2, as every other (it was 1, QA 2026-12-07)
        print(f"launcher bench: {why}", file=sys.stderr)
        return 2
    ctx = bench_context(args)
    code = launch(ctx)
    if code or ctx.node_rank not in (None, 0):
        return code
    files = sorted((ctx.run_dir / "metrics").glob("rank*.json"))
    if not files:
        raise SystemExit(f"launcher bench: the entrypoint wrote no {ctx.run_dir / 'metrics'}/rank<R>.json")
    report = make_report(ctx.plan, [json.loads(f.read_text()) for f in files], args.steps, args.warmup)
    out = Path(args.output) if args.output else ctx.run_dir / "bench.json"
    write_atomic(out, json.dumps(report, indent=2) + "\n")
    print(report_table(report))
    print(f"\nreport written to {out}")
    return 0
