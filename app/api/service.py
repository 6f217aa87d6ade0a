"""What the REST API and the web form both call: parse a request, search (time-capped), render, store.

The search itself is `app.planner.plan`, the function the CLI calls; this module only adds what a shared
service needs around it: the time cap, a result cache keyed by the full request and the planner version,
the rank-1 artifacts rendered at creation, and storage.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.api.artifacts import render_files
from app.planner import EstimateRequest, PlanRequest, __version__, estimate, plan
from app.planner.errors import FieldError, field_errors
from app.planner.results import Estimate, PlanResult
from app.render import RenderOptions
from app.settings import Settings
from app.store import PlanRecord, PlanStore

_FIELD_PREFIX = re.compile(r"^((?:model|cluster|training|parallel)(?:\.[a-z_]+)+)\b")


class InputError(Exception):
    """The request is malformed or out of range; `errors` name each field and say why (-> 4xx)."""

    def __init__(self, errors: list[FieldError], status_code: int = 422) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors
        self.status_code = status_code


class NotFound(Exception):
    def __init__(self, what: str, field: str = "") -> None:
        super().__init__(what)
        self.error = FieldError(field, what)


def value_errors(exc: ValueError) -> list[FieldError]:
    """A planner ValueError raised after validation; its message starts with the field when it names one."""
    message = str(exc)
    match = _FIELD_PREFIX.match(message)
    return [FieldError(match.group(1) if match else "", message)]


def parse_render_options(data: Mapping[str, Any]) -> RenderOptions | None:
    """The request's optional "render" object: how the files are written (job name, paths, launch settings)."""
    options = data.get("render")
    if options is None:
        return None
    try:
        return RenderOptions.model_validate(options)
    except ValidationError as exc:
        raise InputError(field_errors(exc, prefix="render")) from None


def parse_plan_request(data: Mapping[str, Any]) -> tuple[PlanRequest, RenderOptions | None]:
    """A plan request (model, cluster, training) and its render options; every bad field at once."""
    errors: list[FieldError] = []
    options = None
    try:
        options = parse_render_options(data)
    except InputError as exc:
        errors += exc.errors
    try:
        request = PlanRequest.model_validate({k: v for k, v in data.items() if k != "render"})
    except ValidationError as exc:
        raise InputError(field_errors(exc) + errors) from None
    if errors:
        raise InputError(errors)
    return request, options


def parse_estimate_request(data: Mapping[str, Any]) -> EstimateRequest:
    try:
        return EstimateRequest.model_validate(dict(data))
    except ValidationError as exc:
        raise InputError(field_errors(exc)) from None


def cap_search_time(request: PlanRequest, raw: Mapping[str, Any], settings: Settings) -> tuple[PlanRequest, list[str]]:
    """Apply the service's search-time cap; say so when it overrides a limit the user asked for."""
    asked = request.training.search_time_limit_s
    if asked <= settings.max_search_time_s:
        return request, []
    training = request.training.model_copy(update={"search_time_limit_s": settings.max_search_time_s})
    raw_training = raw.get("training")
    explicit = isinstance(raw_training, Mapping) and "search_time_limit_s" in raw_training
    notices = [f"training.search_time_limit_s: {asked:g} s is above this service's cap; searched for at most "
               f"{settings.max_search_time_s:g} s"] if explicit else []
    return request.model_copy(update={"training": training}), notices


class PlanCache:
    """Search results by (planner version, full request JSON): a plain LRU; truncated searches are never kept,
    since what a time-capped search finds depends on the machine's speed at the time."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], PlanResult] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> PlanResult | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: tuple[str, str], result: PlanResult) -> None:
        if self.size == 0 or result.stats.truncated:
            return
        with self._lock:
            self._items[key] = result
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


@dataclass(frozen=True)
class SearchOutcome:
    result: PlanResult
    notices: list[str]
    cache_hit: bool


def search(request: PlanRequest, raw: Mapping[str, Any], settings: Settings, cache: PlanCache) -> SearchOutcome:
    """`app.planner.plan` under the service's time cap, through the cache."""
    request, notices = cap_search_time(request, raw, settings)
    key = (__version__, request.model_dump_json())
    cached = cache.get(key)
    if cached is not None:
        return SearchOutcome(cached, notices, cache_hit=True)
    try:
        result = plan(request)
    except ValueError as exc:
        raise InputError(value_errors(exc)) from None
    cache.put(key, result)
    if result.stats.truncated:
        notices.append(f"the search hit its time cap ({request.training.search_time_limit_s:g} s) after "
                       f"{result.stats.evaluated} of its candidates: these are the best plans found so far")
    return SearchOutcome(result, notices, cache_hit=False)


def create_plan(store: PlanStore, raw: Mapping[str, Any], settings: Settings,
                cache: PlanCache) -> tuple[PlanRecord, bool]:
    """Parse, search, render rank 1, store. Returns the stored record and whether the search was a cache hit."""
    request, options = parse_plan_request(raw)
    outcome = search(request, raw, settings, cache)
    notices = list(outcome.notices)
    files, renderer_version = {}, ""
    if outcome.result.plans:
        rendered = render_files(outcome.result, 1, options)
        files, renderer_version = rendered.files, rendered.renderer_version
        notices += rendered.notices
    record = store.add(dict(raw), outcome.result, notices, files, renderer_version)
    return record, outcome.cache_hit


def get_plan(store: PlanStore, plan_id: str) -> PlanRecord:
    record = store.get(plan_id)
    if record is None:
        raise NotFound(f"no stored plan with id {plan_id!r}", "id")
    return record


def check_rank(record: PlanRecord, rank: int) -> None:
    count = len(record.result.plans)
    if count == 0:
        raise NotFound(f"plan {record.id} has no feasible plans, so no artifacts", "rank")
    if not 1 <= rank <= count:
        raise NotFound(f"rank {rank} is out of range: plan {record.id} has ranks 1..{count}", "rank")


def plan_artifacts(store: PlanStore, record: PlanRecord, rank: int) -> dict[str, str]:
    """The frozen files of a rank: rank 1 was rendered at creation; others on first request, then kept."""
    check_rank(record, rank)
    files = store.artifacts(record.id, rank)
    if files is not None:
        return files
    rendered = render_files(record.result, rank, parse_render_options(record.request))
    return store.put_artifacts(record.id, rank, rendered.files, rendered.renderer_version)


def run_estimate(data: Mapping[str, Any]) -> Estimate:
    request = parse_estimate_request(data)
    try:
        return estimate(request)
    except ValueError as exc:
        raise InputError(value_errors(exc)) from None
