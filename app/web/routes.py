"""The web form and the result pages. Same service functions as the REST API; HTML instead of JSON."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response

from app.planner.errors import FieldError
from app.service.auth import CSRF_FIELD, Principal, csrf_ok
from app.service.deps import (
    CacheDep,
    ClusterLookupDep,
    PageRank,
    PageViewerDep,
    PlanId,
    Rank,
    SettingsDep,
    StoreDep,
    WorkDep,
)
from app.service.errors import Refused
from app.service.jsonbody import BodyError, check_tree, parse_json
from app.service.planning import NotFound, check_rank, create_plan, get_plan, plan_artifacts
from app.service.requests import ClusterLookup, Parsed, parse_plan_request
from app.store import PlanRecord, PlanStore
from app.web import forms, whatif
from app.web import prefs as prefs_mod
from app.web.deadline import router as deadline_router
from app.web.deps import FormDep, TemplatesDep
from app.web.lists import router as lists_router
from app.web.login import router as login_router
from app.web.pages import DEFAULTS, FORM_NAMES, SEARCH_CAP_FIELD, SECTIONS, Check, check_of, form_context, svg
from app.web.prefs import Prefs
from app.web.respond import HTML, PrefsDep, bad_address, compressed, filled_url, html, not_found, require_csrf
from app.web.result import chart_for, result_context
from app.web.templates import WebTemplates

router = APIRouter(include_in_schema=False)
router.include_router(login_router)
router.include_router(lists_router)
router.include_router(deadline_router)


def _form_page(
    templates: WebTemplates,
    store: PlanStore,
    request: Request,
    viewer: Principal,
    prefs: Prefs,
    values: dict[str, str],
    errors: list[FieldError],
    status_code: int = 200,
    check: Check | None = None,
    self_url: str = "/",
    notices: list[str] | None = None,
) -> Response:
    """The form page; `notices`: what a what-if changed besides the values typed (it comes back with them)."""
    recent, _total = store.page(8, 0)
    if self_url == "/":  # the preference links come back to this form as filled, not to an empty one
        self_url = _draft_url(values)
    saved, _count = request.app.state.clusters.page(200, 0)  # the "use saved cluster" choices
    cap = request.app.state.settings.max_search_time_s
    context = form_context(values, errors, recent, str(request.base_url), viewer, prefs, check, cap)
    context["saved_clusters"] = saved
    context["notices"] = notices or []
    return html(request, templates.render("index.html", **context, self_url=self_url), status_code)


PLAN_ID = re.compile(r"[0-9a-f]{16}")


def _draft_url(values: Mapping[str, str]) -> str:
    """The form's URL filled with `values`, those that differ from the empty form's (`filled_url`)."""
    return filled_url("/", {k: v for k, v in values.items() if k in FORM_NAMES and DEFAULTS.get(k) != v})


@router.get("/", response_class=HTML)
def form_page(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
    from_id: Annotated[str | None, Query(alias="from", pattern=r"^[0-9a-f]{16}$")] = None,
) -> Response:
    """The empty form; (?from=<id>) the form filled with a stored plan's request; or filled with the form's own
    fields given in the query (its preference links after a refused submission), nothing planned."""
    values = forms.defaults(SECTIONS)
    # offer no more than this service allows
    values[SEARCH_CAP_FIELD] = f"{min(float(values[SEARCH_CAP_FIELD]), settings.max_search_time_s):g}"
    if from_id:
        record = store.get(from_id)
        if record is None:
            return not_found(request, templates, f"No stored plan with id {from_id}.", viewer, prefs)
        values = whatif.stored_values(record)
        if record.cluster_name:  # made on a saved cluster: the form on it again, where that says the same
            saved = request.app.state.clusters.get(record.cluster_name)
            values.update(forms.saved_mode(record.request, saved.spec if saved else None, record.cluster_name))
    else:
        values.update({k: v for k, v in request.query_params.items() if k in FORM_NAMES})
    # the units and theme switches come back to this form, filled as it is (they went back to an empty one)
    back = f"/?from={from_id}" if from_id else "/"
    return _form_page(templates, store, request, viewer, prefs, values, [], self_url=back)


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


def _checked_values(form: Any, viewer: Principal) -> dict[str, str]:
    """The submitted values once the session's CSRF token is checked (a config.json upload kept as pasted text)."""
    require_csrf(viewer, form.values.get(CSRF_FIELD))
    return _form_values(form)


def _form_values(form: Any) -> dict[str, str]:
    values = {k: v for k, v in form.values.items() if k != CSRF_FIELD}
    if form.upload is not None:
        values["hf.config_text"] = form.upload.decode("utf-8", errors="replace")
    return values


def _stale_form(
    request: Request, form: Any, store: PlanStore, templates: WebTemplates, viewer: Principal, prefs: Prefs
) -> Response | None:
    """A logged-in user's form whose CSRF token is another session's (it was loaded before a new login, say): the
    form again, every value kept, with this session's token; nothing is planned. It was the API's JSON 403, and
    the values typed were lost (QA, 2026-12-06). Another site's post learns nothing: it cannot read the page."""
    if viewer.via != "session" or csrf_ok(viewer, form.values.get(CSRF_FIELD)):
        return None
    values = _form_values(form)
    problem = FieldError(
        CSRF_FIELD,
        "this form was loaded in another session (before a new login, or expired): nothing was planned; "
        "check the values below and send it again",
    )
    return _form_page(templates, store, request, viewer, prefs, values, [problem], 403)


def _plan_and_show(
    request: Request,
    values: dict[str, str],
    upload: bytes | None,
    upload_error: FieldError | None,
    store: PlanStore,
    work: Any,
    cache: Any,
    clusters: ClusterLookup,
    templates: WebTemplates,
    viewer: Principal,
    prefs: Prefs,
    notices: list[str] | None = None,
    cluster_name: str | None = None,
    shown_on_error: dict[str, str] | None = None,
) -> Response:
    """Search and store, then 303 to the permalink; on bad input, the form again with every value kept. `notices`:
    what the caller changed besides the user's values, stored with the plan's own; `cluster_name`: the saved
    cluster the plan is still made on (a what-if of one); `shown_on_error`: the form values to show instead of
    `values` on bad input (a what-if on a saved cluster comes back in saved mode)."""
    if not viewer.may("write"):
        problem = FieldError("", f"{viewer.name} has the {viewer.role} role: it may read plans, not create them")
        return _form_page(templates, store, request, viewer, prefs, values, [problem], 403)
    try:
        if upload_error:
            raise forms.FormError([upload_error])
        raw = _form_request(values, upload)

        def parse() -> Parsed:
            parsed = parse_plan_request(raw, clusters)
            name = parsed.cluster_name or cluster_name
            return replace(parsed, notices=[*parsed.notices, *(notices or [])], cluster_name=name)

        created = create_plan(store, raw, parse, work, cache, viewer.name)
    except (forms.FormError, Refused) as exc:
        shown = shown_on_error or values
        return _form_page(templates, store, request, viewer, prefs, shown, exc.errors, 422, notices=notices)
    return RedirectResponse(f"/p/{created.record.id}", status_code=303)


@router.post("/", response_class=HTML)
def submit_form(
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
    """Search and store, then show the result (303 to its permalink); on bad input, the form again with each
    message beside its field and every value kept. Needs the user or admin role, and the session's CSRF token."""
    stale = _stale_form(request, form, store, templates, viewer, prefs)
    if stale is not None:
        return stale
    values = _checked_values(form, viewer)
    upload, upload_error = form.upload, form.upload_error
    return _plan_and_show(request, values, upload, upload_error, store, work, cache, clusters, templates, viewer, prefs)


@router.post("/check", response_class=HTML)
def check_form(
    request: Request,
    form: FormDep,
    store: StoreDep,
    clusters: ClusterLookupDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
) -> Response:
    """The form again with the model it describes: parameter count and dimensions, no search (read role is enough)."""
    stale = _stale_form(request, form, store, templates, viewer, prefs)
    if stale is not None:
        return stale
    values = _checked_values(form, viewer)
    try:
        if form.upload_error:
            raise forms.FormError([form.upload_error])
        raw = _form_request(values, form.upload)
        parsed = parse_plan_request(raw, clusters)
    except (forms.FormError, Refused) as exc:
        return _form_page(templates, store, request, viewer, prefs, values, exc.errors, 422)
    check = check_of(parsed.request.model, [])
    return _form_page(templates, store, request, viewer, prefs, values, [], check=check)


@router.post("/whatif", response_class=HTML)
def what_if(
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
    """A stored plan's request with the posted fields changed, planned again (quick controls, suggestions)."""
    values = _checked_values(form, viewer)
    plan_id = values.pop("whatif.from", "")
    # a plan id is 16 hex digits: anything else is no plan, never a query (NUL bytes were a 500 on PostgreSQL, QA)
    record = store.get(plan_id) if PLAN_ID.fullmatch(plan_id) else None
    if record is None:
        return not_found(request, templates, f"No stored plan with id {plan_id!r} to change.", viewer, prefs)
    again = whatif.replan(record, values, clusters(record.cluster_name) if record.cluster_name else None)
    return _plan_and_show(
        request,
        again.values,
        None,
        None,
        store,
        work,
        cache,
        clusters,
        templates,
        viewer,
        prefs,
        again.notices,
        again.cluster_name,
        _on_saved_cluster(again),
    )


def _on_saved_cluster(again: whatif.Replan) -> dict[str, str] | None:
    """The form of a what-if still on its saved cluster, shown on bad input: in saved mode with the node count, as
    "Edit and re-plan" opens it; as a described cluster its re-plan left the saved cluster and its notices (QA
    2026-12-07)."""
    if again.cluster_name is None:
        return None
    nodes = again.values.get("cluster.num_nodes", "")
    return {**again.values, "cluster_mode": "saved", forms.SAVED: again.cluster_name, forms.SAVED_NODES: nodes}


@router.get("/p/{plan_id}", response_class=HTML)
def result_page(
    request: Request,
    plan_id: PlanId,
    store: StoreDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
    rank: PageRank = "1",
) -> Response:
    """A stored plan for people: the permalink. ?rank=N shows the N-th plan's charts and files; ?tokens= and
    ?price= (per GPU-hour) add the time to train and the cost of every ranked plan. A rank out of range (0, -1 as
    well as 50) is the not-found page, one that is no number (abc) the bad-address page, whatever the client
    accepts (they were the API's JSON 422 but for a browser's Accept header, QA 2026-12-07)."""
    try:
        record = get_plan(store, plan_id)
        number = int(rank) if RANK.fullmatch(rank.strip()) else None
        if number is None:  # not a number: a bad address, as the API says it (there as JSON)
            message = f"rank: Input should be a valid integer (got {rank!r}); plan {plan_id} has {_ranks(record)}"
            return bad_address(request, templates, message, viewer, prefs)
        files = sorted(plan_artifacts(store, record, number)) if record.result.plans else []
    except NotFound as exc:
        return not_found(request, templates, exc.error.message, viewer, prefs)
    query = {k: request.query_params.get(k, "")[:64] for k in ("tokens", "price")}
    context = result_context(templates, record, number, files, prefs, query)
    csrf = viewer.csrf_token if viewer.via == "session" else ""
    return html(request, templates.render("result.html", **context, viewer=viewer, csrf_token=csrf))


RANK = re.compile(r"[+-]?[0-9]{1,4}")


def _ranks(record: PlanRecord) -> str:
    return f"ranks 1..{len(record.result.plans)}" if record.result.plans else "no ranked plans"


@router.get("/whatif", response_class=HTML)
def what_if_again(
    request: Request,
    store: StoreDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
    from_id: Annotated[str, Query(alias="from", max_length=64)] = "",
) -> Response:
    """A what-if's address opened again (a reload, a bookmark, a link): the plan it was made from, whose What if
    controls make it again (the address was the API's JSON 405, QA 2026-12-07); without a stored plan, a page that
    says where what-ifs come from. The what-if forms post to /whatif?from=<id>, so their address names the plan."""
    if PLAN_ID.fullmatch(from_id) and store.get(from_id) is not None:
        return RedirectResponse(f"/p/{from_id}#whatif", status_code=303)
    gone = f"No stored plan with id {from_id!r}. " if from_id else ""
    message = (
        f"{gone}A what-if is made from a plan's page (its What if controls and suggestions), not opened as an "
        "address of its own: open the plan from the plan list (/recent) and change it there."
    )
    return not_found(request, templates, message, viewer, prefs)


@router.get("/p/{plan_id}/{chart}.svg")
def chart_svg(
    request: Request,
    plan_id: PlanId,
    chart: Annotated[str, Path(pattern="^(memory|pipeline|steps)$")],
    store: StoreDep,
    templates: TemplatesDep,
    viewer: PageViewerDep,
    prefs: PrefsDep,
    rank: Rank = 1,
) -> Response:
    """One chart as a standalone SVG, to paste into a ticket or a wiki."""
    record = get_plan(store, plan_id)
    check_rank(record, rank, "charts")
    drawn = chart_for(chart, record, rank, prefs)
    if drawn is None:
        raise NotFound(f"no chart {chart!r}", "chart")
    return compressed(request, str(svg(templates, drawn)).encode(), "image/svg+xml")


@router.get("/prefs")
def set_prefs(
    prefs: PrefsDep,
    units: Annotated[str | None, Query(max_length=8)] = None,
    theme: Annotated[str | None, Query(max_length=8)] = None,
    back: Annotated[str | None, Query(max_length=2000)] = None,
) -> Response:
    """Change the units (GiB, GB) or the theme (system, light, dark) and go back to the page (a link, no script)."""
    new = prefs_mod.changed(prefs, units, theme)
    response = RedirectResponse(prefs_mod.safe_back(back), status_code=303)
    response.set_cookie(prefs_mod.COOKIE, new.cookie, max_age=365 * 86400, samesite="lax", httponly=True)
    return response


@router.get("/static/style.css")
def stylesheet(request: Request, templates: TemplatesDep) -> Response:
    return compressed(
        request, templates.static("style.css").encode(), "text/css", headers={"Cache-Control": "public, max-age=300"}
    )
