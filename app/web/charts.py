"""Server-rendered charts: geometry computed here, drawn by one dumb template (templates/web/chart.svg).

- memory_chart: a stacked bar per pipeline stage (weights, gradients, optimizer, activations, other) against the
  GPU's capacity and the usable line left by the headroom; the peak stage is marked.
- pipeline_chart (pipeline_chart.py): the plan's schedule, GPUs of each stage as rows, with the bubble shaded.
- step_chart: each ranked plan's step time split by cause, on one axis in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from app.planner.explain import describe
from app.planner.results import Plan
from app.web.prefs import Prefs

GiB = 2**30
FONT = 11
AXIS_TITLE_X = 4.0  # the y-axis title starts here, inside the chart

MEMORY_PARTS = (
    ("weights_bytes", "weights", "#4e79a7"),
    ("gradients_bytes", "gradients", "#f28e2b"),
    ("optimizer_bytes", "optimizer", "#59a14f"),
    ("activations_bytes", "activations", "#e15759"),
    ("other_bytes", "other", "#9c9c9c"),
)
STEP_PARTS = {
    "compute_s": ("compute", "#4e79a7"),
    "recompute_s": ("recompute", "#a0cbe8"),
    "tp_comm_s": ("TP comm", "#f28e2b"),
    "cp_comm_s": ("CP comm", "#ffbe7d"),
    "ep_comm_s": ("EP comm", "#b07aa1"),
    "pp_comm_s": ("PP comm", "#d4a6c8"),
    "zero_comm_s": ("ZeRO comm", "#9d7660"),
    "engine_s": ("pipeline engine", "#79706e"),
    "host_s": ("host wait", "#d7b5a6"),
    "bubble_s": ("bubble", "#bab0ac"),
    "dp_comm_s": ("DP comm", "#59a14f"),
    "optimizer_s": ("optimizer", "#8cd17d"),
    "offload_s": ("offload", "#e15759"),
}
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
LINE_STYLES = {
    "axis": ("#999999", 1.0, ""),
    "grid": ("#e6e6e6", 1.0, ""),
    "capacity": ("#c0352b", 2.0, ""),
    "usable": ("#d69e2e", 1.5, "6 4"),
}


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
    """Grid lines and tick labels from 0 to vmax, the axis title above it from the chart's left edge (anchored at
    its end it ran off the edge: "PU (GiB)" of "memory per GPU (GiB)")."""
    step = nice_step(vmax)
    v = 0.0
    while v <= vmax + 1e-9:
        y = bottom - (bottom - top) * v / vmax
        chart.lines.append(Line(left, y, right, y, "grid"))
        chart.labels.append(Label(left - 6, y + 4, f"{v:g}", "end", "tick"))
        v += step
    chart.labels.append(Label(AXIS_TITLE_X, top - 10, unit, "start", "tick"))


def _capacity_labels(chart: Chart, right: float, ys: list[tuple[float, str, str]]) -> None:
    """Labels of the capacity and usable lines, pushed apart when the lines are close (0-3 % headroom)."""
    placed: list[float] = []
    for y, text, cls in sorted(ys):
        at = y + 4
        if placed and at - placed[-1] < FONT + 2:
            at = placed[-1] + FONT + 2
        placed.append(at)
        chart.labels.append(Label(right + 6, at, text, "start", cls))


def memory_chart(
    plan: Plan,
    width: float = 640,
    height: float = 320,
    prefs: Prefs | None = None,
    vmax_bytes: float | None = None,
    chart_id: str = "memory-chart",
) -> Chart:
    """`vmax_bytes` sets a shared axis when several plans are compared."""
    prefs = prefs or Prefs()
    unit, per = prefs.units, prefs.unit_bytes
    mem = plan.estimate.memory
    stages = mem.stages
    left, right, top, bottom = 52.0, width - 150, 26.0, height - 34
    vmax = (vmax_bytes or max(mem.capacity_bytes, mem.peak_bytes)) / per * 1.08
    chart = Chart(
        chart_id,
        "Memory per GPU by pipeline stage",
        f"Stacked memory of one GPU of each of {len(stages)} pipeline stages against "
        f"{mem.capacity_bytes / per:.1f} {unit} capacity; peak {mem.peak_bytes / per:.1f} {unit} on stage "
        f"{mem.peak_stage}.",
        width,
        height,
    )
    _y_axis(chart, top, bottom, left, right, vmax, f"memory per GPU ({unit})")
    slot = (right - left) / len(stages)
    bar = min(56.0, slot * 0.7)
    label_every = max(1, math.ceil(len(stages) / 16))
    for s in stages:
        x = left + slot * s.stage + (slot - bar) / 2
        y = bottom
        for attr, name, colour in MEMORY_PARTS:
            h = (bottom - top) * getattr(s, attr) / per / vmax
            y -= h
            if h > 0:
                title = f"stage {s.stage} {name}: {getattr(s, attr) / per:.2f} {unit}"
                chart.rects.append(Rect(x, y, bar, h, colour, title))
        peak = s.stage == mem.peak_stage
        chart.rects.append(
            Rect(
                x,
                y,
                bar,
                bottom - y,
                "none",
                f"stage {s.stage}: {s.total_bytes / per:.2f} {unit}, {s.layers} layers",
                "peak" if peak else "outline",
                "#222222" if peak else "",
            )
        )
        if bar >= 22 or peak:
            cls = "value strong" if peak else "value"
            chart.labels.append(Label(x + bar / 2, y - 4, f"{s.total_bytes / per:.1f}", "middle", cls))
        if s.stage % label_every == 0:
            chart.labels.append(Label(x + bar / 2, bottom + 14, str(s.stage), "middle", "tick"))
    chart.labels.append(Label((left + right) / 2, bottom + 28, "pipeline stage", "middle", "tick"))
    ys = []
    for value, text, cls in ((mem.capacity_bytes, "capacity", "capacity"), (mem.usable_bytes, "usable", "usable")):
        y = bottom - (bottom - top) * value / per / vmax
        chart.lines.append(Line(left, y, right, y, cls))
        ys.append((y, f"{text} {value / per:.1f} {unit}", cls))
    _capacity_labels(chart, right, ys)
    chart.lines.append(Line(left, bottom, right, bottom, "axis"))
    chart.legend.extend((colour, name) for _attr, name, colour in MEMORY_PARTS)
    return chart


def _x_axis(chart: Chart, left: float, right: float, y: float, vmax: float, unit: str) -> None:
    """Ticks along the bottom from 0 to vmax, with the unit."""
    step = nice_step(vmax)
    v = 0.0
    while v <= vmax + 1e-12:
        x = left + (right - left) * v / vmax
        chart.lines.append(Line(x, y, x, y + 4, "axis"))
        chart.labels.append(Label(x, y + 15, f"{v:g}", "middle", "tick"))
        v += step
    chart.labels.append(Label(right, y + 30, unit, "end", "tick"))


def step_chart(
    plans: list[Plan], selected: int, width: float = 640, labels: list[str] | None = None, chart_id: str = "step-chart"
) -> Chart:
    """`labels` name the rows (default "#rank")."""
    row, left, right, top = 24.0, 44.0, width - 70, 8.0
    height = top + row * len(plans) + 44
    vmax = max(p.estimate.time.step_s for p in plans) or 1.0
    desc = (
        f"Seconds per optimizer step of the {len(plans)} ranked plans, split into compute, recomputation, "
        "exposed communication, bubble and optimizer."
    )
    chart = Chart(chart_id, "Step time by cause", desc, width, height)
    used: dict[str, tuple[str, str]] = {}
    for i, p in enumerate(plans):
        y, x = top + i * row, left
        name = labels[i] if labels else f"#{p.rank}"
        for key, seconds in p.estimate.time.breakdown.items():
            if seconds <= 0:
                continue
            part, colour = STEP_PARTS.get(key, (key.removesuffix("_s").replace("_", " "), "#666666"))
            used[key] = (colour, part)
            w = (right - left) * seconds / vmax
            chart.rects.append(
                Rect(
                    x,
                    y + 3,
                    w,
                    row - 6,
                    colour,
                    f"{name} {part}: {seconds:.3f} s ({100 * seconds / p.estimate.time.step_s:.1f}%)",
                )
            )
            x += w
        strong = " strong" if p.rank == selected else ""
        chart.labels.append(Label(left - 6, y + row / 2 + 4, name, "end", "tick" + strong))
        chart.labels.append(Label(x + 4, y + row / 2 + 4, f"{p.estimate.time.step_s:.2f} s", "start", "value" + strong))
        chart.rects.append(
            Rect(
                left,
                y + 3,
                x - left,
                row - 6,
                "none",
                f"{name} {describe(p.parallel)}",
                "peak" if p.rank == selected else "outline",
                "#222222" if p.rank == selected else "",
            )
        )
    chart.lines.append(Line(left, top, left, top + row * len(plans), "axis"))
    chart.lines.append(Line(left, top + row * len(plans), right, top + row * len(plans), "axis"))
    _x_axis(chart, left, right, top + row * len(plans), vmax, "seconds per step")
    chart.legend.extend(used[k] for k in STEP_PARTS if k in used)
    chart.legend.extend(v for k, v in used.items() if k not in STEP_PARTS)
    return chart
