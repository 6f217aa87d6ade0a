"""What the REST API, the web form and the deadline search call: search (time-capped), render, store.

The search itself is `app.planner.plan`, the function the CLI calls; this module only adds what a shared
service needs around it: the time cap, planner processes that can be stopped (app/service/compute.py), a result
cache keyed by the full request and the planner version, the rank-1 artifacts rendered at creation, storage with
the plan's owner, and Idempotency-Keys. Requests arrive parsed (app/service/requests.py).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from app.planner import EstimateRequest, PlanRequest, __version__
from app.planner.errors import FieldError, field_errors
from app.planner.results import Estimate, PlanResult
from app.render import RenderOptions
from app.service.artifacts import render_files
from app.service.compute import ComputeError, PlannerPool, PlannerRefused
from app.service.errors import NotFound, Refused
from app.service.requests import Parsed
from app.settings import Settings
from app.store import IdempotencyKey, KeyReused, PlanRecord, PlanStore

__all__ = ["NotFound", "Refused"]


def cap_search_time(request: PlanRequest, settings: Settings) -> tuple[PlanRequest, list[str]]:
    """Apply the service's search-time cap; say so when it overrides a limit the user asked for."""
    asked = request.training.search_time_limit_s
    if asked <= settings.max_search_time_s:
        return request, []
    training = request.training.model_copy(update={"search_time_limit_s": settings.max_search_time_s})
    explicit = "search_time_limit_s" in request.training.model_fields_set
    notices = (
        [
            f"training.search_time_limit_s: {asked:g} s is above this service's cap; searched for at most "
            f"{settings.max_search_time_s:g} s"
        ]
        if explicit
        else []
    )
    return request.model_copy(update={"training": training}), notices


class PlanCache:
    """Search results by (planner version, full request JSON): a plain LRU; truncated searches are never kept,
    since what a time-capped search finds depends on the machine's speed at the time."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], Computed[PlanResult]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> Computed[PlanResult] | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: tuple[str, str], result: Computed[PlanResult]) -> None:
        if self.size == 0 or result.value.stats.truncated:
            return
        with self._lock:
            self._items[key] = result
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Computed(Generic[T]):
    """A planner result and its JSON as it came from the planner process (and was checked to read back)."""

    value: T
    json: str


@dataclass(frozen=True)
class Work:
    """How one request's planner work runs: in the pool, under the service's caps, until its client leaves."""

    pool: PlannerPool
    settings: Settings
    client_gone: Callable[[], bool]


_COMPUTE_STATUS = {"busy": 503, "gone": 499}


def compute(work: Work, kind: str, request: BaseModel, model: type[T], timeout_s: float, field: str) -> Computed[T]:
    """Run `kind` in a planner process; every way it can fail is a 4xx (or 503 when all are busy)."""
    try:
        text = work.pool.run(kind, request, timeout_s, work.client_gone)
    except PlannerRefused as exc:  # the planner's own input errors, each with its field
        raise Refused(exc.errors) from None
    except ComputeError as exc:
        status = _COMPUTE_STATUS.get(exc.kind, 422)
        # busy or gone is the service's state, not the input's: no field (a time or memory cap is the field's)
        at = "" if exc.kind in _COMPUTE_STATUS else field
        raise Refused([FieldError(at, str(exc))], status, retry_after_s=5 if status == 503 else None) from None
    try:
        return Computed(model.model_validate_json(text), text)
    except ValidationError as exc:  # e.g. a number that overflowed to infinity: refuse it rather than store it
        problem = field_errors(exc)[0]
        raise Refused(
            [
                FieldError(
                    "",
                    f"the planner's result does not read back ({problem}): some input "
                    "numbers are too large or too small for the model",
                )
            ]
        ) from None


@dataclass(frozen=True)
class SearchOutcome:
    result: PlanResult
    result_json: str
    notices: list[str]
    cache_hit: bool


def search(request: PlanRequest, work: Work, cache: PlanCache) -> SearchOutcome:
    """`app.planner.plan` under the service's time cap, through the cache."""
    request, notices = cap_search_time(request, work.settings)
    key = (__version__, request.model_dump_json())
    cached = cache.get(key)
    if cached is not None:
        return SearchOutcome(cached.value, cached.json, notices, cache_hit=True)
    limit = request.training.search_time_limit_s
    found = compute(work, "plan", request, PlanResult, timeout_s=2 * limit + 5, field="training.search_time_limit_s")
    cache.put(key, found)
    stats = found.value.stats
    if stats.truncated and found.value.plans:  # with none, the suggestions say what the cap left open
        notices.append(
            f"the search hit its time cap ({limit:g} s) after examining {stats.candidates:,} candidates: these "
            "are the best plans found so far"
        )
    return SearchOutcome(found.value, found.json, notices, cache_hit=False)


def request_digest(raw: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Created:
    record: PlanRecord
    cache_hit: bool
    replayed: bool  # an Idempotency-Key retry: the plan made the first time
    files: list[str]  # the names of the rank-1 files stored with it, sorted


def create_plan(
    store: PlanStore,
    sent: Mapping[str, Any],
    parse: Callable[[], Parsed],
    work: Work,
    cache: PlanCache,
    owner: str,
    idempotency_key: str | None = None,
) -> Created:
    """Search, render rank 1, store with its owner. With an Idempotency-Key that made a plan already (within the
    window), that plan, without searching again. `sent` is the JSON as it came (the key's digest); `parse` reads
    it (only when there is something to search)."""
    key = IdempotencyKey(owner, idempotency_key, request_digest(sent)) if idempotency_key is not None else None
    try:
        earlier = store.idempotent_plan(key) if key else None
    except KeyReused as exc:
        raise Refused([FieldError("Idempotency-Key", str(exc))]) from None
    if earlier is not None:
        return Created(earlier, cache_hit=False, replayed=True, files=store.artifact_names(earlier.id, 1))
    parsed = parse()
    outcome = search(parsed.request, work, cache)
    notices = parsed.notices + outcome.notices
    files, renderer_version = {}, ""
    if outcome.result.plans:
        rendered = render_files(outcome.result, 1, parsed.options)
        files, renderer_version = rendered.files, rendered.renderer_version
        notices += rendered.notices
    try:
        record, replayed = store.add(
            parsed.stored,
            outcome.result,
            notices,
            files,
            renderer_version,
            owner=owner,
            idempotency=key,
            result_json=outcome.result_json,
            cluster_name=parsed.cluster_name,
        )
    except KeyReused as exc:
        raise Refused([FieldError("Idempotency-Key", str(exc))]) from None
    # a concurrent twin with the same Idempotency-Key committed first: its files, not the ones rendered here
    names = store.artifact_names(record.id, 1) if replayed else sorted(files)
    return Created(record, outcome.cache_hit, replayed, names)


def stored_render_options(request: Mapping[str, Any]) -> RenderOptions | None:
    """The render options a stored request was made with (validated when it was stored)."""
    options = request.get("render")
    try:
        return RenderOptions.model_validate(options) if options is not None else None
    except ValidationError as exc:  # the renderer's options changed since: say which, not a 500
        raise Refused(field_errors(exc, prefix="render")) from None


def get_plan(store: PlanStore, plan_id: str) -> PlanRecord:
    record = store.get(plan_id)
    if record is None:
        raise NotFound(f"no stored plan with id {plan_id!r}", "id")
    return record


def check_rank(record: PlanRecord, rank: int, what: str = "artifacts") -> None:
    """404 unless the stored plan has a ranked plan `rank`; `what` names what was asked of it."""
    count = len(record.result.plans)
    if count == 0:
        raise NotFound(f"plan {record.id} has no feasible plans, so no {what}", "rank")
    if not 1 <= rank <= count:
        raise NotFound(f"rank {rank} is out of range: plan {record.id} has ranks 1..{count}", "rank")


def plan_artifacts(store: PlanStore, record: PlanRecord, rank: int) -> dict[str, str]:
    """The frozen files of a rank: rank 1 was rendered at creation; others on first request, then kept."""
    check_rank(record, rank)
    files = store.artifacts(record.id, rank)
    if files is not None:
        return files
    rendered = render_files(record.result, rank, stored_render_options(record.request))
    return store.put_artifacts(record.id, rank, rendered.files, rendered.renderer_version)


def why_unrendered(record: PlanRecord, rank: int) -> str:
    """Why a rank of a stored plan has no files (the renderer's refusal, e.g. a framework it does not write)."""
    notices = render_files(record.result, rank, stored_render_options(record.request)).notices
    return notices[0].split("no files rendered: ", 1)[-1] if notices else "nothing was rendered"


def run_estimate(request: EstimateRequest, work: Work) -> Estimate:
    return compute(work, "estimate", request, Estimate, work.settings.max_estimate_time_s, "parallel").value
