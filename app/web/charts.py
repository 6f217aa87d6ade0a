"""Server-rendered charts: geometry computed here, drawn by one dumb template (templates/web/chart.svg).

- memory_chart: a stacked bar per pipeline stage (weights, gradients, optimizer, activations, other) against the
  GPU's capacity and the usable line left by the headroom; the peak stage is marked.
- pipeline_chart: the 1F1B (or interleaved) schedule of the plan, GPUs of each stage as rows; idle time (the
  bubble) is shaded. Long steady phases are cut out and marked, so warm-up and cool-down stay readable.
- step_chart: each ranked plan's step time split by cause, on one axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from app.planner.explain import describe
from app.planner.results import Plan
from app.web.schedule import Op, simulate

GiB = 2**30
FONT = 11

MEMORY_PARTS = (("weights_bytes", "weights", "#4e79a7"), ("gradients_bytes", "gradients", "#f28e2b"),
                ("optimizer_bytes", "optimizer", "#59a14f"), ("activations_bytes", "activations", "#e15759"),
                ("other_bytes", "other", "#9c9c9c"))
STEP_PARTS = {"compute_s": ("compute", "#4e79a7"), "recompute_s": ("recompute", "#a0cbe8"),
              "tp_comm_s": ("TP comm", "#f28e2b"), "cp_comm_s": ("CP comm", "#ffbe7d"),
              "ep_comm_s": ("EP comm", "#b07aa1"), "pp_comm_s": ("PP comm", "#d4a6c8"),
              "zero_comm_s": ("ZeRO comm", "#9d7660"), "bubble_s": ("bubble", "#bab0ac"),
              "dp_comm_s": ("DP comm", "#59a14f"), "optimizer_s": ("optimizer", "#8cd17d"),
              "offload_s": ("offload", "#e15759")}
CHUNK_COLORS = (("#a0cbe8", "#4e79a7"), ("#ffbe7d", "#f28e2b"), ("#8cd17d", "#59a14f"), ("#d4a6c8", "#b07aa1"))


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    w: float
    h: float
    fill: str
    title: str = ""
    cls: str = ""
    stroke: str = ""


# How each kind of line looks on its own (a standalone .svg); the page's stylesheet restyles them by class.
LINE_STYLES = {"axis": ("#999999", 1.0, ""), "grid": ("#e6e6e6", 1.0, ""), "capacity": ("#c0352b", 2.0, ""),
               "usable": ("#d69e2e", 1.5, "6 4")}


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    cls: str = "axis"

    @property
    def stroke(self) -> str:
        return LINE_STYLES[self.cls][0]

    @property
    def width(self) -> float:
        return LINE_STYLES[self.cls][1]

    @property
    def dash(self) -> str:
        return LINE_STYLES[self.cls][2]


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str
    anchor: str = "start"
    cls: str = ""


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    desc: str
    width: float
    height: float
    rects: list[Rect] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)  # (colour, name) under the chart (HTML)


def nice_step(span: float, ticks: int = 5) -> float:
    raw = span / max(ticks, 1)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _y_axis(chart: Chart, top: float, bottom: float, left: float, right: float, vmax: float, unit: str) -> None:
    step = nice_step(vmax)
    v = 0.0
    while v <= vmax + 1e-9:
        y = bottom - (bottom - top) * v / vmax
        chart.lines.append(Line(left, y, right, y, "grid"))
        chart.labels.append(Label(left - 6, y + 4, f"{v:g}", "end", "tick"))
        v += step
    chart.labels.append(Label(left - 6, top - 10, unit, "end", "tick"))


def memory_chart(plan: Plan, width: float = 640, height: float = 320) -> Chart:
    mem = plan.estimate.memory
    stages = mem.stages
    left, right, top, bottom = 52.0, width - 150, 26.0, height - 34
    vmax = max(mem.capacity_bytes, mem.peak_bytes) / GiB * 1.08
    chart = Chart("memory-chart", "Memory per GPU by pipeline stage",
                  f"Stacked memory of one GPU of each of {len(stages)} pipeline stages against "
                  f"{mem.capacity_bytes / GiB:.1f} GiB capacity; peak {mem.peak_bytes / GiB:.1f} GiB on stage "
                  f"{mem.peak_stage}.", width, height)
    _y_axis(chart, top, bottom, left, right, vmax, "GiB")
    slot = (right - left) / len(stages)
    bar = min(56.0, slot * 0.7)
    label_every = max(1, math.ceil(len(stages) / 16))
    for s in stages:
        x = left + slot * s.stage + (slot - bar) / 2
        y = bottom
        for attr, name, colour in MEMORY_PARTS:
            h = (bottom - top) * getattr(s, attr) / GiB / vmax
            y -= h
            if h > 0:
                title = f"stage {s.stage} {name}: {getattr(s, attr) / GiB:.2f} GiB"
                chart.rects.append(Rect(x, y, bar, h, colour, title))
        peak = s.stage == mem.peak_stage
        chart.rects.append(Rect(x, y, bar, bottom - y, "none", f"stage {s.stage}: {s.total_bytes / GiB:.2f} GiB, "
                                f"{s.layers} layers", "peak" if peak else "outline", "#222222" if peak else ""))
        if bar >= 22 or peak:
            cls = "value strong" if peak else "value"
            chart.labels.append(Label(x + bar / 2, y - 4, f"{s.total_bytes / GiB:.1f}", "middle", cls))
        if s.stage % label_every == 0:
            chart.labels.append(Label(x + bar / 2, bottom + 14, str(s.stage), "middle", "tick"))
    chart.labels.append(Label((left + right) / 2, bottom + 28, "pipeline stage", "middle", "tick"))
    for value, text, cls in ((mem.capacity_bytes, "capacity", "capacity"), (mem.usable_bytes, "usable", "usable")):
        y = bottom - (bottom - top) * value / GiB / vmax
        chart.lines.append(Line(left, y, right, y, cls))
        chart.labels.append(Label(right + 6, y + 4, f"{text} {value / GiB:.1f} GiB", "start", cls))
    chart.lines.append(Line(left, bottom, right, bottom, "axis"))
    chart.legend.extend((colour, name) for _attr, name, colour in MEMORY_PARTS)
    return chart


def _drawn_microbatches(pp: int, vpp: int, m: int) -> int:
    """Enough micro-batches to show warm-up, some steady state and cool-down."""
    limit = max(3 * pp, 12) if vpp == 1 else max(2 * pp, 8)
    if m <= limit:
        return m
    return math.ceil(limit / pp) * pp if vpp > 1 else limit


def _cut(ops: list[Op], elided: int) -> tuple[float, float]:
    """Where to cut the steady phase (middle of the drawn step) and how wide the cut mark is, in op time."""
    makespan = max(op.end for op in ops)
    return (makespan / 2, makespan * 0.06) if elided else (makespan, 0.0)


def _shift(t: float, cut: float, gap: float) -> float:
    return t if t <= cut else t + gap


@dataclass(frozen=True)
class _Frame:
    """Where the schedule is drawn: rows of `row` px from `top`, op time -> x with a cut of `gap` at `cut`."""

    left: float
    top: float
    row: float
    scale: float
    cut: float
    gap: float

    def x(self, t: float) -> float:
        return self.left + _shift(t, self.cut, self.gap) * self.scale


BUBBLE_FILL, CUT_FILL = "url(#pipeline-chart-bubble)", "url(#pipeline-chart-cut)"


def _op_rects(chart: Chart, ops: list[Op], frame: _Frame, vpp: int) -> None:
    for op in ops:
        fill = CHUNK_COLORS[op.chunk % len(CHUNK_COLORS)][0 if op.kind == "F" else 1]
        what = "forward" if op.kind == "F" else "backward"
        title = f"stage {op.stage} {what} micro-batch {op.microbatch}" + (f" chunk {op.chunk}" if vpp > 1 else "")
        spans = [(op.start, op.end)] if not (op.start < frame.cut < op.end) else [(op.start, frame.cut),
                                                                                   (frame.cut, op.end)]
        y = frame.top + op.stage * frame.row + 1
        for a, z in spans:
            x0, x1 = frame.x(a), frame.x(z)
            chart.rects.append(Rect(x0, y, max(x1 - x0 - 0.5, 0.5), frame.row - 2, fill, title, "op"))
        x0, x1 = frame.x(spans[0][0]), frame.x(spans[0][1])
        if x1 - x0 >= 13 and frame.row >= 14:  # room for the micro-batch number
            chart.labels.append(Label((x0 + x1) / 2, y + frame.row / 2 + 2.5, str(op.microbatch), "middle", "oplabel"))


def pipeline_chart(plan: Plan, width: float = 1200) -> Chart:
    par, m = plan.parallel, plan.layout.num_microbatches
    b = plan.estimate.time.breakdown
    compute = b.get("compute_s", 0.0)
    ratio = 2 + 3 * b.get("recompute_s", 0.0) / compute if compute > 0 else 2.0  # backward / forward time
    drawn = _drawn_microbatches(par.pp, par.vpp, m)
    ops = simulate(par.pp, par.vpp, drawn, 1.0, ratio)
    elided = m - drawn
    cut, gap = _cut(ops, elided)
    row = max(7.0, min(34.0, 240 / par.pp))
    left, right, top = 60.0, width - 12, 12.0
    frame = _Frame(left, top, row, (right - left) / (max(op.end for op in ops) + gap), cut, gap)
    bottom = top + row * par.pp
    desc = (f"{'Interleaved ' if par.vpp > 1 else ''}1F1B schedule, PP{par.pp}"
            f"{f' × VPP{par.vpp}' if par.vpp > 1 else ''}, {m} micro-batches"
            f"{f' ({elided} steady-state ones cut out)' if elided else ''}; estimated bubble "
            f"{100 * plan.estimate.time.bubble_fraction:.1f}% of the step.")
    chart = Chart("pipeline-chart", "Pipeline schedule", desc, width, bottom + 44)
    for s in range(par.pp):
        y = top + s * row
        chart.rects.append(Rect(left, y + 1, right - left, row - 2, BUBBLE_FILL, f"stage {s}: idle = bubble", "bubble"))
        if s % max(1, math.ceil(par.pp / 16)) == 0:
            chart.labels.append(Label(left - 6, y + row / 2 + 4, f"stage {s}", "end", "tick"))
    _op_rects(chart, ops, frame, par.vpp)
    if elided:
        x, w = frame.x(cut), gap * frame.scale
        chart.rects.append(Rect(x, top - 2, w, bottom - top + 4, CUT_FILL, f"{elided} micro-batches not drawn", "cut"))
        chart.labels.append(Label(x + w / 2, bottom + 14, f"+{elided} micro-batches", "middle", "tick"))
    chart.labels.append(Label(left, bottom + 32, "time →", "start", "tick"))
    if par.vpp == 1:
        chart.legend.extend([(CHUNK_COLORS[0][0], "forward"), (CHUNK_COLORS[0][1], "backward")])
    else:  # one colour per model chunk: light = forward, dark = backward
        colours = len(CHUNK_COLORS)
        chart.legend.extend((CHUNK_COLORS[c][1], "chunk " + ", ".join(str(k + 1) for k in range(c, par.vpp, colours))
                             + " (light: forward)") for c in range(min(par.vpp, colours)))
    chart.legend.append(("#d9d9d9", "idle (bubble)"))
    return chart


def step_chart(plans: list[Plan], selected: int, width: float = 640) -> Chart:
    row, left, right, top = 24.0, 44.0, width - 70, 8.0
    height = top + row * len(plans) + 30
    vmax = max(p.estimate.time.step_s for p in plans) or 1.0
    desc = (f"Seconds per optimizer step of the {len(plans)} ranked plans, split into compute, recomputation, "
            "exposed communication, bubble and optimizer.")
    chart = Chart("step-chart", "Step time by cause", desc, width, height)
    used: dict[str, tuple[str, str]] = {}
    for i, p in enumerate(plans):
        y, x = top + i * row, left
        for key, seconds in p.estimate.time.breakdown.items():
            if seconds <= 0:
                continue
            name, colour = STEP_PARTS.get(key, (key.removesuffix("_s"), "#666666"))
            used[key] = (colour, name)
            w = (right - left) * seconds / vmax
            chart.rects.append(Rect(x, y + 3, w, row - 6, colour, f"#{p.rank} {name}: {seconds:.3f} s "
                                    f"({100 * seconds / p.estimate.time.step_s:.1f}%)"))
            x += w
        strong = " strong" if p.rank == selected else ""
        chart.labels.append(Label(left - 6, y + row / 2 + 4, f"#{p.rank}", "end", "tick" + strong))
        chart.labels.append(Label(x + 4, y + row / 2 + 4, f"{p.estimate.time.step_s:.2f} s", "start", "value" + strong))
        chart.rects.append(Rect(left, y + 3, x - left, row - 6, "none", f"#{p.rank} {describe(p.parallel)}",
                                "peak" if p.rank == selected else "outline", "#222222" if p.rank == selected else ""))
    chart.lines.append(Line(left, top, left, top + row * len(plans), "axis"))
    chart.labels.append(Label(left, height - 8, "seconds per step →", "start", "tick"))
    chart.legend.extend(used[k] for k in STEP_PARTS if k in used)
    return chart
