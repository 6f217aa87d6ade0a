"""The result page's time-to-train and cost panel: tokens to train (training.train_tokens, or typed on the page)
and a price per GPU-hour, as typed and checked, and one row per ranked plan (app/service/cost.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from app.planner.errors import FieldError
from app.planner.results import PlanResult
from app.planner.specs import train_tokens_problem
from app.service.cost import DAY_S, PlanCost, plan_cost
from app.web.fields import ungrouped

MAX_TOKENS = 1e17  # TrainingSpec.train_tokens' bound
MAX_PRICE = 1e6
__all__ = ["DAY_S", "PlanCost", "cost_context", "plan_cost"]


def _number(query: Mapping[str, str], name: str, upper: float, errors: list[FieldError]) -> float | None:
    raw = query.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(ungrouped(raw).replace("_", ""))
    except ValueError:
        errors.append(FieldError(name, f"{raw!r} is not a number"))
        return None
    if not math.isfinite(value) or value <= 0 or value > upper:
        errors.append(FieldError(name, f"{raw} must be greater than 0 and at most {upper:g}"))
        return None
    return value


def exact_text(value: float | None) -> str:
    """A number for an input that gives it back unchanged: "1e+12", but 123456789 whole (":g" keeps six digits, so
    the panel's input said 1.23457e+08 for a request's 123,456,789 tokens, and "Show time and cost" used that)."""
    if value is None:
        return ""
    short = f"{value:g}"
    if float(short) == value:
        return short
    return f"{value:.0f}" if float(value).is_integer() else repr(float(value))


def cost_context(result: PlanResult, query: Mapping[str, str]) -> dict[str, Any]:
    """The cost panel: its inputs as typed, their errors, and one row per ranked plan. Fewer tokens than one step are
    refused as POST /deadline refuses train_tokens (all rows read "0.0 s" at tokens=1, QA 2026-12-07); a refused
    token count shows no rows (they were the request's train_tokens', under the typed value)."""
    errors: list[FieldError] = []
    typed_tokens = _number(query, "tokens", MAX_TOKENS, errors)
    price = _number(query, "price", MAX_PRICE, errors)
    tokens = typed_tokens or result.training.train_tokens
    refused = any(e.field == "tokens" for e in errors)
    problem = None if refused else _below_one_step(result, tokens)
    if problem is not None:
        errors.append(FieldError("tokens", problem))
        refused = True
    rows = [plan_cost(p, tokens, price) for p in result.plans] if tokens and not refused else []
    return {
        "tokens_text": query.get("tokens", "") or (exact_text(result.training.train_tokens) if tokens else ""),
        "price_text": query.get("price", ""),
        "tokens": tokens,
        "price": price,
        "errors": {e.field: e.message for e in errors},
        "rows": rows,
        "gpu": result.cluster.gpu.name,
    }


def _below_one_step(result: PlanResult, tokens: float | None) -> str | None:
    """The planner's own words for a token count below one global batch (app/planner/specs: train_tokens)."""
    if tokens is None:
        return None
    return train_tokens_problem(result.model, result.training.model_copy(update={"train_tokens": tokens}))
