"""Refit a stack x generation's constants on its own measured rows (how the values in app/planner/data/stacks.json
were found; their `evidence` says which rows).

    pip install scipy        # the only extra need; not a test dependency
    python benchmarks/fit_constants.py dgxc       # megatron-core x Hopper + te-fused attention on the 88 dgxc rows
    python benchmarks/fit_constants.py foundry    # llm-foundry x Ampere + triton-flash on the 139 MosaicML rows
    python benchmarks/fit_constants.py h200       # deepspeed-hf x Hopper on the 9 H200 rows (least squares)
    python benchmarks/fit_constants.py a100       # megatron-core x Ampere on the Megatron-LM A100 rows
    python benchmarks/fit_constants.py maxtext    # maxtext x Hopper on the 12 dgxc MaxText rows

Each fit varies only the constants of one stack on one generation, bounded to physical ranges (fractions of a rate
in (0, 1]), and minimises median |error| + 0.5 p90 + 0.25 max over that family's rows (or the sum of squares for the
small families). It prints the values and the errors they give; it never writes the data file: a person copies the
values, with their evidence, into stacks.json, and benchmarks/accuracy.py checks them against every family.
"""

from __future__ import annotations

import copy
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.planner import catalog, stack, validation
from app.planner.estimate import time_estimate
from app.planner.specs import TrainingSpec

FRACTIONS = {"gemm_fraction", "gemm_fp8_fraction", "overlap_contention", "forward", "backward"}
Path_ = tuple[str, ...]


def _with_stacks(data: dict[str, Any]) -> None:
    """Make the planner read `data` as stacks.json (caches cleared)."""
    original = _ORIGINAL_LOAD

    def load(name: str) -> dict[str, Any]:
        return copy.deepcopy(data) if name == "stacks.json" else original(name)

    catalog.load_data = load  # type: ignore[assignment]
    for cache in (stack._stacks, stack._kernels, stack._defaults):
        cache.cache_clear()


_ORIGINAL_LOAD: Callable[[str], dict[str, Any]] = catalog.load_data


def errors(runs: list[validation.MeasuredRun], family: str, stacks: tuple[str, ...] | None) -> list[float]:
    out = []
    for r in runs:
        if r.family != family or (stacks and r.training.software.name not in stacks):
            continue
        training = TrainingSpec.model_validate(r.training.model_dump())  # re-reads the stack (no cached one)
        t = time_estimate(r.model.model_copy(), r.cluster, training, r.parallel)  # a fresh model: no stale memo
        out.append(t.step_s / r.step_s - 1)
    return out


def robust(errs: list[float]) -> float:
    a = sorted(abs(e) for e in errs)
    return statistics.median(a) + 0.5 * a[int(0.9 * len(a)) - 1] + 0.25 * a[-1]


def squares(errs: list[float]) -> float:
    return sum(e * e for e in errs)


def _apply(base: dict[str, Any], names: list[tuple[Path_, float]], x: Any) -> dict[str, Any]:
    d = copy.deepcopy(base)
    for (path, _), v in zip(names, x, strict=True):
        node = d
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = float(v)
    return d


def fit(family: str, names: list[tuple[Path_, float]], score: Callable[[list[float]], float],
        stacks: tuple[str, ...] | None = None) -> dict[str, float]:  # fmt: skip
    import numpy as np
    from scipy.optimize import minimize

    runs, _ = validation.load()
    base = catalog.load_data("stacks.json")

    def objective(x: Any) -> float:
        if any(v <= 0 or (path[-1] in FRACTIONS and v > 1) for (path, _), v in zip(names, x, strict=True)):
            return 10.0
        _with_stacks(_apply(base, names, x))
        return score(errors(runs, family, stacks))

    res = minimize(objective, np.array([v for _, v in names]), method="Nelder-Mead",
                   options={"maxiter": 300, "xatol": 1e-3, "fatol": 1e-4})  # fmt: skip
    _with_stacks(_apply(base, names, res.x))
    e = errors(runs, family, stacks)
    a = sorted(abs(v) for v in e)
    values = {"/".join(p): float(f"{v:.4g}") for (p, _), v in zip(names, res.x, strict=True)}
    print(family, values)
    print(f"  median {100 * statistics.median(a):.1f}%  p90 {100 * a[int(0.9 * len(a)) - 1]:.1f}%  "
          f"max {100 * a[-1]:.1f}%  bias {100 * statistics.median(e):+.1f}%")  # fmt: skip
    _with_stacks(base)
    return values


def main(which: str) -> int:
    hopper, ampere = ("generations", "hopper"), ("generations", "ampere")
    if which == "dgxc":
        s, k = ("stacks", "megatron-core", *hopper), ("attention_kernels", "te-fused", *hopper)
        fit("dgxc-h100", [((*s, "gemm_fraction"), 0.8), ((*s, "gemm_fp8_fraction"), 0.75),
                          ((*k, "forward"), 0.55), ((*k, "backward"), 0.45), ((*s, "overlap_contention"), 0.1)],
            robust)  # fmt: skip
    elif which == "foundry":
        s, k = ("stacks", "llm-foundry", *ampere), ("attention_kernels", "triton-flash", *ampere)
        fit("llm-foundry-a100", [((*s, "gemm_fraction"), 0.85), ((*k, "forward"), 0.52), ((*k, "backward"), 0.27),
                                 ((*k, "seq_half"), 772.0), ((*s, "host_op_s"), 1e-5),
                                 ((*s, "overlap_contention"), 0.3), ((*s, "kernel_overhead_s"), 4e-6)],
            robust)  # fmt: skip
    elif which == "h200":
        s = ("stacks", "deepspeed-hf")
        fit("h200-deepspeed", [((*s, *hopper, "gemm_fraction"), 0.85), ((*s, *hopper, "host_op_s"), 3e-5),
                               ((*s, *hopper, "host_step_s"), 0.03), ((*s, "costs", "zero3_module_hook_s"), 6e-4)],
            squares)  # fmt: skip
    elif which == "maxtext":
        s = ("stacks", "maxtext", *hopper)
        fit("maxtext-h100", [((*s, "gemm_fraction"), 0.8), ((*s, "gemm_fp8_fraction"), 0.7),
                             ((*s, "overlap_contention"), 0.1)], robust)  # fmt: skip
    elif which == "a100":
        fit("megatron-a100", [(("stacks", "megatron-core", *ampere, "gemm_fraction"), 0.84)], squares,
            stacks=("megatron-core",))  # fmt: skip
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
