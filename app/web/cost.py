"""Time to train and cost of each plan: tokens to train (training.train_tokens, or typed on the page) over the
plan's tokens/s, times its GPUs and a price per GPU-hour; the 80 % interval comes from the tokens/s interval, and
the wall-clock adds checkpoints, failures and restarts through the plan's goodput (app/planner/goodput.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.planner.errors import FieldError
from app.planner.results import Plan, PlanResult

DAY_S = 86_400.0
MAX_TOKENS = 1e17  # TrainingSpec.train_tokens' bound
MAX_PRICE = 1e6


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
    t = plan.estimate.time
    gpus = plan.layout.world_size
    seconds = tokens / t.tokens_per_s
    iv = t.tokens_per_s_interval
    low, high = (tokens / iv.high, tokens / iv.low) if iv is not None else (None, None)
    goodput = plan.checkpoint.goodput if plan.checkpoint is not None and plan.checkpoint.goodput > 0 else None
    wall = seconds / goodput if goodput else None
    hours = (wall or seconds) * gpus / 3600
    cost = hours * price if price is not None else None

    def scaled(s: float | None) -> float | None:
        if s is None or price is None:
            return None
        return s / goodput * gpus / 3600 * price if goodput else s * gpus / 3600 * price

    return PlanCost(
        plan.rank,
        gpus,
        seconds / DAY_S,
        low / DAY_S if low else None,
        high / DAY_S if high else None,
        wall / DAY_S if wall else None,
        goodput,
        hours,
        cost,
        scaled(low),
        scaled(high),
    )


def _number(query: Mapping[str, str], name: str, upper: float, errors: list[FieldError]) -> float | None:
    raw = query.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw.replace(",", "").replace("_", ""))
    except ValueError:
        errors.append(FieldError(name, f"{raw!r} is not a number"))
        return None
    if not math.isfinite(value) or value <= 0 or value > upper:
        errors.append(FieldError(name, f"{raw} must be greater than 0 and at most {upper:g}"))
        return None
    return value


def cost_context(result: PlanResult, query: Mapping[str, str]) -> dict[str, Any]:
    """The cost panel: its inputs as typed, their errors, and one row per ranked plan."""
    errors: list[FieldError] = []
    typed_tokens = _number(query, "tokens", MAX_TOKENS, errors)
    price = _number(query, "price", MAX_PRICE, errors)
    tokens = typed_tokens or result.training.train_tokens
    rows = [plan_cost(p, tokens, price) for p in result.plans] if tokens else []
    return {
        "tokens_text": query.get("tokens", "") or (f"{result.training.train_tokens:g}" if tokens else ""),
        "price_text": query.get("price", ""),
        "tokens": tokens,
        "price": price,
        "errors": {e.field: e.message for e in errors},
        "rows": rows,
        "gpu": result.cluster.gpu.name,
    }
