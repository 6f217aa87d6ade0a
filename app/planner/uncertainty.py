"""Prediction intervals from the validation residuals of each stack x GPU generation.

`benchmarks/accuracy.py --write-residuals` evaluates every measured run of shared/validation and writes, per stack
and GPU generation, the 10th and 90th percentiles of `predicted / measured - 1` for step time and for peak reserved
memory into data/residuals.json; the planner reads them here. A measured value then lies in
`[predicted / (1 + q90), predicted / (1 + q10)]` for 80 % of the runs of that stack on that generation. Where no
measured run of the stack on that generation exists, the interval falls back to the widest spread seen anywhere
(for step time widened by half) and says so.

The residuals also record what kinds of model those runs cover (`covers`: the most routed experts of their MoE
rows, multi-latent attention, the longest sequence). A step-time interval for a model outside that — a MoE with more
experts than any measured run (their router, permutation, dispatch fan-out and small grouped GEMMs were never
exercised), MLA where no run had it, more than twice the longest measured sequence (attention's share of the layer
roughly doubles with each doubling) — is not taken from those runs: it falls back as above and names what is not
covered. Memory intervals keep the stack's spread (what the byte counts miss is the allocator, not the model).

An effect a stack's cost model leaves out but published runs show (data/stacks.json `unmodelled`: the host cost of
narrow MoE layers run eagerly under Megatron-core, up to 1.51x the predicted step) widens the step-time interval of
the models it applies to as far as those runs went, and the basis says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from app.planner import catalog
from app.planner import stack as software
from app.planner.results import Interval
from app.planner.specs import ModelSpec

MIN_RUNS = 5  # fewer measured runs than this cannot set an 80 % interval on their own


@dataclass(frozen=True, slots=True)
class Spread:
    q10: float
    q90: float
    runs: int
    basis: str


@cache
def _table() -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    table: dict[str, dict[str, dict[str, dict[str, float]]]] = catalog.load_data("residuals.json")["residuals"]
    return table


def _fallback(kind: str) -> tuple[float, float]:
    """Step time: the widest spread of any measured stack x generation, widened by half (a stack on a GPU it was
    never measured on can be off in its kernels' rates). Memory: the spread of the measured memory itself — what the
    byte counts miss is the allocator's behaviour, measured there — so a stack without its own memory measurements
    is not called out of memory on a wider margin than the model has shown."""
    lows, highs = [], []
    for gens in _table().values():
        for entry in gens.values():
            if kind in entry and entry[kind]["runs"] >= MIN_RUNS:
                lows.append(entry[kind]["q10"])
                highs.append(entry[kind]["q90"])
    low, high = (min(lows), max(highs)) if lows else (-0.2, 0.2)
    widen = 1.5 if kind == "time" else 1.0
    return widen * low, widen * high


def traits(model: ModelSpec) -> dict[str, float]:
    """What a model exercises beyond the stack and the GPU: how many routed experts, multi-latent attention, its
    sequence length."""
    return {
        "experts": float(model.num_experts or 0) if model.is_moe else 0.0,
        "mla": float(bool(model.multi_latent_attention)),
        "seq": float(model.seq_length),
    }


def coverage(t: list[dict[str, float]]) -> dict[str, float]:
    """What the measured runs of one stack x generation cover, from their `traits` (written into residuals.json by
    accuracy.py)."""
    return {
        "max_experts": max((x["experts"] for x in t), default=0.0),
        "mla": max((x["mla"] for x in t), default=0.0),
        "max_seq": max((x["seq"] for x in t), default=0.0),
    }


def uncovered(model: ModelSpec, covers: dict[str, Any]) -> list[str]:
    """What `model` has that the measured runs behind an interval do not (empty: covered)."""
    t, out = traits(model), []
    if t["experts"] > covers["max_experts"]:
        seen = f"its MoE runs have at most {covers['max_experts']:.0f}" if covers["max_experts"] else "no MoE runs"
        out.append(f"a MoE of {t['experts']:.0f} experts ({seen})")
    if t["mla"] and not covers["mla"]:
        out.append("multi-latent attention (none in its runs)")
    if t["seq"] > 2 * covers["max_seq"]:
        out.append(f"sequence length {t['seq']:,.0f} (its runs reach {covers['max_seq']:,.0f})")
    return out


def spread(stack: str, generation: str, kind: str, label: str, model: ModelSpec | None = None) -> Spread:
    """The residual spread of `kind` ('time' or 'memory') for this stack on this GPU generation; for step time,
    and a `model` outside what those runs cover, the fallback spread naming what is not covered (memory keeps the
    stack's spread whatever the model). A step-time spread reaches as far as the published runs of an effect the
    stack's model leaves out went, where it applies to `model` (the stack's `unmodelled`)."""
    measured = software.get(stack).residuals_of
    if measured:  # the same code path as another stack's measured runs: those, under that stack's name
        label = f"{measured} (the same code path)"
    s = _measured_spread(measured or stack, generation, kind, label, model)
    if kind != "time" or model is None:
        return s
    for effect in software.get(stack).unmodelled:
        if effect.applies(model) and effect.step_q10 < s.q10:
            s = Spread(
                effect.step_q10,
                s.q90,
                s.runs,
                f"{s.basis}; widened for {effect.name} (hidden {model.hidden_size} < {effect.moe_hidden_below}) to "
                f"{1 / (1 + effect.step_q10):.2f}x the predicted step, as far as published runs of such layouts went",
            )
    return s


def _measured_spread(stack: str, generation: str, kind: str, label: str, model: ModelSpec | None) -> Spread:
    entry: dict[str, Any] | None = _table().get(stack, {}).get(generation, {}).get(kind)
    runs = int(entry["runs"]) if entry else 0
    measured = entry is not None and runs >= MIN_RUNS
    covers = entry.get("covers") if entry is not None and measured and kind == "time" else None
    missing = uncovered(model, covers) if model is not None and covers else []
    if entry is not None and measured and not missing:
        what = "step times" if kind == "time" else "peak reserved memory"
        return Spread(
            entry["q10"], entry["q90"], runs, f"from {runs} measured runs of {label} on {generation.title()} ({what})"
        )
    if missing:
        why = f"the {runs} measured runs of {label} on {generation.title()} do not cover {'; '.join(missing)}"
    else:
        what = "run" if kind == "time" else "memory"
        why = f"no measured {what} of {label} on {generation.title()} in the validation set"
    low, high = _fallback(kind)
    return Spread(low, high, 0, f"{why}: the widest spread of any stack{', widened by half' if kind == 'time' else ''}")


def interval(predicted: float, s: Spread) -> Interval:
    """Where the measured value lies for 80 % of the runs, given the prediction."""
    return Interval(low=predicted / (1 + s.q90), high=predicted / (1 + s.q10), basis=s.basis)


def upper_factor(s: Spread) -> float:
    """Factor from a predicted value to the upper end of its interval."""
    return 1 / (1 + s.q10)
