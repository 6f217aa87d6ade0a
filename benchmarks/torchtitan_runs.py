"""torchtitan's published Llama 3.1 runs on H100, predicted on the planner's torchtitan stacks (out of sample).

    python benchmarks/torchtitan_runs.py

Source: pytorch/torchtitan@b5bcd76c66d0acb1a08b176d9639425bc55e0b2a benchmarks/llama3_h100_202412_torchtitan.md,
Tables 1-6 (lines 23-69): torchtitan 9dec370 with torch 1963fc8 on Meta's Grand Teton H100 (96 GB HBM2e, 500 W:
the catalogue's H100-96GB-500W), TPS/GPU read at iteration 90, memory the maximum over ranks. None of these runs
set a constant (data/stacks.json `torchtitan`: each constant was measured on another stack), so this is a test of
the stack's model, not a fit. Each row's stated layout is evaluated as given; what a table leaves unstated follows
torchtitan's defaults at 9dec370: the per-layer automatic pipeline split counts the embedding and the output as
layers (as Megatron's account-for flags do), PyTorch's all-gather CP, `pipeline_parallel_microbatches` = PP, and
FSDP's float8 all-gather only where a config enables it (the 405B one, train_configs/llama3_405b.toml:59).
Four of the rows are also in the answer key (benchmarks/data/expert_recipes.json).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.planner import catalog
from app.planner.estimate import evaluate
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec

GPU = "H100-96GB-500W"
SOURCE = "pytorch/torchtitan@b5bcd76c benchmarks/llama3_h100_202412_torchtitan.md"

# (line, model, seq, gpus, stack, precision, recompute, parallel fields, local batch, tokens/s/GPU, GiB)
ATP = {"tp_comm_overlap": True}  # async TP
RUNS: list[tuple[int, str, int, int, str, str, str, dict[str, Any], int, float, float]] = [
    # Table 1: FSDP, 8 GPUs, local batch 2, selective (op) AC
    (27, "llama-3-8b", 8192, 8, "torchtitan-eager", "bf16", "selective", {}, 2, 5762, 82.4),
    (28, "llama-3-8b", 8192, 8, "torchtitan", "bf16", "selective", {}, 2, 6667, 77.0),
    (29, "llama-3-8b", 8192, 8, "torchtitan", "fp8", "selective", {}, 2, 8532, 76.8),
    # Table 2: FSDP x CP, compile + Float8, full AC, local batch 1
    (35, "llama-3-8b", 32768, 8, "torchtitan", "fp8", "full", {}, 1, 3890, 83.9),
    (36, "llama-3-8b", 65536, 8, "torchtitan", "fp8", "full", {"cp": 2}, 1, 2540, 84.2),
    (37, "llama-3-8b", 131072, 8, "torchtitan", "fp8", "full", {"cp": 4}, 1, 1071, 84.0),
    (38, "llama-3-8b", 262144, 8, "torchtitan", "fp8", "full", {"cp": 8}, 1, 548, 84.5),
    # Table 3: FSDP, 128 GPUs, local batch 2, selective (op) AC
    (44, "llama-3-8b", 8192, 128, "torchtitan-eager", "bf16", "selective", {}, 2, 5605, 67.0),
    (45, "llama-3-8b", 8192, 128, "torchtitan", "bf16", "selective", {}, 2, 6514, 62.0),
    (46, "llama-3-8b", 8192, 128, "torchtitan", "fp8", "selective", {}, 2, 8380, 61.8),
    # Table 4: FSDP 32 x TP 8, compile + Float8, full AC, local batch 16
    (52, "llama-3-70b", 8192, 256, "torchtitan", "fp8", "full", {"tp": 8}, 16, 829, 71.9),
    (53, "llama-3-70b", 8192, 256, "torchtitan", "fp8", "full", {"tp": 8, **ATP}, 16, 876, 67.6),
    # Table 5: FSDP 8 x TP 8 x PP 8, compile + Float8 + async TP, full AC, local batch 32
    (59, "llama-3-405b", 8192, 512, "torchtitan", "fp8", "full", {"tp": 8, "pp": 8, **ATP}, 32, 100, 82.5),
    (60, "llama-3-405b", 8192, 512, "torchtitan", "fp8", "full", {"tp": 8, "pp": 8, "vpp": 2, **ATP}, 32, 128, 72.7),
    # Table 6: TP 8 x PP 8 x FSDP x CP, 1F1B, compile + Float8 + async TP, full AC, local batch 8
    (66, "llama-3-405b", 32768, 512, "torchtitan", "fp8", "full", {"tp": 8, "pp": 8, **ATP}, 8, 76, 75.3),
    (67, "llama-3-405b", 65536, 512, "torchtitan", "fp8", "full", {"tp": 8, "pp": 8, "cp": 2, **ATP}, 8, 47, 75.9),
    (68, "llama-3-405b", 131072, 512, "torchtitan", "fp8", "full", {"tp": 8, "pp": 8, "cp": 4, **ATP}, 8, 31, 77.1),
    (69, "llama-3-405b", 262144, 512, "torchtitan", "fp8", "full", {"tp": 8, "pp": 8, "cp": 8, **ATP}, 8, 16, 84.9),
]


def evaluate_run(run: tuple[int, str, int, int, str, str, str, dict[str, Any], int, float, float]) -> dict[str, Any]:
    line, name, seq, gpus, stack, precision, recompute, fields, local, tps, gib = run
    model = ModelSpec(**{**catalog.model_fields(name), "seq_length": seq})
    cluster = ClusterSpec(num_nodes=gpus // 8, gpus_per_node=8, gpu=GPU)
    tp, pp, cp = fields.get("tp", 1), fields.get("pp", 1), fields.get("cp", 1)
    dp = gpus // (tp * pp * cp)
    microbatches = pp if pp > 1 else 1  # pipeline_parallel_microbatches defaults to the PP degree
    training = TrainingSpec(
        global_batch_size=local * dp,
        precision=precision,
        framework="pytorch-fsdp",
        stack=stack,
        fp8_recipe="tensorwise" if precision == "fp8" else None,
    )
    par = ParallelConfig(
        dp=dp,
        micro_batch_size=local // microbatches,
        recompute=recompute,
        sequence_parallel=tp > 1,
        cp_comm_type="all_gather",
        account_for_embedding_in_pipeline_split=pp > 1,
        account_for_loss_in_pipeline_split=pp > 1,
        schedule="interleaved" if fields.get("vpp", 1) > 1 else "1f1b",
        fp8_param_gather=name == "llama-3-405b",
        grad_reduce_dtype="fp32",
        **fields,
    )
    est = evaluate(model, cluster, training, par)
    predicted = est.time.tokens_per_s / gpus
    return {
        "source": f"{SOURCE}:{line}",
        "run": f"{name} {seq // 1024}K on {gpus} {stack} {precision} "
        + " ".join(f"{k}{v}" for k, v in fields.items() if k != "tp_comm_overlap")
        + (" async-TP" if fields.get("tp_comm_overlap") else ""),
        "feasible": est.feasible,
        "measured_tps": tps,
        "predicted_tps": predicted,
        "tps_error": predicted / tps - 1,
        "measured_gib": gib,
        "predicted_gib": est.memory.peak_bytes / 2**30,
        "gib_error": est.memory.peak_bytes / 2**30 / gib - 1,
    }


def main() -> int:
    rows = [evaluate_run(r) for r in RUNS]
    print(f"{'run':<62} {'tok/s/GPU':>9} {'pred':>7} {'err':>6}   {'GiB':>5} {'pred':>6} {'err':>6}")
    for r in rows:
        print(
            f"{r['run']:<62} {r['measured_tps']:>9,.0f} {r['predicted_tps']:>7,.0f} {100 * r['tps_error']:>+5.0f}%"
            f"   {r['measured_gib']:>5.1f} {r['predicted_gib']:>6.1f} {100 * r['gib_error']:>+5.0f}%"
            + ("" if r["feasible"] else "  (called infeasible)")
        )
    tps = [abs(r["tps_error"]) for r in rows]
    gib = [abs(r["gib_error"]) for r in rows]
    print(
        f"{len(rows)} runs: tokens/s median |error| {100 * statistics.median(tps):.0f}%, max {100 * max(tps):.0f}%; "
        f"peak memory median |error| {100 * statistics.median(gib):.0f}%, max {100 * max(gib):.0f}%; "
        f"called infeasible: {sum(not r['feasible'] for r in rows)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
