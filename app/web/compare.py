"""2-4 plans side by side: stored plans or ranked alternatives of one, as `<id>:<rank>` references.

Each row of numbers shows its delta against the first plan (the baseline); memory charts share one axis; the step
chart puts every plan on one time axis; the schedules are drawn per plan; the rendered files are diffed against the
baseline's (unified diff, only the files that differ)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from app.planner.errors import FieldError
from app.planner.explain import describe
from app.planner.results import Plan
from app.service.planning import NotFound, plan_artifacts, why_unrendered
from app.store import PlanRecord, PlanStore
from app.web import charts
from app.web.pages import svg
from app.web.pipeline_chart import pipeline_chart
from app.web.prefs import Prefs
from app.web.schedule import stage_timing
from app.web.templates import WebTemplates, seconds

MIN_PLANS, MAX_PLANS = 2, 4
LETTERS = "ABCD"
REF = re.compile(r"^([0-9a-f]{16})(?::([0-9]{1,4}))?$")
MAX_DIFF_LINES = 400


@dataclass(frozen=True)
class Ref:
    plan_id: str
    rank: int


@dataclass(frozen=True)
class Column:
    letter: str
    ref: Ref
    record: PlanRecord
    plan: Plan

    @property
    def title(self) -> str:
        r = self.record.result
        return f"{r.model.name} on {self.plan.layout.world_size} × {r.cluster.gpu.name}"


@dataclass(frozen=True)
class Row:
    label: str
    cells: list[tuple[str, str, str]]  # (value, delta against A, "better" | "worse" | "")


def parse_refs(raw: list[str]) -> tuple[list[Ref], list[FieldError]]:
    refs, errors = [], []
    for text in raw:
        match = REF.match(text.strip())
        if match is None:
            errors.append(FieldError("p", f"{text[:40]!r} is not <plan id>:<rank> (16 hex digits, then a rank)"))
            continue
        refs.append(Ref(match.group(1), int(match.group(2) or 1)))
    refs = list(dict.fromkeys(refs))
    if not errors and not MIN_PLANS <= len(refs) <= MAX_PLANS:
        errors.append(
            FieldError("p", f"choose {MIN_PLANS} to {MAX_PLANS} different plans to compare ({len(refs)} chosen)")
        )
    return refs, errors


def _columns(store: PlanStore, refs: list[Ref], errors: list[FieldError]) -> list[Column]:
    out: list[Column] = []
    for ref in refs:
        record = store.get(ref.plan_id)
        if record is None:
            errors.append(FieldError("p", f"no stored plan with id {ref.plan_id}"))
        elif not record.result.plans:
            errors.append(FieldError("p", f"plan {ref.plan_id} has no feasible plans to compare: nothing fit"))
        elif not 1 <= ref.rank <= len(record.result.plans):
            errors.append(
                FieldError("p", f"plan {ref.plan_id} has ranks 1..{len(record.result.plans)}, not {ref.rank}")
            )
        else:
            out.append(Column(LETTERS[len(out)], ref, record, record.result.plans[ref.rank - 1]))
    return out


def _row(
    label: str, columns: list[Column], value: Any, text: Any, higher_is_better: bool | None, points: bool = False
) -> Row:
    """A compared number, each column's change against the first: relative, or in percentage points (`points`)
    for a value that is a fraction already (a bubble of 0 % against 0.2 % read +230,611,985,197.4 %)."""
    base = value(columns[0])
    cells = []
    for i, c in enumerate(columns):
        v = value(c)
        if i == 0 or higher_is_better is None or not (base or points):
            cells.append((text(c), "", ""))
            continue
        change = v - base if points else v / base - 1
        better = (change > 0) == higher_is_better
        mark = "" if abs(change) < 0.005 else ("better" if better else "worse")
        cells.append((text(c), f"{100 * change:+.1f} pt" if points else f"{100 * change:+.1f}%", mark))
    return Row(label, cells)


def mfu_label(columns: list[Column]) -> str:
    """MFU's row label: an FP8 plan's MFU is of the BF16 peak (so that FP8 and BF16 runs compare), as its own page
    says; here it read as plain MFU, so FP8's +40 % against BF16 looked like a better use of the same peak."""
    fp8 = any(c.record.result.training.precision == "fp8" for c in columns)
    return "MFU (of the BF16 peak)" if fp8 else "MFU"


def _precision(c: Column) -> str:
    t = c.record.result.training
    return f"{t.precision} {t.fp8_recipe}" if t.precision == "fp8" and t.fp8_recipe else t.precision


def number_rows(columns: list[Column], prefs: Prefs) -> list[Row]:
    def t(c: Column) -> Any:
        return c.plan.estimate.time

    def m(c: Column) -> Any:
        return c.plan.estimate.memory

    return [
        Row("layout", [(describe(c.plan.parallel), "", "") for c in columns]),
        # the training's own choices, which the layout does not name: an fp8 plan beside a bf16 one read as the
        # same request (review 2026-12-07)
        Row("precision", [(_precision(c), "", "") for c in columns]),
        _row("GPUs", columns, lambda c: c.plan.layout.world_size, lambda c: f"{c.plan.layout.world_size:,}", False),
        _row("tokens/s", columns, lambda c: t(c).tokens_per_s, lambda c: f"{t(c).tokens_per_s:,.0f}", True),
        _row(
            "tokens/s per GPU",
            columns,
            lambda c: t(c).tokens_per_s / c.plan.layout.world_size,
            lambda c: f"{t(c).tokens_per_s / c.plan.layout.world_size:,.0f}",
            True,
        ),
        # as the result page writes a step, in the first column's unit (it read "27.022 s" beside "27.02 s")
        _row("step", columns, lambda c: t(c).step_s, lambda c: seconds(t(c).step_s, t(columns[0]).step_s), False),
        _row(mfu_label(columns), columns, lambda c: t(c).mfu, lambda c: f"{100 * t(c).mfu:.1f}%", True),
        _row(
            "bubble",
            columns,
            lambda c: t(c).bubble_fraction,
            lambda c: f"{100 * t(c).bubble_fraction:.1f}%",
            False,
            points=True,
        ),
        _row(
            f"peak memory ({prefs.units})",
            columns,
            lambda c: m(c).peak_bytes,
            lambda c: f"{prefs.mem(m(c).peak_bytes)} of {prefs.mem(m(c).capacity_bytes)}",
            False,
        ),
        _row(
            "micro-batches",
            columns,
            lambda c: c.plan.layout.num_microbatches,
            lambda c: f"{c.plan.layout.num_microbatches} × {c.plan.parallel.micro_batch_size}",
            None,
        ),
    ]


@dataclass(frozen=True)
class FileDiff:
    name: str
    against: str  # letter
    lines: list[str]
    truncated: bool


def unrendered(columns: list[Column], files: list[dict[str, str]]) -> list[str]:
    """Why each plan without files has none (a framework the renderer does not write, say): its files are not
    diffed, which showed every line of the other plan's as deleted (QA, 2026-12-07)."""
    return [
        f"{c.letter} has no rendered files: {why_unrendered(c.record, c.ref.rank)}"
        for c, mine in zip(columns, files, strict=True)
        if not mine
    ]


def file_diffs(store: PlanStore, columns: list[Column]) -> tuple[list[FileDiff], list[str]]:
    """Each later plan's files against the baseline's: only files that differ, at most MAX_DIFF_LINES lines each;
    and why a plan has no files (`unrendered`), whose files are then not diffed."""
    files = [plan_artifacts(store, c.record, c.ref.rank) for c in columns]
    missing = unrendered(columns, files)
    if not files[0]:
        return [], missing
    out = []
    for c, theirs in zip(columns[1:], files[1:], strict=True):
        if not theirs:
            continue
        for name in sorted(set(files[0]) | set(theirs)):
            a, b = files[0].get(name, ""), theirs.get(name, "")
            if a == b:
                continue
            lines = list(
                difflib.unified_diff(
                    a.splitlines(), b.splitlines(), f"A/{name}", f"{c.letter}/{name}", lineterm="", n=1
                )
            )
            out.append(FileDiff(name, c.letter, lines[:MAX_DIFF_LINES], len(lines) > MAX_DIFF_LINES))
    return out, missing


def compare_context(
    templates: WebTemplates, store: PlanStore, refs: list[Ref], errors: list[FieldError], prefs: Prefs
) -> dict[str, Any]:
    columns = _columns(store, refs, errors) if not errors else []
    context: dict[str, Any] = {"errors": [str(e) for e in errors], "columns": columns, "prefs": prefs}
    if errors or len(columns) < MIN_PLANS:
        return context
    vmax = max(max(c.plan.estimate.memory.capacity_bytes, c.plan.estimate.memory.peak_bytes) for c in columns)
    step = charts.step_chart([c.plan for c in columns], -1, labels=[c.letter for c in columns])
    try:
        diffs, unrendered_notes = file_diffs(store, columns)
    except NotFound:
        diffs, unrendered_notes = [], []
    context.update(
        rows=number_rows(columns, prefs),
        memory=[
            (
                c,
                svg(
                    templates,
                    charts.memory_chart(
                        c.plan, width=480, prefs=prefs, vmax_bytes=vmax, chart_id=f"memory-chart-{c.letter}"
                    ),
                ),
            )
            for c in columns
        ],
        memory_legend=charts.memory_chart(columns[0].plan, prefs=prefs).legend,
        step_svg=svg(templates, step),
        step_legend=step.legend,
        pipelines=[(c, svg(templates, _pipeline(c))) for c in columns],
        diffs=diffs,
        unrendered=unrendered_notes,
    )
    return context


def _pipeline(c: Column) -> charts.Chart:
    chart = pipeline_chart(
        c.plan,
        stage_timing(c.record.result.model, c.record.result.cluster, c.record.result.training, c.plan),
        width=900,
    )
    return charts.Chart(
        f"pipeline-chart-{c.letter}",
        chart.title,
        chart.desc,
        chart.width,
        chart.height,
        chart.rects,
        chart.lines,
        chart.labels,
        chart.legend,
    )
