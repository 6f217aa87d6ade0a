"""Full-search wall time on this machine: seconds and candidates per second.

    python benchmarks/search_speed.py [--repeat 5]

Targets (issues 2, 7 and 10): GPT-3 175B on 1,024 A100-80GB under 1 s; a 1T model on 4,096 H100 under 5 s; a
1T-class MoE (Kimi-K2-like, 1.03T total) on 16,384 H100 under 5 s. Reports the median of --repeat runs, wall and
CPU seconds (the search is single-threaded: on a machine busy with other work, CPU seconds are what it would take
on an idle one; the targets are checked on them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.planner import PlanRequest, plan

CASES = {
    "GPT-3 175B on 1,024 A100-80GB (128 x 8)": (
        {
            "model": "gpt3-175b",
            "cluster": {"num_nodes": 128, "gpu": "A100-80GB"},
            "training": {"global_batch_size": 1536},
        },
        1.0,
    ),
    "Megatron 1T on 4,096 H100 (512 x 8)": (
        {
            "model": "megatron-1t",
            "cluster": {"num_nodes": 512, "gpu": "H100-SXM"},
            "training": {"global_batch_size": 3072},
        },
        5.0,
    ),
    "Kimi-K2-like 1T MoE on 16,384 H100 (2048 x 8)": (
        {
            "model": "kimi-k2-like",
            "cluster": {"num_nodes": 2048, "gpu": "H100-SXM"},
            "training": {"global_batch_size": 16384},
        },
        5.0,
    ),
    "Llama-2 70B on 256 H100 (32 x 8)": (
        {
            "model": "llama-2-70b",
            "cluster": {"num_nodes": 32, "gpu": "H100-SXM"},
            "training": {"global_batch_size": 1024},
        },
        0.1,
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    head = f"{'case':<48} {'wall s':>7} {'cpu s':>7} {'target s':>9} {'candidates':>10} {'skipped':>8}"
    print(f"{head} {'feasible':>8}  best")
    ok = True
    for name, (request, target) in CASES.items():
        req = PlanRequest(**request)
        times, cpu, result = [], [], None
        for _ in range(args.repeat):
            start, start_cpu = time.perf_counter(), time.process_time()
            result = plan(req)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        assert result is not None
        median, median_cpu = statistics.median(times), statistics.median(cpu)
        ok &= median_cpu < target
        best = result.plans[0].why[0][:60] if result.plans else "no plan"
        s = result.stats
        print(
            f"{name:<48} {median:>7.3f} {median_cpu:>7.3f} {target:>9.1f} {s.candidates:>10} {s.skipped:>8} "
            f"{s.feasible:>8}  {best}"
        )
    print("all under target" if ok else "SOME OVER TARGET")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
