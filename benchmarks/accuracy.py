"""Predicted vs published: iteration time for every run with a measured time (or TFLOP/s), and the memory rows.

    python benchmarks/accuracy.py            # table + summary
    python benchmarks/accuracy.py --json     # machine-readable

Iteration time: each published run is evaluated with `estimate` (app/planner/validation.py says how each row's
unstated settings were chosen, from the run's own paper). The memory rows of Korthikanti et al. Fig. 1 are
analytical figures (18 bytes/parameter for the layers, activations from their Table 2), not measurements: we
compare our activation memory with theirs (same formula family) and show our full peak, which adds what a real
run also holds (fp16 master copies as Megatron keeps them, embeddings, logits, buffers, CUDA context).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.planner import activations as act
from app.planner import validation
from app.planner.estimate import evaluate
from app.planner.layout import microbatches_in_flight

GiB = 2**30


def time_rows(runs: list[validation.PublishedRun]) -> list[dict[str, object]]:
    rows = []
    for run in runs:
        if run.iter_s is None:
            continue
        est = evaluate(run.model, run.cluster, run.training, run.parallel)
        rows.append(
            {
                "name": run.name,
                "from": run.derived_from,
                "measured_s": run.iter_s,
                "predicted_s": est.time.step_s,
                "error": est.time.step_s / run.iter_s - 1,
                "mfu": est.time.mfu,
            }
        )
    return rows


def memory_rows(runs: list[validation.PublishedRun]) -> list[dict[str, object]]:
    rows = []
    for run in runs:
        if run.mem_gib is None:
            continue
        par, m = run.parallel, run.model
        layers = m.num_layers // par.pp
        in_flight = microbatches_in_flight(par, 0, run.training.global_batch_size // (par.micro_batch_size * par.dp))
        ours_act = act.layer_bytes(m, par, run.training, moe=False) * layers * in_flight / GiB
        layer_params = 12 * m.num_layers * m.hidden_size**2 / (par.tp * par.pp)
        theirs_act = run.mem_gib - 18 * layer_params / GiB
        est = evaluate(run.model, run.cluster, run.training, par)
        rows.append(
            {
                "name": run.name,
                "published_total_gib": run.mem_gib,
                "published_activations_gib": theirs_act,
                "our_activations_gib": ours_act,
                "activation_error": ours_act / theirs_act - 1,
                "our_peak_gib": est.memory.peak_bytes / GiB,
            }
        )
    return rows


def summary(errors: list[float]) -> dict[str, float]:
    abs_err = [abs(e) for e in errors]
    return {"n": len(abs_err), "mean_abs": statistics.mean(abs_err), "max_abs": max(abs_err)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = validation.load()
    times, mems = time_rows(runs), memory_rows(runs)
    groups = {
        "all": [float(r["error"]) for r in times],  # type: ignore[arg-type]
        "Megatron-LM (Korthikanti 2022, Narayanan 2021)": [
            float(r["error"]) for r in times if "MT-NLG" not in str(r["name"]) and "BLOOM" not in str(r["name"])
        ],  # type: ignore[arg-type]
        "Megatron-DeepSpeed (BLOOM, MT-NLG)": [
            float(r["error"]) for r in times if "MT-NLG" in str(r["name"]) or "BLOOM" in str(r["name"])
        ],  # type: ignore[arg-type]
    }
    report = {
        "iteration_time": times,
        "memory": mems,
        "summary": {k: summary(v) for k, v in groups.items() if v},
        "activation_summary": summary([float(r["activation_error"]) for r in mems]),
    }  # type: ignore[arg-type]
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'run':<52} {'from':<15} {'measured s':>10} {'predicted s':>11} {'error':>7} {'MFU':>6}")
    for r in times:
        print(
            f"{r['name']!s:<52} {r['from']!s:<15} {r['measured_s']:>10.2f} {r['predicted_s']:>11.2f} "
            f"{100 * float(r['error']):>+6.1f}% {100 * float(r['mfu']):>5.1f}%"
        )  # type: ignore[arg-type]
    for name, s in report["summary"].items():  # type: ignore[union-attr]
        print(
            f"iteration time, {name}: mean |error| {100 * s['mean_abs']:.2f}%, max {100 * s['max_abs']:.2f}% "
            f"over {s['n']} runs"
        )
    print()
    print(
        f"{'memory row':<52} {'paper act GiB':>13} {'our act GiB':>11} {'error':>7} {'paper total':>11} {'our peak':>9}"
    )
    for r in mems:
        print(
            f"{r['name']!s:<52} {r['published_activations_gib']:>13.2f} {r['our_activations_gib']:>11.2f} "
            f"{100 * float(r['activation_error']):>+6.1f}% {r['published_total_gib']:>11.2f} {r['our_peak_gib']:>9.2f}"
        )  # type: ignore[arg-type]
    s = report["activation_summary"]
    print(
        f"activation memory vs Korthikanti Fig. 1: mean |error| {100 * s['mean_abs']:.2f}%, "  # type: ignore[index]
        f"max {100 * s['max_abs']:.2f}%"
    )  # type: ignore[index]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
