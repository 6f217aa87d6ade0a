"""Cheapest within a deadline: plan every (GPU type, node count) the user allows with `app.planner.plan` (objective
throughput, the node count pinned), price each plan's time to train (train_tokens / tokens_per_s, through its
checkpoint goodput for the wall clock) at that GPU's price per GPU-hour, and rank by cost; the cheapest plan that
meets the deadline wins, the others are ranked after it with the ones that miss it marked.

The whole search has a time budget (the request's, capped by TRAINPLAN_MAX_DEADLINE_TIME_S): candidates are
planned in the planner processes, several at once, in an order that spreads the node counts (the ends of the
range first, then halfway points), and what the budget did not reach is listed as not tried.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

from app.planner import PlanRequest
from app.planner.errors import FieldError
from app.planner.explain import describe
from app.planner.results import PlanResult
from app.planner.specs import ClusterSpec, ModelSpec, TrainingSpec, train_tokens_problem
from app.service.bodies import Body, GPUName, ModelInput
from app.service.bounds import model_size_errors
from app.service.cost import plan_cost
from app.service.errors import Refused
from app.service.planning import PlanCache, Work, search
from app.service.requests import model_spec

MAX_GPU_TYPES = 16
MAX_NODE_COUNTS = 64


class GPUOption(Body):
    gpu: GPUName
    price_per_gpu_hour: float = Field(gt=0, le=1e6, description="What one GPU-hour of this type costs (any currency).")


class DeadlineBody(Body):
    """POST /deadline: the model and training (with `train_tokens`), a deadline, the GPU types allowed with their
    prices, and the node counts allowed."""

    model: ModelInput
    training: TrainingSpec = Field(description="How to train; `train_tokens` is required (the work to price).")
    deadline_days: float = Field(gt=0, le=36_500, description="Training must finish within this many days.")
    gpus: list[GPUOption] = Field(
        max_length=MAX_GPU_TYPES, description="GPU types allowed (at least one).", json_schema_extra={"minItems": 1}
    )
    nodes_min: int = Field(1, ge=1, le=100_000, description="Fewest nodes to consider.")
    nodes_max: int = Field(ge=1, le=100_000, description="Most nodes to consider.")
    gpus_per_node: int | None = Field(
        None,
        ge=1,
        le=256,
        description="GPUs in each node (default: each GPU type's own, 8 or 4 on a GB200/GB300 tray).",
    )
    node_counts: int = Field(
        12,
        ge=1,
        le=MAX_NODE_COUNTS,
        description="Node counts to try per GPU type: every count of the range when it has no more, else this "
        "many spread over it geometrically (both ends included).",
    )
    wall_clock: StrictBool = Field(
        True, description="Judge the deadline on the wall clock (checkpoints, failures, restarts: the plan's goodput)."
    )
    time_budget_s: float = Field(20.0, gt=0, le=3600, description="Time for the whole search (capped by the service).")

    @field_validator("nodes_max")
    @classmethod
    def _range(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("nodes_min")
        if low is not None and value < low:
            raise ValueError(f"nodes_max({value}) < nodes_min({low})")
        return value

    @field_validator("gpus")
    @classmethod
    def _once_each(cls, value: list[GPUOption]) -> list[GPUOption]:
        if not value:  # the web page's prices all blank: said in its words, not "List should have at least 1 item"
            raise ValueError("give at least one GPU type with its price per GPU-hour")
        names = [g.gpu.lower() for g in value]  # the catalogue reads names in any case (QA 2026-12-07)
        twice = sorted({g.gpu for g in value if names.count(g.gpu.lower()) > 1})
        if twice:
            raise ValueError(f"each GPU type once: {', '.join(twice)} listed more than once")
        return value


class Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class DeadlineOption(Out):
    rank: int = Field(description="By cost, 1 = cheapest of those that fit (whether or not they meet the deadline).")
    gpu: str
    num_nodes: int
    num_gpus: int
    price_per_gpu_hour: float
    summary: str = Field(description="The plan in one line (TP4 PP4 DP4 ...).")
    tokens_per_s: float
    days: float = Field(description="Compute time: train_tokens / tokens_per_s, in days.")
    days_low: float | None = Field(description="80 % interval of `days` (from the tokens/s interval).")
    days_high: float | None
    wall_days: float | None = Field(description="With checkpoints, failures and restarts (the plan's goodput).")
    goodput: float | None
    gpu_hours: float
    cost: float = Field(description="gpu_hours x price_per_gpu_hour (gpu_hours on the wall clock when known).")
    cost_low: float | None
    cost_high: float | None
    meets_deadline: bool
    request: dict[str, Any] = Field(description="The plan request of this option, as POST /plans takes it.")


class NotPlanned(Out):
    gpu: str
    num_nodes: int
    reason: str = Field(description="Why there is no plan: nothing fits (and why), or the budget ran out.")


class DeadlineResult(Out):
    deadline_days: float
    train_tokens: float
    best: DeadlineOption | None = Field(description="The cheapest plan that meets the deadline (null: none does).")
    options: list[DeadlineOption] = Field(description="Every plan found, cheapest first.")
    nothing_fits: list[NotPlanned] = Field(description="Candidates on which no layout fits.")
    not_tried: list[NotPlanned] = Field(description="Candidates the time budget did not reach (or stopped).")
    node_counts: list[int] = Field(description="The node counts tried for each GPU type.")
    notes: list[str]
    seconds: float = Field(description="How long the search took.")
    time_budget_s: float


def node_counts(low: int, high: int, most: int) -> list[int]:
    """Every count from low to high when there are at most `most`, else `most` spread geometrically (ends kept)."""
    if high - low + 1 <= most:
        return list(range(low, high + 1))
    if most == 1:
        return [high]
    ratio = (high / low) ** (1 / (most - 1))
    counts = {low, high} | {min(high, max(low, round(low * ratio**i))) for i in range(most)}
    # small counts round onto each other (1, 1.5, 2.2 -> 1, 2, 2): the ones lost are made up from the counts not
    # yet taken, the smallest first, where the geometric spread is thinnest in nodes (it tried 11 of 12, 41 of 64)
    spare = (n for n in range(low, high + 1) if n not in counts)
    while len(counts) < most:
        counts.add(next(spare))
    return sorted(counts)


def spread_order(counts: list[int]) -> list[int]:
    """The ends first, then halfway points: a search the budget stops early has still seen the whole range."""
    order, seen = [], set()
    spans = [(0, len(counts) - 1)]
    for i in (0, len(counts) - 1):
        if i not in seen:
            seen.add(i)
            order.append(counts[i])
    while spans:
        nxt = []
        for lo, hi in spans:
            if hi - lo < 2:
                continue
            mid = (lo + hi) // 2
            if mid not in seen:
                seen.add(mid)
                order.append(counts[mid])
            nxt += [(lo, mid), (mid, hi)]
        spans = nxt
    return order


def _request(body: DeadlineBody, model: ModelSpec, option: GPUOption, nodes: int, limit_s: float) -> PlanRequest:
    pinned = body.training.pinned.model_copy(update={"num_nodes": nodes})
    training = body.training.model_copy(
        update={"objective": "throughput", "pinned": pinned, "max_plans": 1, "search_time_limit_s": limit_s}
    )
    cluster = ClusterSpec(num_nodes=nodes, gpu=option.gpu, **_node(body))
    return PlanRequest(model=model, cluster=cluster, training=training)


def _node(body: DeadlineBody) -> dict[str, int]:
    """The node size the caller gave, else nothing: each GPU's own (a GB200 tray holds 4)."""
    return {} if body.gpus_per_node is None else {"gpus_per_node": body.gpus_per_node}


def _option(
    body: DeadlineBody, sent_model: Any, option: GPUOption, nodes: int, result: PlanResult
) -> DeadlineOption | None:
    plan = result.best
    tokens = body.training.train_tokens
    if plan is None or tokens is None:
        return None
    c = plan_cost(plan, tokens, option.price_per_gpu_hour)
    judged = c.wall_days if body.wall_clock and c.wall_days is not None else c.days
    training = body.training.model_dump(mode="json", exclude_unset=True)
    training["pinned"] = {**training.get("pinned", {}), "num_nodes": nodes}
    # the option was planned for throughput on exactly these nodes (`_request`): its request says so, so that POST
    # /plans of it gives the plan priced here (it kept the caller's objective: headroom gave another layout)
    training["objective"] = "throughput"
    request = {
        "model": sent_model,
        # the node size only where the caller gave one: else the GPU's own, which a what-if to another GPU follows
        "cluster": {"num_nodes": nodes, "gpu": option.gpu, **_node(body)},
        "training": training,
    }
    return DeadlineOption(
        rank=0,
        gpu=option.gpu,
        num_nodes=nodes,
        num_gpus=c.gpus,
        price_per_gpu_hour=option.price_per_gpu_hour,
        summary=describe(plan.parallel),
        tokens_per_s=plan.estimate.time.tokens_per_s,
        days=c.days,
        days_low=c.days_low,
        days_high=c.days_high,
        wall_days=c.wall_days,
        goodput=c.goodput,
        gpu_hours=c.gpu_hours,
        cost=c.cost or 0.0,
        cost_low=c.cost_low,
        cost_high=c.cost_high,
        meets_deadline=judged <= body.deadline_days,
        request=request,
    )


def _why_nothing(result: PlanResult) -> str:
    if result.suggestions:
        return result.suggestions[0]
    if result.rejected:
        top = max(result.rejected, key=lambda g: g.count)
        return f"{top.count} candidates rejected: {top.message}"
    return "no layout fits"


def cheapest(body: DeadlineBody, sent: Mapping[str, Any], work: Work, cache: PlanCache) -> DeadlineResult:
    """Plan each allowed (GPU, node count) within the time budget; rank by cost; the cheapest meeting the deadline."""
    started = time.monotonic()
    if body.training.train_tokens is None:
        raise Refused([FieldError("training.train_tokens", "give the tokens to train on: the deadline needs the work")])
    if body.training.pinned.num_nodes is not None:  # it was replaced per candidate without a word
        raise Refused([FieldError(
            "training.pinned.num_nodes",
            f"the deadline search plans each node count from nodes_min to nodes_max itself; give the range there "
            f"(pinned {body.training.pinned.num_nodes})",
        )])  # fmt: skip
    model = model_spec(body.model)
    errors = model_size_errors(model)
    too_few = train_tokens_problem(model, body.training)
    if too_few:
        errors.append(FieldError("training.train_tokens", too_few))
    if errors:
        raise Refused(errors)
    budget = min(body.time_budget_s, work.settings.max_deadline_time_s)
    counts = node_counts(body.nodes_min, body.nodes_max, body.node_counts)
    order = spread_order(counts)
    candidates = [(option, n) for n in order for option in body.gpus]
    notes = _notes(body, counts, budget)
    found: list[DeadlineOption] = []
    nothing: list[NotPlanned] = []
    not_tried: list[NotPlanned] = []
    deadline = started + budget
    sent_model = sent.get("model", model.model_dump(mode="json"))

    def run(option: GPUOption, nodes: int) -> PlanResult:
        left = deadline - time.monotonic()
        if left <= 0.05:
            raise TimeoutError
        limit = max(0.05, min(body.training.search_time_limit_s, work.settings.max_search_time_s, left))
        return search(_request(body, model, option, nodes, limit), work, cache).result

    workers = max(1, min(work.pool.size, 8))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="deadline") as pool:
        futures: dict[Future[PlanResult], tuple[GPUOption, int]] = {
            pool.submit(run, option, n): (option, n) for option, n in candidates
        }
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                option, n = futures[future]
                try:
                    result = future.result()
                except TimeoutError:
                    not_tried.append(NotPlanned(gpu=option.gpu, num_nodes=n, reason="the time budget ran out first"))
                    continue
                except Refused as exc:
                    if exc.status_code in (499, 503):  # the client left, or no planner process: stop everything
                        for f in pending:
                            f.cancel()
                        raise
                    reason = "; ".join(str(e) for e in exc.errors)
                    stopped = any(e.field == "training.search_time_limit_s" for e in exc.errors)
                    if stopped:  # what the page (and this request) can change is the whole search's time budget
                        reason = "its search ran out of the time left: a larger time_budget_s reaches it"
                    (not_tried if stopped else nothing).append(NotPlanned(gpu=option.gpu, num_nodes=n, reason=reason))
                    continue
                made = _option(body, sent_model, option, n, result)
                if made is None:
                    nothing.append(NotPlanned(gpu=option.gpu, num_nodes=n, reason=_why_nothing(result)))
                else:
                    found.append(made)
    ranked = [o.model_copy(update={"rank": i}) for i, o in enumerate(sorted(found, key=_cost_key), start=1)]
    best = next((o for o in ranked if o.meets_deadline), None)
    if best is None and ranked:
        fastest = min(ranked, key=lambda o: _judged(body, o))
        notes.append(
            f"no plan meets {body.deadline_days:g} days: the fastest found takes {_judged(body, fastest):.1f} days "
            f"({fastest.num_nodes} nodes of {fastest.gpu}); allow more nodes, other GPUs, or a later deadline"
        )
    key = lambda p: (p.gpu, p.num_nodes)  # noqa: E731
    return DeadlineResult(
        deadline_days=body.deadline_days,
        train_tokens=body.training.train_tokens,
        best=best,
        options=ranked,
        nothing_fits=sorted(nothing, key=key),
        not_tried=sorted(not_tried, key=key),
        node_counts=counts,
        notes=notes,
        seconds=time.monotonic() - started,
        time_budget_s=budget,
    )


def _cost_key(option: DeadlineOption) -> tuple[float, float]:
    return (option.cost, option.days)


def _judged(body: DeadlineBody, option: DeadlineOption) -> float:
    return option.wall_days if body.wall_clock and option.wall_days is not None else option.days


def _notes(body: DeadlineBody, counts: list[int], budget: float) -> list[str]:
    notes = [
        "each candidate planned with objective throughput on exactly its node count "
        "(training.pinned.num_nodes), "
        + (f"{body.gpus_per_node} GPUs per node" if body.gpus_per_node else "each GPU type's own GPUs per node"),
        "deadline judged on the wall clock (the plan's checkpoint goodput)"
        if body.wall_clock
        else "deadline judged on compute time alone (train_tokens / tokens_per_s)",
    ]
    span = body.nodes_max - body.nodes_min + 1
    if len(counts) < span:
        notes.append(
            f"{len(counts)} of the {span} node counts from {body.nodes_min} to {body.nodes_max} tried "
            f"(spread geometrically): {', '.join(map(str, counts))}"
        )
    if budget < body.time_budget_s:
        notes.append(f"time budget capped at this service's {budget:g} s (asked {body.time_budget_s:g} s)")
    return notes
