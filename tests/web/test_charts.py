"""Charts: the pipeline simulation against the textbook bubble, chart geometry against the numbers, goldens."""

from __future__ import annotations

import itertools
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.planner import EstimateRequest, estimate
from app.planner.layout import make_layout
from app.planner.pipeline import schedule_slots
from app.planner.results import Plan
from app.planner.specs import ParallelConfig
from app.settings import Settings
from app.web import charts
from app.web.pages import svg
from app.web.pipeline_chart import drawn_microbatches, pipeline_chart
from app.web.schedule import StageTiming, idle_fraction, simulate, stage_timing
from app.web.templates import WebTemplates
from tests.web.conftest import GiB, synthetic_plan

GOLDEN = Path(__file__).parent / "golden"
NS = {"s": "http://www.w3.org/2000/svg"}
TEMPLATES = WebTemplates(Settings().templates_dir)


def draw(chart: charts.Chart) -> ET.Element:
    return ET.fromstring(str(svg(TEMPLATES, chart)))  # well-formed XML, or this raises


def even(pp: int, vpp: int, f: float = 1.0, b: float = 2.0) -> list[StageTiming]:
    return [StageTiming(f, b, tuple([1 / vpp] * vpp), 1.0, 8) for _ in range(pp)]


@settings(max_examples=60, deadline=None)
@given(pp=st.integers(1, 8), vpp=st.integers(1, 4), k=st.integers(1, 6))
def test_schedule_matches_the_textbook_bubble(pp: int, vpp: int, k: int) -> None:
    m = k * pp if vpp > 1 else k + pp  # interleaving needs m % pp == 0
    par = ParallelConfig(pp=pp, vpp=vpp)
    ops = simulate(par, m, even(pp, vpp))
    # Narayanan et al. 2021, eq. 2 (and its interleaved form): bubble = (p - 1) / (v * m + p - 1)
    assert idle_fraction(ops, pp) == pytest.approx((pp - 1) / (vpp * m + pp - 1))
    for s in range(pp):
        mine = sorted((op for op in ops if op.stage == s), key=lambda op: op.start)
        assert len(mine) == 2 * m * vpp
        assert all(a.end <= b.start + 1e-9 for a, b in itertools.pairwise(mine))  # one op at a time
        # the order is the planner's own schedule (app/planner/pipeline.py), op for op
        assert [(op.kind, op.microbatch, op.chunk) for op in mine] == schedule_slots(par, m)[s]
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
        simulate(ParallelConfig(pp=4, vpp=2), 6, even(4, 2))


def test_uneven_stages_take_their_own_time() -> None:
    """A stage with 1.5x the layers runs every pass 1.5x as long, and the step is paced by it (m x its time)."""
    par = ParallelConfig(pp=3)
    timing = [
        StageTiming(1.0, 2.0, (1.0,), 3, 8),
        StageTiming(1.5, 3.0, (1.0,), 2, 12),
        StageTiming(1.0, 2.0, (1.0,), 1, 8),
    ]
    ops = simulate(par, 12, timing)
    widths = {s: {round(op.end - op.start, 9) for op in ops if op.stage == s} for s in range(3)}
    assert widths == {0: {1.0, 2.0}, 1: {1.5, 3.0}, 2: {1.0, 2.0}}
    makespan = max(op.end for op in ops)
    assert makespan >= 12 * 4.5  # the slow stage is busy for all 12 micro-batches
    assert makespan < 12 * 4.5 + 2 * 3.0 + 1e-9  # plus at most the fill and drain of the other two


def test_a_real_uneven_layout_is_drawn_uneven() -> None:
    """Llama-2 7B split 'Et*9|t*12|t*11L' over PP3: the planner's stage times go into the chart."""
    request = EstimateRequest(
        model="llama-2-7b",
        cluster={"num_nodes": 1, "gpus_per_node": 3, "gpu": "H100-SXM"},
        training={"global_batch_size": 12},
        parallel={"pp": 3, "pipeline_layout": "Et*9|t*12|t*11L", "micro_batch_size": 1},
    )
    est = estimate(request)
    layout = make_layout(request.model, request.cluster, request.training, request.parallel)
    plan = Plan(rank=1, parallel=request.parallel, layout=layout, estimate=est, why=[])
    timing = stage_timing(request.model, request.cluster, request.training, plan)
    assert [t.layers for t in timing] == [9, 12, 11]
    assert timing[1].forward_s > timing[0].forward_s  # more layers, longer pass
    chart = pipeline_chart(plan, timing)
    draw(chart)
    assert "stages take their own time" in chart.desc
    assert [label.text for label in chart.labels if label.text.endswith("layers")] == [
        "9 layers",
        "12 layers",
        "11 layers",
    ]
    assert any(label.text == "seconds into the step" for label in chart.labels)


def test_a_deep_interleaved_pipeline_is_aggregated() -> None:
    """PP64 x VPP2 draws busy spans for passes too narrow to see: a few thousand elements, not tens of thousands."""
    plan = synthetic_plan(pp=64, vpp=2, microbatches=256)
    chart = pipeline_chart(plan, even(64, 2, 0.01, 0.02))
    text = str(svg(TEMPLATES, chart))
    draw(chart)
    assert text.count("<rect") < 4000 and len(text) < 600_000
    assert any(r.cls == "op busy" for r in chart.rects)
    assert "one stage in 2 drawn" in chart.desc


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
    # the axis title starts inside the chart (anchored at its end, 46 px from the edge, it was cut to "PU (GiB)")
    title = next(label for label in chart.labels if label.text == "memory per GPU (GiB)")
    assert title.anchor == "start" and 0 < title.x < 52


def test_pipeline_draws_every_op_when_few_microbatches() -> None:
    chart = pipeline_chart(synthetic_plan(pp=4, microbatches=8), even(4, 1))
    draw(chart)
    assert len([r for r in chart.rects if r.cls == "op"]) == 2 * 8 * 4
    assert not [r for r in chart.rects if r.cls == "cut"]
    assert len([r for r in chart.rects if r.cls == "bubble"]) == 4


def test_pipeline_cuts_a_long_steady_phase_and_says_so() -> None:
    plan = synthetic_plan(pp=4, vpp=2, microbatches=128)
    chart = pipeline_chart(plan, even(4, 2, 0.01, 0.02))
    draw(chart)
    drawn = drawn_microbatches(4, 2, 128)
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
    widths = {
        rank: sum(r.w for r in chart.rects if r.title.startswith(f"#{rank} ") and r.fill != "none") for rank in (1, 2)
    }
    assert widths[1] / widths[2] == pytest.approx(2.0 / 3.0)
    assert [r.title.split(" ")[0] for r in chart.rects if r.cls == "peak"] == ["#2"]
    assert [name for _c, name in chart.legend] == ["compute", "TP comm", "PP comm", "bubble", "DP comm", "optimizer"]


@pytest.mark.parametrize("name", ["memory", "pipeline", "steps"])
def test_golden_svg(name: str) -> None:
    plan = synthetic_plan(pp=4, vpp=2, microbatches=16)
    chart = {
        "memory": charts.memory_chart(plan),
        "pipeline": pipeline_chart(plan, even(4, 2, 0.01, 0.02)),
        "steps": charts.step_chart([plan, synthetic_plan(rank=2, step_s=2.5)], 1),
    }[name]
    text = str(svg(TEMPLATES, chart))
    path = GOLDEN / f"{name}.svg"
    if os.environ.get("TRAINPLAN_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{path} changed: TRAINPLAN_UPDATE_GOLDEN=1 rewrites it"


def test_chart_text_is_escaped() -> None:
    chart = charts.Chart(
        "x", "<script>alert(1)</script>", "a & b", 10, 10, labels=[charts.Label(0, 0, "</text><script>")]
    )
    text = str(svg(TEMPLATES, chart))
    assert "<script>" not in text and "&lt;script&gt;" in text
    draw(chart)


def test_combined_1f1b_draws_its_unpaired_passes_longer() -> None:
    """PP2 x VPP2 with EP overlap and 4 micro-batches: rank 0 runs its warm-up (2 + 2 + 1 = 5 chunk forwards) and its
    last 5 backwards alone, each longer by its share of the exposed all-to-all; the paired ones are not."""
    par = ParallelConfig(pp=2, vpp=2, ep=2, moe_ep_overlap=True)
    timing = [StageTiming(1.0, 2.0, (0.5, 0.5), 1.0, 8, (0.4, 0.6)) for _ in range(2)]
    ops = [op for op in simulate(par, 4, timing) if op.stage == 0]
    forwards = [round(op.end - op.start, 9) for op in ops if op.kind == "F"]
    backwards = [round(op.end - op.start, 9) for op in ops if op.kind == "B"]
    assert forwards == [0.7] * 5 + [0.5] * 3
    assert backwards == [1.0] * 3 + [1.3] * 5
    plain = simulate(par.model_copy(update={"moe_ep_overlap": False}), 4, timing)
    assert {round(op.end - op.start, 9) for op in plain} == {0.5, 1.0}


def test_after_the_cut_passes_carry_their_real_numbers_and_the_axis_its_real_seconds() -> None:
    """PP13 with 256 micro-batches draws 39 and cuts 217 out: right of the cut the passes were numbered 14…38 and
    the time axis, spaced for the whole step, had a single "0" tick (QA, 2026-12-06). The last backward is micro-batch
    255, every number drawn is one of the step's, and ticks are spread on both sides of the cut."""
    plan = synthetic_plan(pp=13, microbatches=256)
    chart = pipeline_chart(plan, even(13, 1, 0.01, 0.02))
    draw(chart)
    ops = [r for r in chart.rects if r.cls == "op"]
    numbers = [int(r.title.split("micro-batch ")[1].split(":")[0]) for r in ops]
    assert max(numbers) == 255 and min(numbers) == 0
    last = max((r for r in ops if "backward" in r.title), key=lambda r: r.x)
    assert "micro-batch 255" in last.title
    cut = next(r for r in chart.rects if r.cls == "cut")
    after = {n for r, n in zip(ops, numbers, strict=True) if r.x > cut.x + cut.w}
    assert after and min(after) > 38  # no number of the drawn schedule's own
    axis = next(line for line in chart.lines if line.cls == "axis")
    ticks = [label for label in chart.labels if label.cls == "tick" and label.y > axis.y1 and label.text[0].isdigit()]
    left = [t for t in ticks if t.x < cut.x]
    right = [t for t in ticks if t.x > cut.x + cut.w]
    assert len(left) >= 3 and len(right) >= 2, [t.text for t in ticks]
    assert float(right[0].text) > float(left[-1].text) + 217 * 0.03 * 0.9  # after the cut: the time cut out added
