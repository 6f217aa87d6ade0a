"""`trainplan plan`, `estimate` and `render`: the planner's answers as tables, JSON or written files."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.common import fail, input_error, notify, read_request, saved_clusters
from app.planner import estimate, plan
from app.planner.errors import FieldError
from app.planner.explain import describe
from app.planner.results import CheckpointPlan, Estimate, PlanResult

GiB = 2**30


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def format_estimate(est: Estimate) -> str:
    t, m = est.time, est.memory
    lines = [f"feasible: {'yes' if est.feasible else 'no'}"]
    lines += [f"  - {r}" for r in est.reasons]
    lines.append(
        f"step {t.step_s:.3f} s | {t.tokens_per_s:,.0f} tokens/s | {t.tflops_per_gpu:.1f} TFLOP/s per GPU | "
        f"MFU {_pct(t.mfu)} | bubble {_pct(t.bubble_fraction)}"
    )
    lines.append("time breakdown: " + ", ".join(f"{k[:-2]} {v:.3f}s" for k, v in t.breakdown.items() if v > 0))
    lines.append(f"peak memory {m.peak_bytes / GiB:.1f} GiB of {m.capacity_bytes / GiB:.1f} GiB (stage {m.peak_stage})")
    lines.append(
        f"{'stage':>5} {'layers':>6} {'weights':>8} {'grads':>8} {'optim':>8} {'activ':>8} {'other':>8} "
        f"{'total':>8}  GiB"
    )
    for s in m.stages:
        lines.append(
            f"{s.stage:>5} {s.layers:>6} {s.weights_bytes / GiB:>8.2f} {s.gradients_bytes / GiB:>8.2f} "
            f"{s.optimizer_bytes / GiB:>8.2f} {s.activations_bytes / GiB:>8.2f} {s.other_bytes / GiB:>8.2f} "
            f"{s.total_bytes / GiB:>8.2f}"
        )
    if m.cpu_bytes_per_node:
        lines.append(f"host memory for offload: {m.cpu_bytes_per_node / GiB:.0f} GiB per node")
    return "\n".join(lines)


def format_checkpoint(cp: CheckpointPlan) -> str:
    return (
        f"every {cp.interval_steps:,} steps ({cp.interval_s / 3600:.2f} h), save {cp.save_s:.0f} s of "
        f"{cp.size_bytes / GiB:,.0f} GiB, MTBF {cp.mtbf_s / 3600:,.1f} h ({cp.mtbf_source}): "
        f"expected goodput {_pct(cp.goodput)}"
    )


def format_plan(result: PlanResult) -> str:
    m, c = result.model, result.cluster
    lines = [
        f"{m.name}: {result.num_parameters / 1e9:.2f}B parameters on {c.num_nodes} x {c.gpus_per_node} "
        f"{c.gpu.name} ({result.training.framework}, {result.training.precision}, "
        f"global batch {result.training.global_batch_size})",
        f"searched {result.stats.candidates} candidates in {result.stats.seconds:.2f} s: "
        f"{result.stats.feasible} feasible" + (" (time cap hit)" if result.stats.truncated else ""),
    ]
    if result.plans:
        # the plan column as wide as its longest layout (58 at least): longer ones pushed the numbers out of line
        w = max(58, *(len(describe(p.parallel)) for p in result.plans))
        lines.append(
            f"{'#':>3}  {'plan':<{w}} {'GA':>4} {'peak GiB':>8} {'step s':>8} {'tokens/s':>11} {'MFU':>6} {'bubble':>6}"
        )
        for p in result.plans:
            t = p.estimate.time
            lines.append(
                f"{p.rank:>3}  {describe(p.parallel):<{w}} {p.layout.num_microbatches:>4} "
                f"{p.estimate.memory.peak_bytes / GiB:>8.1f} {t.step_s:>8.2f} {t.tokens_per_s:>11,.0f} "
                f"{_pct(t.mfu):>6} {_pct(t.bubble_fraction):>6}"
            )
        lines.append("why #1: " + "; ".join(result.plans[0].why))
        if result.plans[0].checkpoint:
            lines.append("checkpoint #1: " + format_checkpoint(result.plans[0].checkpoint))
    for s in result.suggestions:
        lines.append(f"* {s}")
    if result.rejected:
        lines.append("rejected candidates:")
        lines += [f"  {g.count:>6} {g.reason}: {g.message}" for g in result.rejected]
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    from app.service.errors import Refused
    from app.service.requests import parse_plan_request

    try:
        parsed = parse_plan_request(read_request(args.request), saved_clusters)
        notify(parsed.notices)
        result = plan(parsed.request)
    except Refused as exc:  # the same reading as the service's: bodies, presets, config.json, bounds
        return fail(exc.errors)
    except ValueError as exc:  # the planner's own (pydantic's ValidationError, its InputError)
        return input_error(exc)
    print(result.model_dump_json(indent=2) if args.json else format_plan(result))
    return 0 if result.plans else 1


def cmd_estimate(args: argparse.Namespace) -> int:
    from app.service.errors import Refused
    from app.service.requests import parse_estimate_request

    try:
        est = estimate(parse_estimate_request(read_request(args.request), saved_clusters))
    except Refused as exc:
        return fail(exc.errors)
    except ValueError as exc:  # the planner's own (pydantic's ValidationError, its InputError)
        return input_error(exc)
    print(est.model_dump_json(indent=2) if args.json else format_estimate(est))
    # an infeasible layout is a failure a script can test for, as a plan of nothing is (it exited 0, QA 2026-12-07)
    return 0 if est.feasible else 1


def _os_reason(exc: OSError, out: str) -> str:
    """Why, and on which path when it is not the folder itself: `out/sbatch.sh: Is a directory`."""
    reason = exc.strerror or str(exc)
    if exc.filename is None or Path(exc.filename) == Path(out):
        if Path(out).exists() and not Path(out).is_dir():  # mkdir's "File exists" read as if it had to be new (QA)
            return "it is a file, not a directory"
        return reason
    return f"{exc.filename}: {reason}"


def cmd_render(args: argparse.Namespace) -> int:
    """Plan, then write the chosen plan's artifacts (request key 'render' holds the RenderOptions)."""
    from app.render import RenderOptions, render, write_artifacts
    from app.service.errors import Refused
    from app.service.requests import parse_plan_request

    if not args.out.strip():  # `--out "$OUT"` with $OUT unset wrote every file into the current directory (QA)
        return fail([FieldError("--out", "is empty: give the directory to write the files into")])
    try:
        parsed = parse_plan_request(read_request(args.request), saved_clusters)
        options = parsed.options or RenderOptions()
        notify(parsed.notices)
        result = plan(parsed.request)
    except Refused as exc:
        return fail(exc.errors)
    except ValueError as exc:  # the planner's own (pydantic's ValidationError, its InputError)
        return input_error(exc)
    if not result.plans:
        print(format_plan(result))
        return 1
    if not 1 <= args.rank <= len(result.plans):
        return fail([FieldError("--rank", f"{args.rank} is not between 1 and {len(result.plans)}")])
    try:
        arts = render(result, rank=args.rank, options=options)
    except ValueError as exc:  # a plan the tools cannot run, or options that do not fit it
        return input_error(exc, "render")
    removed: list[Path] = []
    try:
        written = write_artifacts(arts, args.out, removed=removed)
    except OSError as exc:  # not a directory, no permission, a full disk: named, not a traceback; nothing written
        return fail([FieldError("--out", f"cannot write the files into {args.out}: {_os_reason(exc, args.out)}")])
    chosen = result.plans[args.rank - 1]
    print(f"plan #{args.rank}: {describe(chosen.parallel)} ({chosen.estimate.time.tokens_per_s:,.0f} tokens/s)")
    for path in written:
        print(f"  wrote {path}")
    if removed:  # a previous render's files that this plan does not have (a DeepSpeed plan's hostfile, a plan.json)
        print(f"  removed {', '.join(str(p) for p in removed)}: a previous render's, not this plan's")
    for note in arts.notes:
        print(f"  note: {note}")
    return 0
