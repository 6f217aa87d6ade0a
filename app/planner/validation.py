"""Published training runs as planner requests, for checking the model against measured iteration times.

Rows come from benchmarks/data/published_runs_public.json (a copy of shared/validation). Where a row is silent,
the value below is taken from the run's own paper or log, never fitted to its measurement:
- vocab 51200: Megatron-LM's padded GPT-2 vocabulary (Narayanan et al. 2021, sec. 5.1).
- Selene / DGX A100 80 GB, 8 GPUs per node, one HDR 200 Gb/s NIC per GPU (Narayanan et al. 2021, sec. 5).
- Micro-batch 1 for the PTD-P and MT-NLG runs; for the ZeRO-3 baselines no gradient accumulation
  (micro-batch = global batch / GPUs), the only choice that fits their reported times within ZeRO-3's
  per-micro-batch parameter traffic.
- Full recomputation wherever the row does not say (these papers train with activation recomputation; the
  96·B·s·l·h² FLOP count of Narayanan eq. 3 that their TFLOP/s use assumes it).
- 2021-22 software: no flash attention, gradient reduction after the backward pass, blocking pipeline sends.
- BLOOM on Jean Zay: 4 Omni-Path 100 Gb/s links per node of 8 GPUs = 6.25 GB/s per GPU; Megatron-DeepSpeed
  with ZeRO-1 and BF16_Optimizer (bigscience tr11 README).
Rows with only TFLOP/s get their iteration time from the FLOP count their source used (Narayanan eq. 3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "published_runs_public.json"
GPT_VOCAB = 51200


@dataclass(frozen=True)
class PublishedRun:
    name: str
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    parallel: ParallelConfig
    iter_s: float | None  # measured (or derived from measured TFLOP/s)
    mem_gib: float | None  # Korthikanti et al. Fig. 1: analytical params+optimizer and activations, GiB
    derived_from: str  # "iteration time", "TFLOP/s", "memory"


def narayanan_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 eq. (3): FLOPs per iteration with activation recomputation."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def _model(r: dict[str, Any]) -> ModelSpec:
    return ModelSpec(
        name=r["name"],
        num_layers=r["layers"],
        hidden_size=r["hidden"],
        num_attention_heads=r["heads"],
        num_query_groups=r.get("kv_heads"),
        ffn_hidden_size=r.get("ffn"),
        vocab_size=r.get("vocab") or GPT_VOCAB,
        seq_length=r["seq"],
        position_embedding_type="alibi" if "BLOOM" in r["name"] else "learned_absolute",
        normalization="LayerNorm",
        add_bias_linear=True,
        embedding_layernorm="BLOOM" in r["name"],
        hidden_dropout=0.0 if "BLOOM" in r["name"] else 0.1,
        attention_dropout=0.0 if "BLOOM" in r["name"] else 0.1,
    )


def _recompute(label: str | None) -> tuple[str, bool]:
    if label is None or label == "full":
        return "full", False
    if label == "none":
        return "none", False
    return "selective", "sequence" in label


def to_run(r: dict[str, Any]) -> PublishedRun:
    gpn = r.get("gpus_per_node") or 8
    bloom, mtnlg, zero = "BLOOM" in r["name"], "MT-NLG" in r["name"], r.get("zero") == 3
    cluster = ClusterSpec(
        num_nodes=max(1, r["gpus"] // gpn),
        gpus_per_node=min(gpn, r["gpus"]),
        gpu="A100-80GB" if r.get("gpu_mem_gb") in (None, 80) else "A100-40GB",
        inter_node_GBps=6.25 if bloom else None,
    )
    framework = "megatron-deepspeed" if (bloom or mtnlg) else ("deepspeed" if zero else "megatron")
    training = TrainingSpec(
        global_batch_size=r["gbs"],
        precision=r.get("precision") or "fp16",
        framework=framework,
        flash_attention=False,
        overlap_grad_reduce=False,
        overlap_p2p_comm=False,
    )
    recompute, sp = _recompute(r.get("recompute"))
    dp = r.get("dp") or r["gpus"] // (r["tp"] * r["pp"])
    mbs = r.get("mbs") or (r["gbs"] // dp if zero else 1)
    stage = 3 if zero else (1 if framework != "megatron" else 0)
    parallel = ParallelConfig(
        tp=r["tp"],
        pp=r["pp"],
        vpp=r.get("vpp") or 1,
        dp=dp,
        cp=r.get("cp") or 1,
        micro_batch_size=mbs,
        recompute=recompute,
        sequence_parallel=sp,
        zero_stage=stage,
    )
    model = _model(r)
    iter_s, derived = r.get("iter_s"), "iteration time"
    if iter_s is None and r.get("tflops_per_gpu"):
        flops = narayanan_flops(r["gbs"], r["seq"], r["layers"], r["hidden"], model.vocab_size)
        iter_s, derived = flops / (r["tflops_per_gpu"] * 1e12 * r["gpus"]), "TFLOP/s"
    mem = r.get("mem_gb")
    return PublishedRun(
        r["name"], model, cluster, training, parallel, iter_s, mem, derived if iter_s is not None else "memory"
    )


def load(path: Path = DATA) -> list[PublishedRun]:
    return [to_run(r) for r in json.loads(path.read_text(encoding="utf-8"))]
