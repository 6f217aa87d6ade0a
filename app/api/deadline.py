"""POST /deadline: the cheapest plan that trains `train_tokens` within a deadline, over the GPU types and node
counts allowed (app/service/deadline.py). Nothing is stored; each option carries the request that plans it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from app.api.openapi import AUTH_ERRORS
from app.api.routing import StrictJSONRoute
from app.api.schemas import ErrorBody
from app.service.deadline import DeadlineBody, DeadlineResult, cheapest
from app.service.deps import AccountDep, CacheDep, SentJson, WorkDep

router = APIRouter(tags=["plans"], route_class=StrictJSONRoute)
EXAMPLE: dict[str, Any] = {
    "model": "llama-2-70b",
    "training": {"global_batch_size": 512, "train_tokens": 2e12},
    "deadline_days": 30,
    "gpus": [{"gpu": "H100-SXM", "price_per_gpu_hour": 2.5}, {"gpu": "A100-80GB", "price_per_gpu_hour": 1.3}],
    "nodes_min": 16,
    "nodes_max": 128,
}


@router.post(
    "/deadline",
    response_model=DeadlineResult,
    summary="The cheapest plan within a deadline",
    responses={
        422: {"model": ErrorBody},
        413: {"model": ErrorBody},
        415: {"model": ErrorBody},
        503: {"model": ErrorBody},
        **AUTH_ERRORS,
    },
)
def post_deadline(
    body: Annotated[
        DeadlineBody, Body(openapi_examples={"70b": {"summary": "Llama-2 70B, 2T tokens", "value": EXAMPLE}})
    ],
    sent: SentJson,
    work: WorkDep,
    cache: CacheDep,
    who: AccountDep,
) -> DeadlineResult:
    """Plans every allowed (GPU type, node count) with objective throughput, prices each plan's time to train
    (`training.train_tokens` / tokens per second, on the wall clock through its checkpoint goodput) at the GPU's
    price per GPU-hour, and returns the cheapest that meets `deadline_days`, with every other plan ranked by cost
    (`meets_deadline` false for those too slow). The search is bounded by `time_budget_s` (capped by the
    service); candidates it did not reach are listed in `not_tried`. Any account may search (read-only included:
    nothing is stored), never an anonymous client."""
    return cheapest(body, sent, work, cache)
