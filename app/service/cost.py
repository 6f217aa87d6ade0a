"""Time to train and cost of one plan: tokens over its tokens/s, times its GPUs and a price per GPU-hour; the 80 %
interval comes from the tokens/s interval, and the wall clock adds checkpoints, failures and restarts through the
plan's goodput (app/planner/goodput.py). The result page's cost panel and the deadline search both use it."""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.results import Plan

DAY_S = 86_400.0


@dataclass(frozen=True)
class PlanCost:
    rank: int
    gpus: int
    days: float  # compute time at the predicted tokens/s
    days_low: float | None  # 80 % interval of it (from tokens/s)
    days_high: float | None
    wall_days: float | None  # with checkpoints and failures (goodput)
    goodput: float | None
    gpu_hours: float
    cost: float | None  # gpu_hours x price
    cost_low: float | None
    cost_high: float | None


def plan_cost(plan: Plan, tokens: float, price: float | None) -> PlanCost:
    """Time and cost of `tokens` on `plan`. A missing interval or goodput is None; a value that rounds to 0.0 (a
    few tokens) is still a value: `if low` left the interval and wall-clock cells blank (QA 2026-12-07)."""
    t = plan.estimate.time
    gpus = plan.layout.world_size
    seconds = tokens / t.tokens_per_s
    iv = t.tokens_per_s_interval
    low, high = (tokens / iv.high, tokens / iv.low) if iv is not None else (None, None)
    goodput = plan.checkpoint.goodput if plan.checkpoint is not None and plan.checkpoint.goodput > 0 else None
    wall = seconds / goodput if goodput is not None else None
    hours = (seconds if wall is None else wall) * gpus / 3600
    cost = hours * price if price is not None else None

    def scaled(s: float | None) -> float | None:
        if s is None or price is None:
            return None
        return (s if goodput is None else s / goodput) * gpus / 3600 * price

    def days(s: float | None) -> float | None:
        return None if s is None else s / DAY_S

    return PlanCost(
        plan.rank,
        gpus,
        seconds / DAY_S,
        days(low),
        days(high),
        days(wall),
        goodput,
        hours,
        cost,
        scaled(low),
        scaled(high),
    )
