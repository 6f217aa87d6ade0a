"""Time and cost of a plan (app/service/cost.py): a value that rounds to 0.0 is a value, not a missing one (QA
2026-12-07: at 5e-324 tokens `if low` and `if wall` left the interval and wall-clock cells blank)."""

from __future__ import annotations

import pytest

from app.planner.results import CheckpointPlan, Interval
from app.service.cost import plan_cost
from tests.web.conftest import synthetic_plan


def _plan_with_interval_and_goodput() -> object:
    plan = synthetic_plan(pp=4)
    time = plan.estimate.time.model_copy(update={"tokens_per_s_interval": Interval(low=8e4, high=1.2e5, basis="x")})
    checkpoint = CheckpointPlan(size_bytes=1, save_s=1.0, load_s=1.0, restart_s=1.0, mtbf_s=1e5, mtbf_source="x",
                                interval_steps=10, interval_s=20.0, goodput=0.9)  # fmt: skip
    estimate = plan.estimate.model_copy(update={"time": time})
    return plan.model_copy(update={"estimate": estimate, "checkpoint": checkpoint})


def test_a_cost_of_almost_nothing_keeps_its_interval_and_wall_clock() -> None:
    cost = plan_cost(_plan_with_interval_and_goodput(), 5e-324, 2.0)  # type: ignore[arg-type]
    assert cost.days_low == 0.0 and cost.days_high == 0.0 and cost.wall_days == 0.0
    assert cost.cost_low == 0.0 and cost.cost_high == 0.0


def test_the_interval_and_wall_clock_of_a_day() -> None:
    cost = plan_cost(_plan_with_interval_and_goodput(), 8.64e9, 2.0)  # type: ignore[arg-type]
    assert cost.days == pytest.approx(1.0) and cost.days_low == pytest.approx(1e5 / 1.2e5)
    assert cost.wall_days == pytest.approx(1 / 0.9) and cost.gpu_hours == pytest.approx(16 * 24 / 0.9)
    assert cost.cost == pytest.approx(2.0 * 16 * 24 / 0.9) and cost.cost_high == pytest.approx(
        2.0 * 16 * 24 / 0.9 / 0.8
    )
