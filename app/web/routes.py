"""The web form and the result pages. Same service functions as the REST API; HTML instead of JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.api.auth import CSRF_FIELD, AuthError, Principal, csrf_ok
from app.api.deps import CacheDep, FormDep, PageViewerDep, SettingsDep, StoreDep, TemplatesDep, WorkDep
from app.api.jsonbody import BodyError, check_tree, parse_json
from app.api.plans import PlanId, Rank
from app.api.service import InputError, NotFound, check_rank, create_plan, get_plan, plan_artifacts
from app.planner import __version__
from app.planner.errors import FieldError
from app.store import PlanStore
from app.web import forms
from app.web.login import router as login_router
from app.web.pages import SECTIONS, chart_for, form_context, result_context, svg
from app.web.templates import WebTemplates

router = APIRouter(include_in_schema=False)
router.include_router(login_router)

# No scripts at all; styles only from our own stylesheet; forms post only here.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)


def html(content: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(
        content, status_code=status_code, headers={"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}
    )


def _form_page(
    templates: WebTemplates,
    store: PlanStore,
    request: Request,
    viewer: Principal,
    values: dict[str, str],
    errors: list[FieldError],
    status_code: int = 200,
) -> HTMLResponse:
    recent, _total = store.page(8, 0)
    context = form_context(values, errors, recent, str(request.base_url), viewer)
    return html(templates.render("index.html", **context), status_code)


def _not_found(templates: WebTemplates, message: str, viewer: Principal) -> HTMLResponse:
    return html(templates.render("not_found.html", message=message, planner_version=__version__, viewer=viewer), 404)


@router.get("/", response_class=HTMLResponse)
def form_page(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    from_id: Annotated[str | None, Query(alias="from", pattern=r"^[0-9a-f]{16}$")] = None,
) -> HTMLResponse:
    """The empty form, or (?from=<id>) the form filled with a stored plan's request."""
    values = forms.defaults(SECTIONS)
    cap_field = "training.search_time_limit_s"  # offer no more than this service allows
    values[cap_field] = f"{min(float(values[cap_field]), settings.max_search_time_s):g}"
    if from_id:
        record = store.get(from_id)
        if record is None:
            return _not_found(templates, f"No stored plan with id {from_id}.", viewer)
        values = forms.from_stored(SECTIONS, record.request, record.result)
    return _form_page(templates, store, request, viewer, values, [])


def _form_request(form: Mapping[str, str], upload: bytes | None) -> dict[str, Any]:
    """The request the form describes, read as strictly as a JSON body (depth, numbers, surrogates)."""
    try:
        if form.get("model_mode") == "hf":
            text = upload.decode("utf-8", errors="replace") if upload else form.get("hf.config_text", "")
            if text.strip():
                parse_json(text, "hf.config")
        raw = forms.to_request(SECTIONS, form, upload)
        check_tree(raw)
    except BodyError as exc:
        raise forms.FormError(exc.errors) from None
    return raw


@router.post("/", response_class=HTMLResponse)
def submit_form(
    request: Request,
    form: FormDep,
    store: StoreDep,
    work: WorkDep,
    cache: CacheDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
) -> Response:
    """Search and store, then show the result (303 to its permalink); on bad input, the form again with each
    message beside its field and every value kept (a config.json upload is kept as pasted text). Needs the
    user or admin role, and the session's CSRF token."""
    if not csrf_ok(viewer, form.values.get(CSRF_FIELD)):
        raise AuthError(
            403,
            "the form's CSRF token is missing or not this session's: reload the page and submit again",
            field=CSRF_FIELD,
        )
    values = {k: v for k, v in form.values.items() if k != CSRF_FIELD}
    if form.upload is not None:
        values["hf.config_text"] = form.upload.decode("utf-8", errors="replace")
    if not viewer.may("write"):
        problem = FieldError("", f"{viewer.name} has the {viewer.role} role: it may read plans, not create them")
        return _form_page(templates, store, request, viewer, values, [problem], 403)
    try:
        if form.upload_error:
            raise forms.FormError([form.upload_error])
        raw = _form_request(values, form.upload)
        created = create_plan(store, raw, work, cache, viewer.name)
    except (forms.FormError, InputError) as exc:
        return _form_page(templates, store, request, viewer, values, exc.errors, 422)
    return RedirectResponse(f"/p/{created.record.id}", status_code=303)


@router.get("/p/{plan_id}", response_class=HTMLResponse)
def result_page(
    plan_id: PlanId, store: StoreDep, templates: TemplatesDep, viewer: PageViewerDep, rank: Rank = 1
) -> HTMLResponse:
    """A stored plan for people: the permalink. ?rank=N shows the N-th plan's charts and files."""
    try:
        record = get_plan(store, plan_id)
        files = sorted(plan_artifacts(store, record, rank)) if record.result.plans else []
    except NotFound as exc:
        return _not_found(templates, exc.error.message, viewer)
    context = result_context(templates, record, rank, files)
    return html(templates.render("result.html", **context, viewer=viewer))


@router.get("/p/{plan_id}/{chart}.svg")
def chart_svg(
    plan_id: PlanId,
    chart: Annotated[str, Path(pattern="^(memory|pipeline|steps)$")],
    store: StoreDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    rank: Rank = 1,
) -> Response:
    """One chart as a standalone SVG, to paste into a ticket or a wiki."""
    record = get_plan(store, plan_id)
    check_rank(record, rank)
    drawn = chart_for(chart, record, rank)
    if drawn is None:
        raise NotFound(f"no chart {chart!r}", "chart")
    return Response(str(svg(templates, drawn)), media_type="image/svg+xml")


@router.get("/recent", response_class=HTMLResponse)
def recent_page(
    store: StoreDep,
    settings: SettingsDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    offset: Annotated[int, Query(ge=0, le=10**12)] = 0,
) -> HTMLResponse:
    size = settings.default_page_size
    items, total = store.page(size, offset)
    return html(
        templates.render(
            "recent.html",
            items=items,
            total=total,
            offset=offset,
            planner_version=__version__,
            viewer=viewer,
            prev_offset=max(0, offset - size) if offset > 0 else None,
            next_offset=offset + size if offset + size < total else None,
        )
    )


@router.get("/static/style.css")
def stylesheet(templates: TemplatesDep) -> Response:
    return Response(
        templates.static("style.css"), media_type="text/css", headers={"Cache-Control": "public, max-age=300"}
    )
