"""What a stored plan's page shows (GET /p/{id}), computed here so the template only loops and prints."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from threading import Lock
from typing import Any
from urllib.parse import urlencode

from app.planner import __version__, catalog, uncertainty
from app.planner.estimate import memory as estimated_memory
from app.planner.explain import describe
from app.planner.results import Interval, MemoryEstimate, Plan, PlanResult, StageMemory
from app.planner.specs import ParallelConfig
from app.service.artifacts import artifact_url
from app.store import PlanRecord
from app.web import charts, cost, whatif
from app.web.fields import label_for
from app.web.pages import model_dims, svg
from app.web.pipeline_chart import pipeline_chart
from app.web.prefs import Prefs
from app.web.schedule import stage_timing
from app.web.templates import WebTemplates, seconds


@dataclass(frozen=True)
class PlanRow:
    rank: int
    summary: str
    sharding: str
    stage_layers: str
    mem_w: float  # width of the memory meter (48 px = capacity)
    mem_colour: str
    p: Plan
    differs: str = ""  # what tells it apart from ranked plans whose shown columns are the same ("CP comm: a2a")


@dataclass(frozen=True)
class RejectedRow:
    reason: str
    message: str
    count: int
    example: str
    exact: tuple[float, ...] = ()  # the byte counts its message's GiB may be rounded from (`templates.in_units`)


@dataclass(frozen=True)
class Spread:
    """An estimate's 80 % interval in words: low, high, what it rests on."""

    what: str
    low: str
    high: str
    basis: str


def sharding(p: Plan) -> str:
    par = p.parallel
    parts = [f"ZeRO-{par.zero_stage}"] if par.zero_stage else []
    parts += ["dist-opt"] if par.distributed_optimizer else []
    parts += [f"FSDP {par.megatron_fsdp}"] if par.megatron_fsdp else []
    parts += [f"opt→{par.offload_optimizer}"] if par.offload_optimizer != "none" else []
    parts += [f"param→{par.offload_param}"] if par.offload_param != "none" else []
    return ", ".join(parts) or "–"


def plan_row(p: Plan) -> PlanRow:
    mem = p.estimate.memory
    share = mem.peak_bytes / mem.capacity_bytes
    colour = "#c0352b" if mem.peak_bytes > mem.usable_bytes else ("#b35900" if share > 0.85 else "#2e7d32")
    return PlanRow(
        p.rank, describe(p.parallel), sharding(p), layers_text(p.layout.stage_layers), 48 * min(share, 1.0), colour, p
    )


def plan_rows(plans: list[Plan]) -> list[PlanRow]:
    """The ranked table's rows. Plans whose shown columns are all alike (they differ in the CP communication, an
    overlap, the recomputed modules...) say in which fields, so the compare boxes are not a guess."""
    rows = [plan_row(p) for p in plans]
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, row in enumerate(rows):
        par, lay = row.p.parallel, row.p.layout
        shown = (lay.world_size, par.tp, par.pp, par.vpp, par.dp, par.cp, par.ep, row.sharding, par.recompute,
                 par.micro_batch_size, lay.num_microbatches, row.stage_layers)  # fmt: skip
        groups.setdefault(shown, []).append(i)
    for members in (m for m in groups.values() if len(m) > 1):
        pars = [rows[i].p.parallel for i in members]
        names = [n for n in ParallelConfig.model_fields if len({repr(getattr(par, n)) for par in pars}) > 1]
        for i in members:
            par = rows[i].p.parallel
            words = "; ".join(f"{label_for(n)}: {value_text(n, getattr(par, n))}" for n in names)
            rows[i] = replace(rows[i], differs=words)
    return rows


def layers_text(stage_layers: list[int]) -> str:
    """Layers per pipeline stage, short: "20 × 4", or "19, 21 × 2, 19" when uneven."""
    runs: list[list[int]] = []
    for n in stage_layers:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    return ", ".join(f"{n} × {k}" if k > 1 else str(n) for n, k in runs)


def dimensions(par: ParallelConfig) -> list[tuple[str, str, str]]:
    """Every field of the plan's ParallelConfig: (label, value, the spec's description), generated from the spec so
    a new dimension is shown without an edit here."""
    return [
        (label_for(name), value_text(name, getattr(par, name)), info.description or "")
        for name, info in ParallelConfig.model_fields.items()
    ]


def value_text(name: str, value: object) -> str:
    """A ParallelConfig field's value in words."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return " × ".join(map(str, value)) if name == "hierarchical_cp_sizes" else ", ".join(map(str, value))
    return str(value)


def memory_bytes(mem: MemoryEstimate) -> tuple[float, ...]:
    """Every byte count of a memory estimate: what the planner's sentences about it were rounded from, for the GB
    display to convert exactly (`templates.in_units`)."""
    iv = mem.peak_interval
    parts = (
        b
        for s in mem.stages
        for b in (s.total_bytes, s.weights_bytes, s.gradients_bytes, s.optimizer_bytes, s.activations_bytes,
                  s.other_bytes)
    )  # fmt: skip
    return (
        mem.peak_bytes,
        mem.peak_upper_bytes,
        mem.capacity_bytes,
        mem.usable_bytes,
        mem.cpu_bytes_per_node,
        mem.cpu_capacity_bytes_per_node,
        *((iv.low, iv.high) if iv else ()),
        *parts,
    )


# the byte counts behind each rejected group's message, per stored plan: worked out once (the planner's memory
# estimate of the group's example), not on every render of its page (`rejected_rows`)
_EXACT: OrderedDict[tuple[object, ...], tuple[tuple[float, ...], ...]] = OrderedDict()
_EXACT_MAX = 512
_EXACT_LOCK = Lock()


def rejected_rows(record: PlanRecord, prefs: Prefs) -> list[RejectedRow]:
    """The rejected groups, each with the byte counts of its example's memory where its message gives GiB (the
    message was written from that example's memory) and GB is chosen: only then are they needed (`in_units`), and
    they are estimated once per stored plan. The page re-ran the planner's memory estimate for every such group on
    every render, GiB or GB (review 2026-12-07)."""
    result = record.result
    exact = _rejected_bytes(record) if prefs.units != "GiB" else tuple(() for _ in result.rejected)
    return [
        RejectedRow(g.reason, g.message, g.count, describe(g.examples[0]) if g.examples else "", numbers)
        for g, numbers in zip(result.rejected, exact, strict=True)
    ]


def _rejected_bytes(record: PlanRecord) -> tuple[tuple[float, ...], ...]:
    result = record.result
    key = (record.id, record.created_at, record.planner_version, tuple(g.message for g in result.rejected))
    with _EXACT_LOCK:
        if key in _EXACT:
            _EXACT.move_to_end(key)
            return _EXACT[key]
    exact = tuple(
        memory_bytes(estimated_memory(result.model, result.cluster, result.training, g.examples[0]))
        if g.examples and " GiB" in g.message
        else ()
        for g in result.rejected
    )
    with _EXACT_LOCK:
        _EXACT[key] = exact
        while len(_EXACT) > _EXACT_MAX:
            _EXACT.popitem(last=False)
    return exact


def spreads(plan: Plan, prefs: Prefs) -> list[Spread]:
    """The interval lines under the KPIs, each number written as its KPI writes it (the step's read "10.5 s–12 s"
    under "10.53 s–11.98 s", QA 2026-12-07)."""
    t, m = plan.estimate.time, plan.estimate.memory
    out = []
    if t.tokens_per_s_interval is not None:
        iv = t.tokens_per_s_interval
        out.append(Spread("tokens/s", f"{iv.low:,.0f}", f"{iv.high:,.0f}", iv.basis))
    if t.step_interval is not None:
        iv = t.step_interval
        out.append(Spread("step", seconds(iv.low, t.step_s), seconds(iv.high, t.step_s), iv.basis))
    if m.peak_interval is not None:
        iv = m.peak_interval
        out.append(Spread(f"peak memory ({prefs.units})", prefs.mem(iv.low), prefs.mem(iv.high), iv.basis))
    return out


def interval_text(iv: Interval | None, unit: str = "", digits: int = 0) -> str:
    if iv is None:
        return ""
    return f"80%: {iv.low:,.{digits}f}–{iv.high:,.{digits}f}{unit}"


def measured_error(result: PlanResult) -> list[str]:
    """What the model's error has been, measured: the residual spread of this stack on this GPU generation."""
    software, gen = result.training.software, result.cluster.gpu.generation
    lines = []
    for kind, what in (("time", "step time"), ("memory", "peak memory")):
        s = uncertainty.spread(software.name, gen, kind, software.label, result.model)
        lines.append(
            f"{what}: measured values lie within {-100 * s.q90 / (1 + s.q90):+.0f}% to "
            f"{-100 * s.q10 / (1 + s.q10):+.0f}% of the prediction for 80% of runs ({s.basis})"
        )
    return lines


def nothing_fits(result: PlanResult) -> tuple[str, list[str]]:
    """Why nothing fits, from the rejected candidates themselves (memory is only blamed when memory was the cause),
    and the planner's alternatives."""
    counts = {g.reason: g.count for g in result.rejected}
    rest = [s for s in result.suggestions if not s.startswith("no plan fits")]  # the planner's own headline
    total = sum(counts.values())
    if not counts:
        return (
            "No candidate layout exists for this request: no combination of TP, PP, DP, CP and EP multiplies "
            f"to the {result.cluster.world_size} GPUs and divides the model and the batch."
        ), rest
    if "out_of_memory" in counts:
        oom = counts["out_of_memory"]
        return (
            f"{oom:,} of {total:,} rejected candidates run out of memory; the others break the rules listed below."
        ), rest
    top = max(result.rejected, key=lambda g: g.count)
    return (
        f"No candidate runs out of memory: all {total:,} break a rule, most often {top.reason} "
        f"({top.count:,}): {top.message}"
    ), rest


def result_context(
    templates: WebTemplates, record: PlanRecord, rank: int, files: list[str], prefs: Prefs, query: dict[str, str]
) -> dict[str, Any]:
    result = record.result
    plan = result.plans[rank - 1] if result.plans else None
    gpu = result.cluster.gpu
    rejected = rejected_rows(record, prefs)
    context: dict[str, Any] = {
        "record": record,
        "result": result,
        "plan": plan,
        "rank": rank,
        "prefs": prefs,
        "planner_version": __version__,
        "plan_rows": plan_rows(result.plans),
        "show_cp": any(p.parallel.cp > 1 for p in result.plans),
        "show_ep": any(p.parallel.ep > 1 for p in result.plans),
        "rejected": rejected,
        "rejected_bytes": tuple(b for row in rejected for b in row.exact),
        "efficiency": gpu.efficiency,
        "software": result.training.software,
        "evidence": catalog.efficiency_evidence(gpu),
        "stack_evidence": result.training.software.generation(gpu.generation).evidence,
        "other_help": StageMemory.model_fields["other_bytes"].description or "",
        "measured_error": measured_error(result),
        "model_dims": model_dims(result.model),
        "actions": whatif.suggestion_actions(result),
        "controls": whatif.controls(record, prefs.units),
        "cost": cost.cost_context(result, query),
        "self_url": _self_url(record.id, rank, query),
    }
    if plan is None:
        context["why_nothing"], context["alternatives"] = nothing_fits(result)
        return context
    memory, pipeline, step = (
        charts.memory_chart(plan, prefs=prefs),
        pipeline_chart(plan, stage_timing(result.model, result.cluster, result.training, plan)),
        charts.step_chart(result.plans, rank),
    )
    context.update(
        {
            "plan_summary": describe(plan.parallel),
            "dimensions": dimensions(plan.parallel),
            "spreads": spreads(plan, prefs),
            "plan_bytes": memory_bytes(plan.estimate.memory),
            "flops_definition": plan.estimate.time.flops_definition,
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


def chart_for(name: str, record: PlanRecord, rank: int, prefs: Prefs) -> charts.Chart | None:
    """A chart on its own (GET /p/{id}/{name}.svg), or None if the name is not a chart."""
    plan = record.result.plans[rank - 1]
    makers = {
        "memory": lambda: charts.memory_chart(plan, prefs=prefs),
        "pipeline": lambda: pipeline_chart(
            plan, stage_timing(record.result.model, record.result.cluster, record.result.training, plan)
        ),
        "steps": lambda: charts.step_chart(record.result.plans, rank),
    }
    maker = makers.get(name)
    return maker() if maker else None


def _self_url(plan_id: str, rank: int, query: Mapping[str, str]) -> str:
    """This page as it is, for the units and theme switches to come back to: its rank and the cost panel's inputs
    (they came back without the tokens and price typed)."""
    kept = [("rank", str(rank) if rank != 1 else "")] + [(k, query.get(k, "")) for k in ("tokens", "price")]
    given = [(k, v) for k, v in kept if v]
    return f"/p/{plan_id}" + (f"?{urlencode(given)}" if given else "")
