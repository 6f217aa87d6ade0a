"""/cheapest: the cheapest plan within a deadline, as a form (the same search as POST /deadline). Bad input comes
back beside its field with every value kept; "Plan this" stores one option as a plan (POST /cheapest/plan)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from app.planner import __version__, catalog
from app.planner.errors import FieldError
from app.service.auth import CSRF_FIELD, LoginRequired, Principal
from app.service.deadline import DeadlineBody, DeadlineResult, cheapest
from app.service.deps import CacheDep, ClusterLookupDep, PageViewerDep, SettingsDep, StoreDep, WorkDep
from app.service.errors import Refused, validation_errors
from app.service.jsonbody import BodyError, parse_json
from app.service.planning import create_plan
from app.service.requests import parse_plan_request
from app.web.deps import FormDep, TemplatesDep
from app.web.fields import typed_number
from app.web.respond import HTML, PrefsDep, filled_url, html, require_csrf

router = APIRouter(include_in_schema=False)
# the form's number boxes and what each reads as (the body refuses numbers sent as text)
NUMBERS: dict[str, type] = {
    "deadline_days": float,
    "nodes_min": int,
    "nodes_max": int,
    "gpus_per_node": int,
    "node_counts": int,
    "time_budget_s": float,
}
TRAINING: dict[str, type | None] = {
    "global_batch_size": int,
    "train_tokens": float,
    "precision": None,
    "framework": None,
}
DEFAULTS = {
    "model": "llama-2-7b",
    "seq_length": "",
    "training.global_batch_size": "512",
    "training.train_tokens": "1e12",
    "training.precision": "bf16",
    "training.framework": "megatron",
    "deadline_days": "30",
    "nodes_min": "1",
    "nodes_max": "32",
    "gpus_per_node": "",
    "node_counts": "8",
    "time_budget_s": "10",
    "wall_clock": "true",
    "price.H100-SXM": "2.5",
    "price.A100-80GB": "1.3",
}


def gpu_names() -> list[str]:
    return [g.name for g in catalog.gpus()]


def form_names() -> set[str]:
    """The form's own fields: what its URL may carry back."""
    return set(DEFAULTS) | {"wall_clock"} | {f"price.{name}" for name in gpu_names()}


def draft_url(values: Mapping[str, str]) -> str:
    """/cheapest filled with `values` (those that differ from the empty form's; an unticked box as empty): where the
    units and theme switches come back to. They went to the empty form, and what was typed (and the search's
    options) was lost (QA 2026-12-07)."""
    return filled_url(
        "/cheapest", {k: v for k in sorted(form_names()) if (v := values.get(k, "")) != DEFAULTS.get(k, "")}
    )


def to_body(values: Mapping[str, str]) -> dict[str, Any]:
    """The JSON POST /deadline takes for these form values: numbers as numbers, text that is none as typed (the body
    names the field)."""
    seq = values.get("seq_length", "").strip()
    model: Any = values.get("model", "")
    if seq:
        model = {"preset": model, "seq_length": typed_number(seq, int)}
    training = {
        k: v if kind is None else typed_number(v, kind)
        for k, kind in TRAINING.items()
        if (v := values.get(f"training.{k}", "").strip())
    }
    body: dict[str, Any] = {"model": model, "training": training, "wall_clock": values.get("wall_clock") == "true"}
    body.update({k: typed_number(v, kind) for k, kind in NUMBERS.items() if (v := values.get(k, "").strip())})
    prices = [(name, values.get(f"price.{name}", "").strip()) for name in gpu_names()]
    body["gpus"] = [{"gpu": name, "price_per_gpu_hour": typed_number(price, float)} for name, price in prices if price]
    return body


def field_of(error: FieldError, body: Mapping[str, Any]) -> str:
    """The form field an error of the body belongs to: gpus.N.* is the price box of the N-th GPU given."""
    parts = error.field.split(".")
    if parts[0] == "gpus" and len(parts) > 1 and parts[1].isdigit():
        return f"price.{body['gpus'][int(parts[1])]['gpu']}"
    if parts[0] == "model":
        return "seq_length" if error.field == "model.seq_length" else "model"
    return error.field


def _page(
    request: Request,
    templates: Any,
    viewer: Principal,
    prefs: Any,
    values: Mapping[str, str],
    errors: list[FieldError],
    result: DeadlineResult | None = None,
    status_code: int = 200,
    body: Mapping[str, Any] | None = None,
) -> Response:
    by_field: dict[str, str] = {}
    general = []
    for e in errors:
        name = field_of(e, body or {}) if e.field else ""
        if name in values or name.startswith("price.") or name in ("model", "seq_length", "gpus"):
            by_field.setdefault(name, e.message)
        else:
            general.append(str(e))
    page = templates.render(
        "deadline.html",
        values=dict(values),
        errors=by_field,
        general_errors=general,
        result=result,
        gpus=gpu_names(),
        presets=[row["name"] for row in catalog.model_presets()],
        viewer=viewer,
        prefs=prefs,
        planner_version=__version__,
        csrf_token=viewer.csrf_token if viewer.via == "session" else "",
        self_url=draft_url(values),
    )
    return html(request, page, status_code)


@router.get("/cheapest", response_class=HTML)
def deadline_form(request: Request, templates: TemplatesDep, viewer: PageViewerDep, prefs: PrefsDep) -> Response:
    """The empty form, or filled with the form's own fields given in the query (its preference links); nothing is
    searched."""
    names = form_names()
    values = {**DEFAULTS, **{k: v for k, v in request.query_params.items() if k in names}}
    return _page(request, templates, viewer, prefs, values, [])


@router.post("/cheapest", response_class=HTML)
def deadline_search(
    request: Request,
    form: FormDep,
    work: WorkDep,
    cache: CacheDep,
    settings: SettingsDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
) -> Response:
    """Plan every allowed (GPU, node count) and show the cheapest within the deadline; nothing is stored. Any
    account may search; an anonymous visitor (TRAINPLAN_ANONYMOUS_READ) is sent to log in first."""
    if viewer.via == "anonymous":
        raise LoginRequired("/cheapest")
    require_csrf(viewer, form.values.get(CSRF_FIELD))
    values = {k: v for k, v in form.values.items() if k != CSRF_FIELD}
    raw = to_body(values)
    try:
        body = DeadlineBody.model_validate(raw)
        result = cheapest(body, raw, work, cache)
    except ValidationError as exc:
        return _page(request, templates, viewer, prefs, values, validation_errors(exc), status_code=422, body=raw)
    except Refused as exc:
        return _page(request, templates, viewer, prefs, values, exc.errors, status_code=422, body=raw)
    return _page(request, templates, viewer, prefs, values, [], result)


@router.post("/cheapest/plan")
def plan_option(
    request: Request,
    form: FormDep,
    store: StoreDep,
    work: WorkDep,
    cache: CacheDep,
    clusters: ClusterLookupDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
) -> Response:
    """Store one option of a deadline search as a plan (its request, planned again), then its permalink."""
    require_csrf(viewer, form.values.get(CSRF_FIELD))
    try:
        if not viewer.may("write"):
            raise Refused([FieldError("", f"{viewer.name} has the {viewer.role} role: it may not create plans")], 403)
        raw = parse_json(form.values.get("request", ""), "request")
        if not isinstance(raw, dict):
            raise Refused([FieldError("request", "must be a JSON object")])
        created = create_plan(store, raw, lambda: parse_plan_request(raw, clusters), work, cache, viewer.name)
    except (Refused, BodyError) as exc:
        status = exc.status_code if isinstance(exc, Refused) else 422
        return _page(request, templates, viewer, prefs, DEFAULTS, exc.errors, status_code=status)
    price = form.values.get("price", "")  # the option's price: its plan's cost panel prices it
    query = f"?{urlencode({'price': price})}" if re.fullmatch(r"\d+(\.\d+)?(e[+-]?\d+)?", price) else ""
    return RedirectResponse(f"/p/{created.record.id}{query}", status_code=303)
