"""The plan list (search, filter by model / GPU / owner, CSV, delete) and the side-by-side comparison."""

from __future__ import annotations

import csv
import io
import itertools
import zlib
from collections.abc import Iterator
from typing import Annotated
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse

from app.planner import __version__
from app.service.auth import CSRF_FIELD
from app.service.deps import PageViewerDep, SettingsDep, StoreDep
from app.service.responses import accepts_gzip
from app.store import NotOwner, PlanFilters, PlanSummaryRecord
from app.web.compare import MAX_PLANS, compare_context, parse_refs
from app.web.deps import FormDep, TemplatesDep
from app.web.respond import HTML, PrefsDep, html, not_found, refused, require_csrf

router = APIRouter(include_in_schema=False)
Text = Annotated[str, Query(max_length=100)]
CSV_MAX_ROWS = 100_000  # a CSV of every matching plan, read batch by batch from the store
CSV_BATCH = 1000


def filters_of(q: str, model: str, gpu: str, owner: str, me: str = "", cluster: str = "") -> PlanFilters:
    """The list's filters; owner `me` is the viewer `me` (as GET /plans?owner=me)."""
    return PlanFilters(q.strip(), model, gpu, me if owner == "me" and me else owner, cluster)


def query_of(filters: PlanFilters, **more: object) -> str:
    fields = {k: v for k, v in vars(filters).items() if v}
    return urlencode({**fields, **{k: v for k, v in more.items() if v}})


@router.get("/recent", response_class=HTML)
def recent_page(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
    q: Text = "",
    model: Text = "",
    gpu: Text = "",
    owner: Text = "",
    cluster: Text = "",
    offset: Annotated[int, Query(ge=0, le=10**12)] = 0,
    deleted: Annotated[str, Query(max_length=16)] = "",
) -> Response:
    filters = filters_of(q, model, gpu, owner, viewer.name, cluster)
    size = settings.default_page_size
    items, matching = store.page(size, offset, filters=filters)  # the search runs in SQL
    total = store.page(1, 0)[1] if filters.conditions() else matching
    facets = store.facets()
    page = templates.render(
        "recent.html",
        items=items,
        total=total,
        matching=matching,
        offset=offset,
        filters=filters,
        models=facets["models"],
        gpus=facets["gpus"],
        owners=facets["owners"],
        clusters=facets["clusters"],
        planner_version=__version__,
        viewer=viewer,
        prefs=prefs,
        deleted=deleted,
        max_compare=MAX_PLANS,
        csrf_token=viewer.csrf_token if viewer.via == "session" else "",
        csv_url="/recent.csv?" + query_of(filters),
        filters_query=query_of(filters),
        self_url="/recent?" + query_of(filters, offset=offset),
        prev_url="/recent?" + query_of(filters, offset=max(0, offset - size)) if offset > 0 else None,
        next_url="/recent?" + query_of(filters, offset=offset + size) if offset + size < matching else None,
    )
    return html(request, page)


CSV_COLUMNS = (
    "id",
    "created_at",
    "owner",
    "model",
    "parameters",
    "gpu",
    "gpus",
    "plans",
    "chosen_plan",
    "tokens_per_s",
    "time_capped",
    "planner_version",
    "cluster",
)


@router.get("/recent.csv")
def recent_csv(
    request: Request,
    store: StoreDep,
    viewer: PageViewerDep,
    q: Text = "",
    model: Text = "",
    gpu: Text = "",
    owner: Text = "",
    cluster: Text = "",
) -> Response:
    """The filtered plan list as CSV (one row per stored plan), streamed: a batch of rows read, written and
    compressed at a time, so 100,000 plans never sit in a worker's memory at once (they did, as objects, text and
    gzip, QA 2026-12-07)."""
    filters = filters_of(q, model, gpu, owner, viewer.name, cluster)
    batches = store.summaries(filters, limit=CSV_MAX_ROWS, batch=CSV_BATCH)
    # the first batch is read before the answer starts: a database that is down is the 503 every list gives, not a
    # 200 with an empty file (a failure between later batches can only cut the stream, and the log says so)
    first = next(batches, [])
    chunks = _csv_chunks(itertools.chain([first], batches))
    headers = {
        "Content-Disposition": 'attachment; filename="trainplan-plans.csv"',
        "X-Content-Type-Options": "nosniff",
        "Vary": "Accept-Encoding",
    }
    if accepts_gzip(request):
        chunks = _gzipped(chunks)
        headers["Content-Encoding"] = "gzip"
    return StreamingResponse(chunks, media_type="text/csv; charset=utf-8", headers=headers)


def _csv_chunks(batches: Iterator[list[PlanSummaryRecord]]) -> Iterator[bytes]:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for batch in batches:
        for r in batch:
            row = [
                r.id,
                r.created_at.isoformat(),
                r.owner or "",
                r.model_name,
                r.num_parameters,
                r.gpu_name,
                r.num_gpus,
                r.num_plans,
                r.best_summary or "",
                f"{r.best_tokens_per_s:.1f}" if r.best_tokens_per_s else "",
                r.truncated,
                r.planner_version,
                r.cluster_name or "",
            ]
            # every text cell, not a chosen few: a custom GPU named "=cmd|..." went out as a formula (QA 2026-12-07)
            writer.writerow([_cell(v) if isinstance(v, str) else v for v in row])
        yield out.getvalue().encode()
        out.seek(0)
        out.truncate()
    if out.tell():  # the header alone: no plan matched
        yield out.getvalue().encode()


def _gzipped(chunks: Iterator[bytes]) -> Iterator[bytes]:
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: the gzip container
    for chunk in chunks:
        if packed := packer.compress(chunk):
            yield packed
    yield packer.flush()


def _cell(text: str) -> str:
    """A spreadsheet opens cells starting with = + - @ as formulas: quote them out."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@router.get("/p/{plan_id}/delete", response_class=HTML)
def confirm_delete_page(
    request: Request,
    plan_id: Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")],
    store: StoreDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
    back: Annotated[str, Query(max_length=2000)] = "",
) -> Response:
    """The plan list's Delete asks first: one click removed a plan for good (QA). The page names the plan and posts
    the deletion with the session's CSRF token; "Keep it" goes back to the list as it was filtered."""
    if not viewer.may("write"):
        why = f"{viewer.name} has the {viewer.role} role: it may read plans, not delete them"
        return refused(request, templates, why, viewer, prefs, "/recent")
    record = store.get(plan_id)
    if record is None:
        return not_found(request, templates, f"No stored plan with id {plan_id}.", viewer, prefs, "/recent")
    if not viewer.may("admin") and record.owner != viewer.name:
        # it offered the button, and pressing it gave a JSON 403 (QA 2026-12-07)
        why = f"plan {plan_id} is {record.owner or 'nobody'}'s: only its owner or an admin may delete it"
        return refused(request, templates, why, viewer, prefs, "/recent")
    filters = query_of(_back_filters(back))
    # "Keep it" goes back to the page of the list the user was on, not its first (QA 2026-12-07)
    offset = dict(parse_qsl(back)[:8]).get("offset", "")
    page_of = f"offset={offset}" if offset.isdecimal() and 0 < int(offset) <= 10**12 else ""
    page = templates.render(
        "confirm_delete.html",
        record=record,
        back=filters,
        cancel_url="/recent?" + "&".join(part for part in (filters, page_of) if part),
        csrf_token=viewer.csrf_token if viewer.via == "session" else "",
        planner_version=__version__,
        viewer=viewer,
        prefs=prefs,
        self_url=f"/p/{plan_id}/delete",
    )
    return html(request, page)


@router.post("/p/{plan_id}/delete")
def delete_plan(
    request: Request,
    plan_id: Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")],
    form: FormDep,
    store: StoreDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
) -> Response:
    """A user deletes their own plans, an admin any (audited by the store), with the session's CSRF token."""
    require_csrf(viewer, form.values.get(CSRF_FIELD))
    if not viewer.may("write"):
        why = f"{viewer.name} has the {viewer.role} role: it may read plans, not delete them"
        return refused(request, templates, why, viewer, prefs, "/recent")
    try:
        found = store.delete(plan_id, actor=viewer.name, only_owner=None if viewer.may("admin") else viewer.name)
    except NotOwner as exc:
        return refused(request, templates, f"{exc}: only its owner or an admin may delete it", viewer, prefs, "/recent")
    if not found:
        return not_found(request, templates, f"No stored plan with id {plan_id}.", viewer, prefs, "/recent")
    query = query_of(_back_filters(form.values.get("back", "")), deleted=plan_id)
    return RedirectResponse(f"/recent?{query}", status_code=303)


def _back_filters(back: str) -> PlanFilters:
    """The list's filters carried in a `back` query string (only the filters are read back from it, as filters)."""
    given = dict(parse_qsl(back)[:8])
    q, model, gpu, owner, cluster = (given.get(k, "")[:200] for k in ("q", "model", "gpu", "owner", "cluster"))
    return filters_of(q, model, gpu, owner, cluster=cluster)


@router.get("/compare", response_class=HTML)
def compare_page(
    request: Request,
    store: StoreDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
    p: Annotated[list[str] | None, Query(max_length=40)] = None,
) -> Response:
    """2-4 plans side by side (?p=<id>:<rank>&p=...): numbers with deltas, memory on one axis, step times,
    schedules and a diff of the rendered files."""
    refs, errors = parse_refs(p or [])
    context = compare_context(templates, store, refs, errors, prefs)
    page = templates.render(
        "compare.html",
        **context,
        viewer=viewer,
        planner_version=__version__,
        self_url=str(request.url.path) + ("?" + request.url.query if request.url.query else ""),
    )
    return html(request, page, 200 if not context["errors"] else 422)
