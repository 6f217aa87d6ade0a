"""What each page shows, computed here so the templates only loop and print."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from app.api.auth import Principal
from app.api.plans import artifact_url
from app.planner import __version__, catalog
from app.planner.errors import FieldError
from app.planner.explain import describe
from app.planner.results import Plan, StageMemory
from app.store import PlanRecord
from app.web import charts, forms
from app.web.templates import WebTemplates

SECTIONS = forms.build_fields()
FORM_NAMES = {f.name for f in forms.all_fields(SECTIONS)} | set(forms.MODES) | {"cluster_preset"}


@dataclass(frozen=True)
class PlanRow:
    rank: int
    summary: str
    sharding: str
    stage_layers: str
    mem_w: float  # width of the memory meter (48 px = capacity)
    mem_colour: str
    p: Plan


@dataclass(frozen=True)
class RejectedRow:
    reason: str
    message: str
    count: int
    example: str


def svg(templates: WebTemplates, chart: charts.Chart) -> Markup:
    """A chart drawn by the autoescaping template: safe to place in the page as is."""
    return Markup(templates.render("chart.svg", chart=chart))


def _sharding(p: Plan) -> str:
    par = p.parallel
    parts = [f"ZeRO-{par.zero_stage}"] if par.zero_stage else []
    parts += ["dist-opt"] if par.distributed_optimizer else []
    parts += [f"opt→{par.offload_optimizer}"] if par.offload_optimizer != "none" else []
    parts += [f"param→{par.offload_param}"] if par.offload_param != "none" else []
    return ", ".join(parts) or "–"


def _row(p: Plan) -> PlanRow:
    mem = p.estimate.memory
    share = mem.peak_bytes / mem.capacity_bytes
    colour = "#e15759" if mem.peak_bytes > mem.usable_bytes else ("#f28e2b" if share > 0.85 else "#59a14f")
    return PlanRow(
        p.rank, describe(p.parallel), _sharding(p), _layers(p.layout.stage_layers), 48 * min(share, 1.0), colour, p
    )


def _layers(stage_layers: list[int]) -> str:
    """Layers per pipeline stage, short: "20 × 4", or "19, 21 × 2, 19" when uneven."""
    runs: list[list[int]] = []
    for n in stage_layers:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    return ", ".join(f"{n} × {k}" if k > 1 else str(n) for n, k in runs)


def form_context(
    values: Mapping[str, str], errors: list[FieldError], recent: list[Any], base_url: str, viewer: Principal
) -> dict[str, Any]:
    by_field: dict[str, str] = {}
    general: list[str] = []
    for e in errors:
        name = forms.error_field(e, values)
        if name in FORM_NAMES and name not in by_field:
            by_field[name] = e.message
        else:
            general.append(str(e))
    return {
        "sections": SECTIONS,
        "values": dict(values),
        "errors": by_field,
        "general_errors": general,
        "open_more": any(f.name in by_field for f in SECTIONS["training_more"]),
        "open_pins": any(f.name in by_field or values.get(f.name) for f in SECTIONS["pins"]),
        "open_render": any(f.name in by_field or values.get(f.name, "") != f.default for f in SECTIONS["render"]),
        "recent": recent,
        "base_url": base_url,
        "planner_version": __version__,
        "viewer": viewer,
        "csrf_token": viewer.csrf_token if viewer.via == "session" else "",
    }


def _other_help() -> str:
    return StageMemory.model_fields["other_bytes"].description or ""


def result_context(templates: WebTemplates, record: PlanRecord, rank: int, files: list[str]) -> dict[str, Any]:
    result = record.result
    plan = result.plans[rank - 1] if result.plans else None
    gpu = result.cluster.gpu
    context: dict[str, Any] = {
        "record": record,
        "result": result,
        "plan": plan,
        "rank": rank,
        "planner_version": __version__,
        "plan_rows": [_row(p) for p in result.plans],
        "show_cp": any(p.parallel.cp > 1 for p in result.plans),
        "show_ep": any(p.parallel.ep > 1 for p in result.plans),
        "rejected": [
            RejectedRow(g.reason, g.message, g.count, describe(g.examples[0]) if g.examples else "")
            for g in result.rejected
        ],
        "efficiency": gpu.efficiency,
        "evidence": catalog.generation_evidence().get(gpu.generation, "not documented"),
        "framework_evidence": catalog.framework_evidence()["deepspeed_pipeline_engine"]
        if result.training.framework != "megatron"
        else "",
        "other_help": _other_help(),
        "flops_definition": plan.estimate.time.flops_definition if plan else "",
    }
    if plan is None:
        return context
    memory, pipeline, step = (
        charts.memory_chart(plan),
        charts.pipeline_chart(plan),
        charts.step_chart(result.plans, rank),
    )
    context.update(
        {
            "plan_summary": describe(plan.parallel),
            "artifacts": [{"name": n, "url": artifact_url(record.id, n, rank)} for n in files],
            "bundle_url": f"/plans/{record.id}/bundle.zip" + ("" if rank == 1 else f"?rank={rank}"),
            "memory_svg": svg(templates, memory),
            "memory_legend": memory.legend,
            "pipeline_svg": svg(templates, pipeline),
            "pipeline_legend": pipeline.legend,
            "pipeline_desc": pipeline.desc,
            "step_svg": svg(templates, step),
            "step_legend": step.legend,
        }
    )
    return context


def chart_for(name: str, record: PlanRecord, rank: int) -> charts.Chart | None:
    """A chart on its own (GET /p/{id}/{name}.svg), or None if the name is not a chart."""
    plan = record.result.plans[rank - 1]
    makers = {
        "memory": lambda: charts.memory_chart(plan),
        "pipeline": lambda: charts.pipeline_chart(plan),
        "steps": lambda: charts.step_chart(record.result.plans, rank),
    }
    maker = makers.get(name)
    return maker() if maker else None
