"""Published measured throughputs that neither calibrate the planner (../shared/validation) nor sit in the answer key
(benchmarks/data/expert_recipes.json): each run's stated layout, evaluated as given, against what was measured.

    python benchmarks/out_of_sample.py              # one line per run and the summary
    python benchmarks/out_of_sample.py --json

Nothing here sets a constant: this is where the model is checked on stacks, GPUs and models it was not fitted on.
Rows (collected 2026-12-07 by a read-only study; sources at the commits named below, each row with its line):
- MosaicML llm-foundry on H100 (the validation set has A100 only): FSDP FULL_SHARD, BF16, MPT 1B-70B at 2K-64K.
- torchtitan's June 2025 async-TP benchmark (Meta's 500 W H100) and a June 2025 H200 run, both after the 2024
  benchmark that benchmarks/torchtitan_runs.py evaluates.
- Megatron-Bridge's performance tables: layouts, batch sizes or precisions of answer-key models that the answer key
  does not measure (each starts from the answer-key recipe of its model and GPU and changes what the table states).
- NeMo's long-context table (Llama-2 7B FP8 with CP on H100): it publishes TFLOP/s, converted here to tokens/s with
  NeMo's formula as it stood then (full s^2 attention, before the causal discount of 2025-08): if the table counted
  causal attention the converted throughputs are lower, so these rows are the least certain; the micro-batch size and
  recomputation are unstated, and the fastest feasible of none / selective / full is taken.
Assumptions where a source is silent are in each row's `note`.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import expert_recipes

from app.planner import catalog, space
from app.planner.estimate import Estimate, evaluate
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec

MB = "NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a docs/performance-summary-archive.md"
LF = "mosaicml/llm-foundry@8c8dd48f72168c5d51e2f7b151595892a8fba43d scripts/train/benchmarking/README.md"
TITAN = "pytorch/torchtitan@b5bcd76c66d0acb1a08b176d9639425bc55e0b2a benchmarks"
TTA = f"{TITAN}/asyncTP_llama3_h100_2025-06_torchtitan.md"
TTH = f"{TITAN}/llama3-8b_h200_202506_trainy-whitefiber.md"
NL = "NVIDIA/NeMo@8cfedd7203462cb251a914e700e5605444277561 docs/source/performance/performance_long_sequence.md"

# MPT shapes (llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml, as the validation set encodes them)
MPT = {
    "1b": {"num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16},
    "7b": {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32},
    "13b": {"num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40},
    "30b": {"num_layers": 48, "hidden_size": 7168, "num_attention_heads": 56},
    "70b": {"num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64},
}
Case = tuple[str, ModelSpec, ClusterSpec, TrainingSpec, ParallelConfig]  # (variant, model, cluster, training, par)
UNSTATED = "unstated"  # a Megatron-Bridge row's recomputation the table does not give: every level the search tries


def rows() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line, size, seq, gpus, mbs, gbs, ac, tps in [
        (138, "1b", 2048, 8, 14, 112, False, 45455),
        (118, "7b", 2048, 8, 6, 48, False, 10643),
        (116, "7b", 8192, 8, 8, 128, True, 6935),
        (114, "7b", 65536, 8, 1, 16, True, 1956),
        (106, "13b", 32768, 8, 1, 24, True, 1976),
        (100, "30b", 8192, 8, 1, 168, True, 1384),
        (98, "70b", 2048, 64, 8, 2048, True, 1039),
        (75, "70b", 2048, 512, 8, 4096, True, 1007),
    ]:
        out.append({
            "id": f"mpt-{size}-{seq // 1024}k-h100x{gpus}", "kind": "mpt", "source": f"{LF}:{line}", "size": size,
            "seq": seq, "gpus": gpus, "mbs": mbs, "gbs": gbs, "ac": ac, "measured_tps": tps,
            "note": "amp_bf16, FSDP FULL_SHARD; the table does not say whether Triton or flash attention ran",
        })  # fmt: skip
    for line, name, gpus, local, prec, atp, tps, rec in [
        (24, "llama-3-70b", 256, 16, "bf16", False, 597.3, "full"),
        (24, "llama-3-70b", 256, 16, "bf16", True, 652.4, "full"),
        (25, "llama-3-70b", 256, 16, "fp8", True, 942.4, "full"),
        (32, "llama-3-8b", 64, 12, "bf16", False, 4378, "selective"),
        (33, "llama-3-8b", 64, 12, "fp8", True, 5570.1, "selective"),
    ]:
        out.append({
            "id": f"tt-{name}-{prec}-{'async' if atp else 'vanilla'}TP-h100x{gpus}", "kind": "tt",
            "source": f"{TTA}:{line}", "name": name, "gpus": gpus, "gpu": "H100-96GB-500W", "tp": 8, "local": local,
            "precision": prec, "atp": atp, "rec": rec, "fp8_ag": False, "measured_tps": tps,
            "note": "FSDP x TP8, torch.compile; FP8 all-gather off",
        })  # fmt: skip
    for line, gpus, tps in [(46, 32, 10938), (47, 64, 10753)]:
        out.append({
            "id": f"tt-llama-3-8b-fp8-h200x{gpus}", "kind": "tt", "source": f"{TTH}:{line}", "name": "llama-3-8b",
            "gpus": gpus, "gpu": "H200", "tp": 1, "local": 2, "precision": "fp8", "atp": False, "rec": "selective",
            "fp8_ag": True, "measured_tps": tps, "note": "FSDP only, float8 tensorwise with FP8 all-gather",
        })  # fmt: skip
    bridge = [
        ("mb-llama3-8b-h100x8-fp8cs-fsdp", 589, "megatron-bridge/llama3-8b/h100x8/fp8cs", 14451, {},
         {"global_batch_size": 128},
         {"megatron_fsdp": "optim_grads_params", "recompute": "none", "recompute_method": None,
          "recompute_num_layers": None, "micro_batch_size": 1},
         "25.11 table, Megatron-FSDP 8; recompute unstated: none assumed"),
        ("mb-deepseek-v3-h100x1024-gbs8192", 631, "megatron-bridge/deepseek-v3/h100x1024/fp8cs", 1297, {},
         {"global_batch_size": 8192}, {}, "25.09 table; the answer-key recipe runs GBS 16384 (not measured)"),
        ("mb-qwen3-30b-h100x16-pp2vp12", 445, "megatron-bridge/qwen3-30b-a3b/h100x16/fp8cs", 9058, {}, {},
         {"pp": 2, "vpp": 12, "ep": 8, "schedule": "interleaved"}, "26.04 table: TP1 PP2 VP12 EP8"),
        ("mb-qwen3-235b-h100x256-gbs2048", 594, "megatron-bridge/qwen3-235b-a22b/h100x256/fp8cs", 1575, {},
         {"global_batch_size": 2048}, {}, "25.11 table: GBS 2048"),
        ("mb-qwen3-235b-b200x256-pp8-novp", 257, "megatron-bridge/qwen3-235b-a22b/b200x256/fp8mx", 3776, {}, {},
         {"vpp": 1, "schedule": "1f1b", "moe_ep_overlap": False},
         "26.04.01 table: TP1 PP8 EP8 without interleaving; EP overlap off (Megatron needs VP > 1 for it)"),
        ("mb-llama3.1-405b-b200x128-fp8cs-gbs64", 579, "megatron-bridge/llama3.1-405b/b200x128/fp8mx", 661, {},
         {"global_batch_size": 64, "fp8_recipe": "tensorwise"}, {"tp": 4, "pp": 8, "cp": 2, "vpp": 8},
         "25.11 table: FP8 current scaling, GBS 64, TP4 PP8 CP2 VP8"),
        ("mb-deepseek-v3-gb200x256-bf16", 568, "megatron-bridge/deepseek-v3/gb200x256/fp8mx", 3139, {},
         {"precision": "bf16", "fp8_recipe": None}, {"fp8_param_gather": False, "recompute": UNSTATED},
         "25.11 table: BF16; the BF16 recipe's recomputation is not published: the fastest that fits"),
        ("mb-qwen3-235b-gb200x256-bf16", 572, "megatron-bridge/qwen3-235b-a22b/gb200x256/fp8mx", 4916, {},
         {"precision": "bf16", "fp8_recipe": None}, {"fp8_param_gather": False}, "25.11 table: BF16"),
        ("mb-llama3-70b-h100x32-sft-fp8", 179, "megatron-bridge/llama3-70b/h100x64/fp8cs", 1638, {"num_nodes": 4},
         {"global_batch_size": 32, "seq_length": 4096}, {"tp": 4, "pp": 4, "vpp": 5},
         "26.06 SFT table (packed sequences of 4096): TP4 PP4 VP5 on 32 H100, GBS 32"),
    ]  # fmt: skip
    for rid, line, base, tps, cluster, training, parallel, note in bridge:
        out.append({
            "id": rid, "kind": "bridge", "source": f"{MB}:{line}", "base": base, "measured_tps": tps,
            "cluster": cluster, "training": training, "parallel": parallel, "note": note,
        })  # fmt: skip
    for line, seq_k, gpus, gbs, tp, dp, cp, tflops in [
        (161, 4, 4, 1024, 1, 4, 1, 768),
        (197, 32, 32, 128, 2, 8, 2, 610),
        (221, 128, 128, 32, 4, 8, 4, 555),
        (257, 1024, 1024, 4, 8, 4, 32, 536),
    ]:
        out.append({
            "id": f"nemo-llama2-7b-{seq_k}k-cp{cp}-h100x{gpus}", "kind": "nemo-cp", "source": f"{NL}:{line}",
            "seq": seq_k * 1024, "gpus": gpus, "gbs": gbs, "tp": tp, "dp": dp, "cp": cp, "measured_tflops": tflops,
            "note": "TFLOP/s converted with NeMo's formula of the time; micro-batch 1, recompute unstated",
        })  # fmt: skip
    return out


def nemo_llama2_flops_per_token(seq: int) -> float:
    """NeMo's Llama-2 formula when the table was published (full s^2 attention, no causal discount:
    nemo/utils/flops_formulas.py before 6251117f4c, 2025-08), for Llama-2 7B."""
    layers, h, ffn, vocab, heads, groups = 32, 4096, 11008, 32000, 32, 32
    return layers * h * h * (12 + 12 * groups / heads + 18 * ffn / h + 12 * seq / h + 6 * vocab / (layers * h))


def _mpt(r: dict[str, Any]) -> list[Case]:
    shape = MPT[r["size"]]
    model = ModelSpec(
        name=f"mpt-{r['size']}", **shape, ffn_hidden_size=4 * shape["hidden_size"], vocab_size=50368,
        seq_length=r["seq"], position_embedding_type="alibi", normalization="LayerNorm", add_bias_linear=False,
    )  # fmt: skip
    g = r["gpus"]
    cluster = ClusterSpec(num_nodes=max(1, g // 8), gpus_per_node=min(8, g), gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=r["gbs"], framework="pytorch-fsdp", grad_reduce_dtype="fp32")
    par = ParallelConfig(dp=g, micro_batch_size=r["mbs"], recompute="full" if r["ac"] else "none")
    return [("as published", model, cluster, training, par)]


def _torchtitan(r: dict[str, Any]) -> list[Case]:
    model = ModelSpec(**{**catalog.model_fields(r["name"]), "seq_length": 8192})
    g, tp = r["gpus"], r["tp"]
    cluster = ClusterSpec(num_nodes=g // 8, gpus_per_node=8, gpu=r["gpu"])
    dp = g // tp
    training = TrainingSpec(
        global_batch_size=r["local"] * dp, precision=r["precision"], framework="pytorch-fsdp", stack="torchtitan",
        fp8_recipe="tensorwise" if r["precision"] == "fp8" else None,
    )  # fmt: skip
    par = ParallelConfig(
        tp=tp, dp=dp, micro_batch_size=r["local"], recompute=r["rec"], sequence_parallel=tp > 1,
        tp_comm_overlap=r["atp"], fp8_param_gather=r["fp8_ag"], grad_reduce_dtype="fp32",
    )  # fmt: skip
    return [("as published", model, cluster, training, par)]


def _bridge(r: dict[str, Any]) -> list[Case]:
    """The answer-key recipe of the same model and GPU, with what the table states instead."""
    rec = copy.deepcopy(next(k for k in expert_recipes.load() if k["name"] == r["base"]))
    rec["cluster"].update(r["cluster"])
    training = dict(r["training"])
    if "seq_length" in training:
        rec["model"]["seq_length"] = training.pop("seq_length")
    rec["training"].update(training)
    p = rec["parallel"]
    p.update(r["parallel"])
    if {"pp", "vpp"} & set(r["parallel"]):
        p["pipeline_layout"] = None  # the recipe's layout string was for its own pipeline
    if (p.get("vpp") or 1) > 1:
        p["schedule"] = "interleaved"
    c = rec["cluster"]
    p["dp"] = c["num_nodes"] * c["gpus_per_node"] // (p["tp"] * p["pp"] * p["cp"])
    if rec["training"]["precision"] != "fp8":
        rec["training"]["fp8_recipe"] = None
    unstated = p.get("recompute") == UNSTATED
    if unstated:
        p.update(recompute="none", recompute_modules=None, recompute_num_layers=None, recompute_method=None)
    req, par = expert_recipes.request(rec)
    if not unstated:
        return [("as published", req.model, req.cluster, req.training, par)]
    per_chunk = max(1, req.model.num_layers // (par.pp * par.vpp))
    levels = space.recompute_options(req.model, req.training, per_chunk)
    return [
        (
            f"recompute {describe(level)}",
            req.model,
            req.cluster,
            req.training,
            par.model_copy(
                update={
                    "recompute": level.recompute,
                    "recompute_modules": level.modules,
                    "recompute_method": level.method,
                    "recompute_num_layers": level.layers,
                }
            ),
        )
        for level in levels
    ]


def describe(level: space.Recompute) -> str:
    if level.recompute == "selective" and level.modules:
        return "+".join(level.modules)
    if level.recompute == "full" and level.layers:
        return f"full ({level.method} {level.layers})"
    return level.recompute


def _nemo_cp(r: dict[str, Any]) -> list[Case]:
    model = ModelSpec(**{**catalog.model_fields("llama-2-7b"), "seq_length": r["seq"]})
    g = r["gpus"]
    cluster = ClusterSpec(num_nodes=max(1, g // 8), gpus_per_node=min(8, g), gpu="H100-SXM")
    training = TrainingSpec(
        global_batch_size=r["gbs"],
        precision="fp8",
        framework="megatron",
        grad_reduce_dtype="bf16",
        fp8_recipe="delayed",
    )
    return [
        (
            f"recompute {level}",
            model,
            cluster,
            training,
            ParallelConfig(
                tp=r["tp"], dp=r["dp"], cp=r["cp"], micro_batch_size=1, recompute=level,
                sequence_parallel=r["tp"] > 1, distributed_optimizer=True, tp_comm_overlap=r["tp"] > 1,
                fp8_param_gather=False, grad_reduce_dtype="bf16", fp8_recipe="delayed",
            ),
        )
        for level in ("none", "selective", "full")
    ]  # fmt: skip


RUNNERS: dict[str, Callable[[dict[str, Any]], list[Case]]] = {
    "mpt": _mpt,
    "tt": _torchtitan,
    "bridge": _bridge,
    "nemo-cp": _nemo_cp,
}


def evaluate_row(r: dict[str, Any]) -> dict[str, Any]:
    """The run's published layout as the planner predicts it: tokens/s/GPU, error, feasibility, the biggest terms."""
    results: list[tuple[str, Estimate, int]] = []
    for variant, model, cluster, training, par in RUNNERS[r["kind"]](r):
        results.append((variant, evaluate(model, cluster, training, par), cluster.world_size))
    feasible = [x for x in results if x[1].feasible]
    # an unstated recomputation (the NeMo rows, one Megatron-Bridge row): the fastest that fits
    variant, est, gpus = max(feasible, key=lambda x: x[1].time.tokens_per_s) if feasible else results[0]
    predicted = est.time.tokens_per_s / gpus
    if "measured_tps" in r:
        measured = float(r["measured_tps"])
    else:  # TFLOP/s per GPU, at NeMo's FLOPs per token of the time
        measured = r["measured_tflops"] * 1e12 / nemo_llama2_flops_per_token(r["seq"])
    terms = sorted(((k.removesuffix("_s"), v) for k, v in est.time.breakdown.items() if v), key=lambda kv: -kv[1])
    return {
        "id": r["id"],
        "source": r["source"],
        "variant": variant,
        "measured": measured,
        "predicted": predicted,
        "error": predicted / measured - 1,
        "feasible": est.feasible,
        "peak_gib": est.memory.peak_bytes / 2**30,
        "terms": terms[:4],
        "reasons": est.reasons,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = [evaluate_row(r) for r in rows()]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'run':<40} {'tok/s/GPU':>10} {'pred':>9} {'err':>6}  fits  GiB    largest terms (s)")
    for o in out:
        terms = " ".join(f"{k}={v:.2f}" for k, v in o["terms"])
        print(
            f"{o['id']:<40} {o['measured']:>10,.0f} {o['predicted']:>9,.0f} {100 * o['error']:>+5.0f}%  "
            f"{'yes' if o['feasible'] else 'NO ':<4} {o['peak_gib']:>5.1f}  {terms}"
        )
    errors = [abs(o["error"]) for o in out]
    fast = sum(o["error"] > 0 for o in out)
    print(
        f"{len(out)} runs: median |error| {100 * statistics.median(errors):.0f}%, max {100 * max(errors):.0f}%; "
        f"{fast} predicted faster than measured; called infeasible: {sum(not o['feasible'] for o in out)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
