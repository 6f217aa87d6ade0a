"""Charts: the pipeline simulation against the textbook bubble, chart geometry against the numbers, goldens."""

from __future__ import annotations

import itertools
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.settings import Settings
from app.web import charts
from app.web.pages import svg
from app.web.schedule import idle_fraction, simulate
from app.web.templates import WebTemplates
from tests.web.conftest import GiB, synthetic_plan

GOLDEN = Path(__file__).parent / "golden"
NS = {"s": "http://www.w3.org/2000/svg"}
TEMPLATES = WebTemplates(Settings().templates_dir)


def draw(chart: charts.Chart) -> ET.Element:
    return ET.fromstring(str(svg(TEMPLATES, chart)))  # well-formed XML, or this raises


@settings(max_examples=60, deadline=None)
@given(pp=st.integers(1, 8), vpp=st.integers(1, 4), k=st.integers(1, 6))
def test_schedule_matches_the_textbook_bubble(pp: int, vpp: int, k: int) -> None:
    m = k * pp if vpp > 1 else k + pp  # interleaving needs m % pp == 0
    ops = simulate(pp, vpp, m, 1.0, 2.0)
    # Narayanan et al. 2021, eq. 2 (and its interleaved form): bubble = (p - 1) / (v * m + p - 1)
    assert idle_fraction(ops, pp) == pytest.approx((pp - 1) / (vpp * m + pp - 1))
    for s in range(pp):
        mine = sorted((op for op in ops if op.stage == s), key=lambda op: op.start)
        assert len(mine) == 2 * m * vpp
        assert all(a.end <= b.start + 1e-9 for a, b in itertools.pairwise(mine))  # one op at a time
    end = {(op.kind, op.chunk * pp + op.stage, op.microbatch): op.end for op in ops}
    for op in ops:
        v = op.chunk * pp + op.stage
        if op.kind == "F" and v > 0:
            assert op.start >= end[("F", v - 1, op.microbatch)] - 1e-9
        if op.kind == "B":
            dep = ("B", v + 1, op.microbatch) if v < pp * vpp - 1 else ("F", v, op.microbatch)
            assert op.start >= end[dep] - 1e-9


def test_interleaving_needs_whole_rounds() -> None:
    with pytest.raises(ValueError, match=r"num_microbatches\(6\) % pp\(4\)"):
        simulate(4, 2, 6)


def test_memory_bars_add_up_to_each_stage_against_capacity() -> None:
    plan = synthetic_plan(pp=4)
    chart = charts.memory_chart(plan)
    root = draw(chart)
    assert root.find("s:title", NS).text == "Memory per GPU by pipeline stage"  # type: ignore[union-attr]
    mem = plan.estimate.memory
    cap = next(line for line in chart.lines if line.cls == "capacity")
    usable = next(line for line in chart.lines if line.cls == "usable")
    zero = next(line for line in chart.lines if line.cls == "axis").y1
    per_gib = (zero - cap.y1) / (mem.capacity_bytes / GiB)
    assert (zero - usable.y1) / per_gib == pytest.approx(mem.usable_bytes / GiB)
    for s in mem.stages:
        segments = [r for r in chart.rects if r.title.startswith(f"stage {s.stage} ") and r.fill != "none"]
        assert [r.fill for r in segments] == [c for _a, _n, c in charts.MEMORY_PARTS]  # weights at the bottom
        assert sum(r.h for r in segments) / per_gib == pytest.approx(s.total_bytes / GiB)
        assert segments[0].y + segments[0].h == pytest.approx(zero)
    peaks = [r for r in chart.rects if r.cls == "peak"]
    assert len(peaks) == 1 and peaks[0].title.startswith(f"stage {mem.peak_stage}:")


def test_pipeline_draws_every_op_when_few_microbatches() -> None:
    chart = charts.pipeline_chart(synthetic_plan(pp=4, microbatches=8))
    draw(chart)
    assert len([r for r in chart.rects if r.cls == "op"]) == 2 * 8 * 4
    assert not [r for r in chart.rects if r.cls == "cut"]
    assert len([r for r in chart.rects if r.cls == "bubble"]) == 4


def test_pipeline_cuts_a_long_steady_phase_and_says_so() -> None:
    plan = synthetic_plan(pp=4, vpp=2, microbatches=128)
    chart = charts.pipeline_chart(plan)
    draw(chart)
    drawn = charts._drawn_microbatches(4, 2, 128)
    assert drawn % 4 == 0 and drawn < 128
    assert len([r for r in chart.rects if r.cls == "cut"]) == 1
    assert any(label.text == f"+{128 - drawn} micro-batches" for label in chart.labels)
    assert "128 micro-batches" in chart.desc and "10.0%" in chart.desc
    ops = {r.title for r in chart.rects if r.cls == "op"}
    assert len(ops) == 2 * drawn * 2 * 4  # titles name each op once, however the cut splits it


def test_step_bars_are_to_scale() -> None:
    plans = [synthetic_plan(rank=1, step_s=2.0), synthetic_plan(rank=2, step_s=3.0)]
    chart = charts.step_chart(plans, selected=2)
    draw(chart)
    widths = {rank: sum(r.w for r in chart.rects if r.title.startswith(f"#{rank} ") and r.fill != "none")
              for rank in (1, 2)}
    assert widths[1] / widths[2] == pytest.approx(2.0 / 3.0)
    assert [r.title.split(" ")[0] for r in chart.rects if r.cls == "peak"] == ["#2"]
    assert [name for _c, name in chart.legend] == ["compute", "TP comm", "PP comm", "bubble", "DP comm", "optimizer"]


@pytest.mark.parametrize("name", ["memory", "pipeline", "steps"])
def test_golden_svg(name: str) -> None:
    plan = synthetic_plan(pp=4, vpp=2, microbatches=16)
    chart = {"memory": charts.memory_chart(plan), "pipeline": charts.pipeline_chart(plan),
             "steps": charts.step_chart([plan, synthetic_plan(rank=2, step_s=2.5)], 1)}[name]
    text = str(svg(TEMPLATES, chart))
    path = GOLDEN / f"{name}.svg"
    if os.environ.get("TRAINPLAN_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{path} changed: TRAINPLAN_UPDATE_GOLDEN=1 rewrites it"


def test_chart_text_is_escaped() -> None:
    chart = charts.Chart("x", "<script>alert(1)</script>", "a & b", 10, 10,
                         labels=[charts.Label(0, 0, "</text><script>")])
    text = str(svg(TEMPLATES, chart))
    assert "<script>" not in text and "&lt;script&gt;" in text
    draw(chart)
