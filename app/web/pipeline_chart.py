"""The pipeline schedule chart: GPUs of each stage as rows, every forward and backward pass at its own stage's time
(app/web/schedule.py), the bubble shaded, a time axis in seconds. A long steady phase is cut out and marked, so
warm-up and cool-down stay readable; passes too narrow to see are drawn as one busy span per row, which keeps a
PP64 x VPP2 page small."""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.planner.pipeline import pipeline_time
from app.planner.results import Plan
from app.web.charts import CHUNK_COLORS, Chart, Label, Line, Rect, nice_step
from app.web.schedule import Op, StageTiming, simulate

BUBBLE_FILL, CUT_FILL = "pattern:bubble", "pattern:cut"  # the chart's own <pattern>s (templates/web/chart.svg)
BUSY_FILL = "#7f8fa6"
MIN_OP_PX = 3.0  # narrower passes merge into busy spans
MAX_ROWS = 32  # more stages: every k-th is drawn, the rest are alike


def drawn_microbatches(pp: int, vpp: int, m: int) -> int:
    """Enough micro-batches to show warm-up, some steady state and cool-down."""
    limit = max(3 * pp, 12) if vpp == 1 else max(2 * pp, 8)
    if m <= limit:
        return m
    return math.ceil(limit / pp) * pp if vpp > 1 else limit


@dataclass(frozen=True)
class _Frame:
    """Where the schedule is drawn: op time -> x with a cut of `gap` (op time) at `cut`, stage -> row."""

    left: float
    top: float
    row: float
    scale: float
    cut: float
    gap: float
    rows: tuple[int, ...]  # the stages drawn, top to bottom

    def x(self, t: float) -> float:
        return self.left + (t if t <= self.cut else t + self.gap) * self.scale

    def y(self, stage: int) -> float:
        return self.top + self.rows.index(stage) * self.row


def _spans(op: Op, cut: float) -> list[tuple[float, float]]:
    return [(op.start, cut), (cut, op.end)] if op.start < cut < op.end else [(op.start, op.end)]


def _op_rects(chart: Chart, ops: list[Op], frame: _Frame, vpp: int, elided: int) -> None:
    """The passes; one that starts after the cut is `elided` micro-batches later in the real step (whole steady-state
    cycles are cut out), so it carries that number: the last backward is the step's last micro-batch, m - 1."""
    busy: dict[int, list[float]] = {}  # stage -> [x0, x1] of the busy span being merged

    def flush(stage: int) -> None:
        span = busy.pop(stage, None)
        if span:
            chart.rects.append(
                Rect(
                    span[0],
                    frame.y(stage) + 1,
                    span[1] - span[0],
                    frame.row - 2,
                    BUSY_FILL,
                    f"stage {stage}: back-to-back passes",
                    "op busy",
                )
            )

    for op in sorted(ops, key=lambda o: (o.stage, o.start)):
        if op.stage not in frame.rows:
            continue
        y = frame.y(op.stage) + 1
        for a, z in _spans(op, frame.cut):
            x0, x1 = frame.x(a), frame.x(z)
            span = busy.get(op.stage)
            if x1 - x0 < MIN_OP_PX:
                if span and x0 - span[1] < 0.5:
                    span[1] = x1
                else:
                    flush(op.stage)
                    busy[op.stage] = [x0, x1]
                continue
            flush(op.stage)
            fill = CHUNK_COLORS[op.chunk % len(CHUNK_COLORS)][0 if op.kind == "F" else 1]
            what = "forward" if op.kind == "F" else "backward"
            number = op.microbatch + (elided if op.start >= frame.cut else 0)
            title = (
                f"stage {op.stage} {what} micro-batch {number}"
                + (f" chunk {op.chunk}" if vpp > 1 else "")
                + f": {1000 * (op.end - op.start):.1f} ms"
            )
            chart.rects.append(Rect(x0, y, max(x1 - x0 - 0.5, 0.5), frame.row - 2, fill, title, "op"))
            if x1 - x0 >= 13 and frame.row >= 14 and a == op.start:  # room for the micro-batch number
                chart.labels.append(Label((x0 + x1) / 2, y + frame.row / 2 + 2.5, str(number), "middle", "oplabel"))
    for stage in list(busy):
        flush(stage)


def _time_axis(chart: Chart, frame: _Frame, y: float, makespan: float, elided_s: float) -> None:
    """Ticks in seconds of the real step, spaced for the time drawn: from 0 to the cut, then from the end of the time
    cut out to the step's end (spaced for the whole step, a long cut left a single "0" tick)."""
    step = nice_step(makespan, 10 if elided_s > 0 else 6)  # a cut chart: two halves of about 5 ticks
    segments = [(0.0, frame.cut, 0.0)]
    if elided_s > 0:
        segments.append((frame.cut + elided_s, makespan + elided_s, elided_s))
    for first, last, shift in segments:
        t = math.ceil(first / step - 1e-9) * step
        while t <= last + 1e-12:
            x = frame.x(t - shift)
            chart.lines.append(Line(x, y, x, y + 4, "axis"))
            chart.labels.append(Label(x, y + 15, f"{t:.4g}", "middle", "tick"))
            t += step
    chart.labels.append(Label(frame.x(makespan), y + 30, "seconds into the step", "end", "tick"))


def pipeline_chart(plan: Plan, timing: list[StageTiming], width: float = 1200) -> Chart:
    par, m = plan.parallel, plan.layout.num_microbatches
    drawn = drawn_microbatches(par.pp, par.vpp, m)
    ops = simulate(par, drawn, timing)
    elided = m - drawn
    makespan = max(op.end for op in ops)
    slowest = max(t.forward_s + t.backward_s for t in timing)
    elided_s = elided * slowest  # the busiest stage runs the cut-out micro-batches back to back
    cut, gap = (makespan / 2, makespan * 0.06) if elided else (makespan, 0.0)
    every = max(1, math.ceil(par.pp / MAX_ROWS))
    rows = tuple(sorted({*range(0, par.pp, every), par.pp - 1}))
    row = max(7.0, min(34.0, 240 / len(rows)))
    left, right, top = 64.0, width - 70, 12.0
    frame = _Frame(left, top, row, (right - left) / (makespan + gap), cut, gap, rows)
    bottom = top + row * len(rows)
    pipe = pipeline_time([(t.forward_s + t.backward_s, 1) for t in timing], par, m)
    uneven = max(t.forward_s + t.backward_s for t in timing) > 1.02 * min(t.forward_s + t.backward_s for t in timing)
    desc = (
        f"{'Interleaved ' if par.vpp > 1 else ''}1F1B schedule, PP{par.pp}"
        f"{f' × VPP{par.vpp}' if par.vpp > 1 else ''}, {m} micro-batches"
        f"{f' ({elided} steady-state ones cut out)' if elided else ''}"
        f"{'; stages take their own time (uneven layers or embedding/loss)' if uneven else ''}"
        f"{f'; one stage in {every} drawn (the others run alike)' if every > 1 else ''}; pipeline fill and drain "
        f"{pipe.bubble_s:.3g} s, estimated bubble {100 * plan.estimate.time.bubble_fraction:.1f}% of the step."
    )
    chart = Chart("pipeline-chart", "Pipeline schedule", desc, width, bottom + 48)
    for s in rows:
        y = frame.y(s)
        t = timing[s]
        chart.rects.append(
            Rect(
                left,
                y + 1,
                right - left,
                row - 2,
                BUBBLE_FILL,
                f"stage {s}: {t.layers} layers, {t.in_flight:.3g} micro-batches in flight at the peak; idle = bubble",
                "bubble",
            )
        )
        if len(rows) <= 16 or rows.index(s) % math.ceil(len(rows) / 16) == 0:
            chart.labels.append(Label(left - 6, y + row / 2 + 4, f"stage {s}", "end", "tick"))
            chart.labels.append(Label(right + 6, y + row / 2 + 4, f"{t.layers} layers", "start", "tick"))
    _op_rects(chart, ops, frame, par.vpp, elided)
    if elided:
        x, w = frame.x(cut), gap * frame.scale
        chart.rects.append(
            Rect(
                x, top - 2, w, bottom - top + 4, CUT_FILL, f"{elided} micro-batches not drawn ({elided_s:.3g} s)", "cut"
            )
        )
        chart.labels.append(Label(x + w / 2, top - 3, f"+{elided} micro-batches", "middle", "tick"))
    chart.lines.append(Line(left, bottom, right, bottom, "axis"))
    _time_axis(chart, frame, bottom, makespan, elided_s)
    if par.vpp == 1:
        chart.legend.extend([(CHUNK_COLORS[0][0], "forward"), (CHUNK_COLORS[0][1], "backward")])
    else:  # one colour per model chunk: light = forward, dark = backward
        colours = len(CHUNK_COLORS)
        chart.legend.extend(
            (
                CHUNK_COLORS[c][1],
                "chunk " + ", ".join(str(k + 1) for k in range(c, par.vpp, colours)) + " (light: forward)",
            )
            for c in range(min(par.vpp, colours))
        )
    if any(r.fill == BUSY_FILL for r in chart.rects):
        chart.legend.append((BUSY_FILL, "passes too short to draw one by one"))
    chart.legend.append(("#d9d9d9", "idle (bubble)"))
    return chart
