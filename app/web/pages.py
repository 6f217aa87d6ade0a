"""What the form page shows, computed here so the templates only loop and print (the result page: result.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from app.planner import __version__
from app.planner.errors import FieldError
from app.planner.specs import ModelSpec
from app.service.auth import Principal
from app.web import charts, forms
from app.web.prefs import Prefs
from app.web.templates import WebTemplates

SECTIONS = forms.build_fields()
FORM_NAMES = {f.name for f in forms.all_fields(SECTIONS)} | set(forms.MODES) | {"cluster_preset", forms.SAVED}
DEFAULTS = forms.defaults(SECTIONS)
SEARCH_CAP_FIELD = "training.search_time_limit_s"


def svg(templates: WebTemplates, chart: charts.Chart) -> Markup:
    """A chart drawn by the autoescaping template: safe to place in the page as is."""
    return Markup(templates.render("chart.svg", chart=chart))


def shown_at(error: FieldError, values: Mapping[str, str]) -> str | None:
    """The form field an error belongs to: its own, or the nearest enclosing one (cluster.profile.device.name ->
    cluster.profile); None when the form has no such field."""
    name = forms.error_field(error, values)
    while name:
        if name in FORM_NAMES:
            return name
        name = name.rpartition(".")[0]
    return None


@dataclass(frozen=True)
class Check:
    """The model a form describes, before any search: its parameter count and shape."""

    name: str
    params: int
    active: int
    dims: list[tuple[str, str]]
    notes: list[str]


def model_dims(model: ModelSpec) -> list[tuple[str, str]]:
    """The shape that decides memory and time, as people read it."""
    rows = [
        ("layers", f"{model.num_layers}"),
        ("hidden", f"{model.hidden_size:,}"),
        ("heads / KV heads", f"{model.num_attention_heads} / {model.num_query_groups}"),
        ("head dim", f"{model.head_dim}"),
        ("FFN", f"{model.ffn_hidden_size:,}"),
        ("vocabulary", f"{model.vocab_size:,}"),
        ("sequence", f"{model.seq_length:,} tokens"),
        ("MLP", "SwiGLU" if model.swiglu else "GELU"),
        ("norm", model.normalization),
        ("positions", model.position_embedding_type),
        ("embeddings", "untied" if model.untie_embeddings_and_output_weights else "tied"),
    ]
    if model.multi_latent_attention:
        rows.append(("attention", f"MLA (q rank {model.q_lora_rank}, kv rank {model.kv_lora_rank})"))
    if model.sliding_window is not None:
        layers = f"{model.windowed_layers} of {model.num_layers} layers"
        rows.append(("attention window", f"{model.sliding_window:,} tokens on {layers}"))
    if model.is_moe:
        rows.append(("experts", f"{model.num_experts} × {model.moe_ffn_hidden_size:,}, top-{model.moe_router_topk}"))
        if model.moe_shared_expert_intermediate_size:
            rows.append(("shared experts", f"{model.moe_shared_expert_intermediate_size:,}"))
        if model.moe_first_dense_layers:
            rows.append(("dense layers first", f"{model.moe_first_dense_layers}"))
    return rows


def check_of(model: ModelSpec, notes: list[str]) -> Check:
    return Check(model.name, model.num_parameters, model.num_active_parameters, model_dims(model), notes)


def _open_sections(values: Mapping[str, str], errors: Mapping[str, str]) -> dict[str, bool]:
    """A folded section opens when one of its fields has an error or a value other than the empty form's."""
    out = {}
    for name, fields in SECTIONS.items():
        out[name] = any(f.name in errors or values.get(f.name, "") != DEFAULTS.get(f.name, "") for f in fields)
    out["pins"] = out["pins"] or out["pins_more"]
    out["render"] = out["render"] or out["render_more"]
    return out


def form_context(
    values: Mapping[str, str],
    errors: list[FieldError],
    recent: list[Any],
    base_url: str,
    viewer: Principal,
    prefs: Prefs,
    check: Check | None = None,
    search_cap_s: float | None = None,
) -> dict[str, Any]:
    """What the form page shows; `search_cap_s` is the service's cap on the search time, the most the form offers."""
    by_field: dict[str, str] = {}
    general: list[str] = []
    for e in errors:
        name = shown_at(e, values)
        if name is not None and name not in by_field:
            by_field[name] = e.message if name == e.field else str(e)
        else:
            general.append(str(e))
    return {
        "sections": forms.in_units(
            SECTIONS if search_cap_s is None else forms.capped(SECTIONS, SEARCH_CAP_FIELD, search_cap_s), prefs.units
        ),
        "values": dict(values),
        "errors": by_field,
        "general_errors": general,
        "open": _open_sections(values, by_field),
        "recent": recent,
        "base_url": base_url,
        "planner_version": __version__,
        "viewer": viewer,
        "prefs": prefs,
        "check": check,
        "csrf_token": viewer.csrf_token if viewer.via == "session" else "",
    }
