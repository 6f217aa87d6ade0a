"""Prediction intervals from the validation residuals of each stack x GPU generation.

`benchmarks/accuracy.py --write-residuals` evaluates every measured run of shared/validation and writes, per stack
and GPU generation, the 10th and 90th percentiles of `predicted / measured - 1` for step time and for peak reserved
memory into data/residuals.json; the planner reads them here. A measured value then lies in
`[predicted / (1 + q90), predicted / (1 + q10)]` for 80 % of the runs of that stack on that generation. Where no
measured run of the stack on that generation exists, the interval falls back to the widest spread seen anywhere
(for step time widened by half) and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from app.planner import catalog
from app.planner.results import Interval

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


def spread(stack: str, generation: str, kind: str, label: str) -> Spread:
    """The residual spread of `kind` ('time' or 'memory') for this stack on this GPU generation."""
    entry = _table().get(stack, {}).get(generation, {}).get(kind)
    if entry and entry["runs"] >= MIN_RUNS:
        what = "step times" if kind == "time" else "peak reserved memory"
        return Spread(
            entry["q10"],
            entry["q90"],
            int(entry["runs"]),
            f"from {int(entry['runs'])} measured runs of {label} on {generation.title()} ({what})",
        )
    low, high = _fallback(kind)
    return Spread(
        low,
        high,
        0,
        f"no measured {'run' if kind == 'time' else 'memory'} of {label} on {generation.title()} in the validation "
        f"set: the widest spread of any stack{', widened by half' if kind == 'time' else ''}",
    )


def interval(predicted: float, s: Spread) -> Interval:
    """Where the measured value lies for 80 % of the runs, given the prediction."""
    return Interval(low=predicted / (1 + s.q90), high=predicted / (1 + s.q10), basis=s.basis)


def upper_factor(s: Spread) -> float:
    """Factor from a predicted value to the upper end of its interval."""
    return 1 / (1 + s.q10)
