"""Measured training runs as planner requests, for checking the model against what really ran.

Rows come from benchmarks/data (a copy of shared/validation: published_runs_public.json, 285 published runs, and
h200_deepspeed_llama1b.jsonl, DeepSpeed runs measured on one H200; VALIDATION.md says what each stack really does).
Each row becomes (model, cluster, training, parallel) on the stack that ran it. Where a row is silent, the value
is a fact about that stack or model taken from its own source (cited below), never fitted to the measurement:

- Megatron-LM / Megatron-DeepSpeed on A100 (Korthikanti 2022, Narayanan 2021, Smith 2022, BigScience): vocab 51200
  (Megatron's padded GPT-2 vocabulary, Narayanan sec. 5.1); DGX A100 80 GB, one HDR 200 Gb/s NIC per GPU; micro-batch
  1 for PTD-P and MT-NLG; ZeRO-3 baselines without gradient accumulation; full recomputation where unstated (the
  96BslH^2 FLOP count their TFLOP/s use assumes it); 2021-22 software: no flash attention, gradient reduction after
  backward, blocking pipeline sends. BLOOM: Jean Zay, 4 Omni-Path 100 Gb/s per node of 8 GPUs = 6.25 GB/s per GPU,
  BigScience's Megatron-DeepSpeed fork with ALiBi, ZeRO-1 and BF16_Optimizer (bigscience tr11 README).
- NVIDIA dgxc-benchmarking on H100 (NeMo 24.11, Megatron-core + Transformer Engine): dp = gpus / (tp pp cp);
  distributed optimizer, sequence parallelism and TP communication overlap (userbuffers) wherever TP > 1, bf16
  gradient reduction, overlapped DP communication, FP8 rows with delayed scaling and FP8 primary weights
  (VALIDATION.md; NeMo 24.11 llm/recipes). Architectures the rows omit come from the model cards: Nemotron-4 15B
  (arXiv 2402.16819 Table 1) and 340B (arXiv 2406.11704 sec. 2.1): squared-ReLU MLP of 4h, GQA with 8 KV heads,
  RoPE, untied embeddings, vocab 256000; Grok-1 (xai-org/grok-1 README, 64 layers, 48/8 heads, 6144 wide,
  8 experts top-2, vocab 131072; expert FFN 32768, gated, from the released config); GPT-3 175B's vocabulary as
  NeMo pads it (50304) and FFN 4h.
- NVIDIA dgxc-benchmarking MaxText on H100 (24.11, JAX container maxtext-2024-12-09; maxtext/configure.sh and
  README_70b.md at 35a9aecc): Llama-2 70B as MaxText's llama2-70b config builds it (the catalogue preset: 80 layers,
  8192 wide, 64 heads / 8 KV heads, FFN 28672, vocab 32000, untied), sequence 4096, micro-batch 2 per GPU, FSDP over
  every GPU, the recipe's custom remat (q, k, v and out projections saved, and in BF16 the MLP output; FP8
  recomputes the whole MLP), FP8 as XLA's delayed-scaling dot; step time from the per-GPU tokens/s. The 13 PaxML
  rows carry no architecture and a JAX stack the planner does not model: not evaluable.
- MosaicML llm-foundry on A100 (FSDP FULL_SHARD, MPT with ALiBi, tied embeddings, no biases, 4h GELU MLP, vocab
  50368, llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml): 1600 Gb/s RoCE per node of 8 GPUs = 25 GB/s per GPU;
  gradients reduced in fp32 under Composer's DEFAULT mixed precision and in bf16 under PURE (the rows' MP Mode);
  step time from the per-GPU tokens/s.
- H200 DeepSpeed rows (measured here): TinyLlama-1.1B shape, Hugging Face LlamaForCausalLM with SDPA, one GPU,
  DeepSpeed's AdamW with torch_adam, gradient checkpointing = full per layer; their memory is allocator peaks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.planner import catalog
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
GPT_VOCAB = 51200
GiB = 2**30

FAMILIES = {
    "megatron-a100": "Megatron-LM / Megatron-DeepSpeed on A100 (2021-22)",
    "dgxc-h100": "NVIDIA dgxc-benchmarking, Megatron-core + TE on H100",
    "llm-foundry-a100": "MosaicML llm-foundry, PyTorch FSDP on A100",
    "h200-deepspeed": "DeepSpeed + Hugging Face on one H200 (measured here)",
    "maxtext-h100": "NVIDIA dgxc-benchmarking, MaxText (JAX/XLA) on H100",
}


@dataclass(frozen=True)
class MeasuredRun:
    name: str
    family: str
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    parallel: ParallelConfig
    step_s: float | None  # measured (or derived from measured TFLOP/s or tokens/s)
    reserved_gib: float | None  # measured allocator peaks (H200 rows)
    allocated_gib: float | None
    derived_from: str


# Architectures the dgxc rows omit, from the model cards (see the module docstring).
_DGXC_MODELS: dict[str, dict[str, Any]] = {
    "Nemotron-4 15B": dict(
        num_layers=32,
        hidden_size=6144,
        num_attention_heads=48,
        num_query_groups=8,
        ffn_hidden_size=24576,
        vocab_size=256000,
        seq_length=4096,
    ),
    "Nemotron-4 340B": dict(
        num_layers=96,
        hidden_size=18432,
        num_attention_heads=96,
        num_query_groups=8,
        ffn_hidden_size=73728,
        vocab_size=256000,
        seq_length=4096,
    ),
    "Grok-1": dict(
        num_layers=64,
        hidden_size=6144,
        num_attention_heads=48,
        num_query_groups=8,
        ffn_hidden_size=32768,
        vocab_size=131072,
        swiglu=True,
        num_experts=8,
        moe_router_topk=2,
        moe_ffn_hidden_size=32768,
    ),
}


def _family(source: str) -> str | None:
    first = source.split()[0]
    if first in ("Korthikanti", "Narayanan", "Smith", "bigscience-workshop/bigscience"):
        return "megatron-a100"
    if first.startswith("NVIDIA/dgxc") and " maxtext/" in source:
        return "maxtext-h100"
    if first.startswith("NVIDIA/dgxc"):
        return "dgxc-h100"
    if first.startswith("mosaicml"):
        return "llm-foundry-a100"
    return None


def narayanan_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 eq. (3): FLOPs per iteration with activation recomputation."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def _megatron_a100(r: dict[str, Any]) -> MeasuredRun | None:
    bloom, mtnlg, zero = "BLOOM" in r["name"], "MT-NLG" in r["name"], r.get("zero") == 3
    gpn = r.get("gpus_per_node") or 8
    model = ModelSpec(
        name=r["name"],
        num_layers=r["layers"],
        hidden_size=r["hidden"],
        num_attention_heads=r["heads"],
        num_query_groups=r.get("kv_heads"),
        ffn_hidden_size=r.get("ffn"),
        vocab_size=r.get("vocab") or GPT_VOCAB,
        seq_length=r["seq"],
        position_embedding_type="alibi" if bloom else "learned_absolute",
        normalization="LayerNorm",
        add_bias_linear=True,
        embedding_layernorm=bloom,
        hidden_dropout=0.1,  # BLOOM too: "The default Megatron-LM dropout settings are inherited" (tr11 README)
        attention_dropout=0.1,
    )
    cluster = ClusterSpec(
        num_nodes=max(1, r["gpus"] // gpn),
        gpus_per_node=min(gpn, r["gpus"]),
        gpu="A100-80GB" if r.get("gpu_mem_gb") in (None, 80) else "A100-40GB",
        inter_node_GBps=6.25 if bloom else None,
    )
    framework = "megatron-deepspeed" if (bloom or mtnlg or zero) else "megatron"
    training = TrainingSpec(
        global_batch_size=r["gbs"],
        precision=r.get("precision") or "fp16",
        framework=framework,
        stack="megatron-deepspeed-bigscience"
        if bloom
        else (None if framework == "megatron" else "megatron-deepspeed-2021"),
        flash_attention=False,
        overlap_grad_reduce=False,
        overlap_p2p_comm=False,
    )
    label = r.get("recompute")
    recompute = "full" if label in (None, "full") else ("none" if label == "none" else "selective")
    dp = r.get("dp") or r["gpus"] // (r["tp"] * r["pp"])
    parallel = ParallelConfig(
        tp=r["tp"],
        pp=r["pp"],
        vpp=r.get("vpp") or 1,
        dp=dp,
        cp=r.get("cp") or 1,
        micro_batch_size=r.get("mbs") or (r["gbs"] // dp if zero else 1),
        recompute=recompute,
        sequence_parallel=bool(label and "sequence" in label),
        zero_stage=3 if zero else (1 if framework != "megatron" else 0),
    )
    step, derived = r.get("iter_s"), "iteration time"
    if step is None and r.get("tflops_per_gpu"):
        flops = narayanan_flops(r["gbs"], r["seq"], r["layers"], r["hidden"], model.vocab_size)
        step, derived = flops / (r["tflops_per_gpu"] * 1e12 * r["gpus"]), "TFLOP/s"
    if step is None:
        return None
    return MeasuredRun(r["name"], "megatron-a100", model, cluster, training, parallel, step, None, None, derived)


def _dgxc_model(r: dict[str, Any]) -> ModelSpec | None:
    name = r["name"]
    base = next((fields for key, fields in _DGXC_MODELS.items() if name.startswith(key)), None)
    if base is not None:
        fields = {**base, "seq_length": r["seq"]}
        if r.get("layers"):
            fields["num_layers"] = r["layers"]
        nemotron = name.startswith("Nemotron")
        return ModelSpec(
            name=name,
            **fields,
            untie_embeddings_and_output_weights=True,
            position_embedding_type="rope",
            normalization="LayerNorm" if nemotron else "RMSNorm",
            add_bias_linear=False,
        )
    if not r.get("hidden") or not r.get("layers"):
        return None
    llama = "Llama" in name
    return ModelSpec(
        name=name,
        num_layers=r["layers"],
        hidden_size=r["hidden"],
        num_attention_heads=r["heads"],
        num_query_groups=r.get("kv_heads"),
        ffn_hidden_size=r.get("ffn"),
        vocab_size=r.get("vocab") or 50304,
        seq_length=r["seq"],
        swiglu=llama,
        untie_embeddings_and_output_weights=llama,
        position_embedding_type="rope" if llama else "learned_absolute",
        normalization="RMSNorm" if llama else "LayerNorm",
        add_bias_linear=not llama,
    )


def _dgxc(r: dict[str, Any]) -> MeasuredRun | None:
    model = _dgxc_model(r)
    if model is None or not r.get("iter_s"):
        return None
    tp, pp, cp = r["tp"], r["pp"], r.get("cp") or 1
    dp = r["gpus"] // (tp * pp * cp)
    fp8 = r["precision"] == "fp8"
    # Nemotron-4 340B's recipe keeps Adam's state in bf16 (nemotron4-340b-synth.yaml `optim.dtype: bf16`, read by
    # NeMo's megatron_base_model.py setup_optimization into apex's distributed_fused_adam): the closest Megatron-core
    # setting, bf16 moments with the fp32 master as 16-bit remainders, is 2 B/param more than NeMo's BF16 run keeps
    # (no master copy, store_params=False) and than its FP8 run's bf16 copy, so these rows' memory is on the high side.
    states = "bf16" if r["name"].startswith("Nemotron-4 340B") else "fp32"
    training = TrainingSpec(
        global_batch_size=r["gbs"], precision=r["precision"], grad_reduce_dtype="bf16", optimizer_states=states
    )
    parallel = ParallelConfig(
        tp=tp,
        pp=pp,
        vpp=r.get("vpp") or 1,
        dp=dp,
        cp=cp,
        ep=r.get("ep") or 1,
        micro_batch_size=r["mbs"],
        sequence_parallel=tp > 1,
        tp_comm_overlap=tp > 1,
        distributed_optimizer=dp * cp > 1,
        fp8_recipe="delayed" if fp8 else None,
        fp8_param_gather=fp8 and dp * cp > 1,
    )
    cluster = ClusterSpec(num_nodes=max(1, r["gpus"] // 8), gpus_per_node=min(8, r["gpus"]), gpu="H100-SXM")
    return MeasuredRun(
        r["name"], "dgxc-h100", model, cluster, training, parallel, r["iter_s"], None, None, "iteration time"
    )


def _maxtext(r: dict[str, Any]) -> MeasuredRun | None:
    if not r["name"].startswith("MaxText Llama2 70B") or not r.get("tokens_per_s"):
        return None
    model = ModelSpec(**{**catalog.model_fields("llama-2-70b"), "name": r["name"], "seq_length": r["seq"]})
    fp8 = r["precision"] == "fp8"
    training = TrainingSpec(
        global_batch_size=r["gbs"],
        precision=r["precision"],
        framework="jax",
        fp8_recipe="delayed" if fp8 else None,
    )
    parallel = ParallelConfig(
        dp=r["gpus"],
        micro_batch_size=r["mbs"],
        recompute="selective",
        recompute_modules=("mlp",) if fp8 else None,  # save_dot_except_mlp; BF16 keeps mlpwo
        fp8_recipe="delayed" if fp8 else None,
        grad_reduce_dtype="fp32",
    )
    cluster = ClusterSpec(num_nodes=r["gpus"] // 8, gpus_per_node=8, gpu="H100-SXM")
    step = r["gbs"] * r["seq"] / (r["tokens_per_s"] * r["gpus"])
    return MeasuredRun(r["name"], "maxtext-h100", model, cluster, training, parallel, step, None, None, "tokens/s")


def _llm_foundry(r: dict[str, Any]) -> MeasuredRun:
    model = ModelSpec(
        name=r["name"],
        num_layers=r["layers"],
        hidden_size=r["hidden"],
        num_attention_heads=r["heads"],
        ffn_hidden_size=r["ffn"],
        vocab_size=r["vocab"],
        seq_length=r["seq"],
        position_embedding_type="alibi",
        normalization="LayerNorm",
        add_bias_linear=False,
    )
    gpus = r["gpus"]
    cluster = ClusterSpec(
        num_nodes=max(1, gpus // 8),
        gpus_per_node=min(8, gpus),
        gpu="A100-80GB" if r["gpu_mem_gb"] == 80 else "A100-40GB",
    )
    # Composer FSDP mixed precision: DEFAULT reduces gradients in fp32, PURE in bf16 (the row's "MP Mode" column)
    reduce = "bf16" if "PURE" in r["source"] else "fp32"
    training = TrainingSpec(
        global_batch_size=r["gbs"], precision="bf16", framework="pytorch-fsdp", grad_reduce_dtype=reduce
    )
    parallel = ParallelConfig(
        dp=gpus, micro_batch_size=r["mbs"], recompute="full" if r["recompute"] == "full" else "none"
    )
    step = r["gbs"] * r["seq"] / (r["tokens_per_s"] * gpus)
    return MeasuredRun(
        r["name"], "llm-foundry-a100", model, cluster, training, parallel, step, None, None, "tokens/s per GPU"
    )


SHARDED_MAPPINGS = {
    "megatron-fsdp": "as Megatron-FSDP optim_grads_params (megatron-core, Ampere)",
    "deepspeed-zero3": "as DeepSpeed ZeRO-3 of a Hugging Face model",
}


def fully_sharded_mappings(run: MeasuredRun) -> dict[str, MeasuredRun]:
    """A MosaicML FSDP row (FULL_SHARD over every GPU) as the two other fully sharded modes would run it: the same
    model, cluster, batch, micro-batch and recomputation under Megatron-FSDP (`optim_grads_params` over DP, fp32
    main grads unless the row reduced in bf16) and under DeepSpeed ZeRO-3. Megatron-core has no ALiBi: the
    mapping uses RoPE, whose cost is of the same order (an element-wise rotation of q and k). The measured step is
    the FSDP run's: the errors say how far each mode's model is from what FSDP achieved, the infeasible count
    whether the planner would let the run happen at all."""
    out = {}
    p = run.parallel
    rope = run.model.model_copy(update={"position_embedding_type": "rope"})
    megatron = TrainingSpec(
        global_batch_size=run.training.global_batch_size,
        precision="bf16",
        framework="megatron",
        grad_reduce_dtype=run.training.reduce_dtype,
    )
    par = ParallelConfig(
        dp=p.dp,
        micro_batch_size=p.micro_batch_size,
        recompute=p.recompute,
        distributed_optimizer=True,
        megatron_fsdp="optim_grads_params",
    )
    out["megatron-fsdp"] = replace(run, model=rope, training=megatron, parallel=par)
    deepspeed = TrainingSpec(global_batch_size=run.training.global_batch_size, precision="bf16", framework="deepspeed")
    zero3 = ParallelConfig(dp=p.dp, micro_batch_size=p.micro_batch_size, recompute=p.recompute, zero_stage=3)
    out["deepspeed-zero3"] = replace(run, training=deepspeed, parallel=zero3)
    return out


def tinyllama() -> ModelSpec:
    return ModelSpec(
        name="llama-1.1b",
        num_layers=22,
        hidden_size=2048,
        num_attention_heads=32,
        num_query_groups=4,
        ffn_hidden_size=5632,
        vocab_size=32000,
        seq_length=2048,
        swiglu=True,
        untie_embeddings_and_output_weights=True,
        position_embedding_type="rope",
        normalization="RMSNorm",
        source="TinyLlama-1.1B shape (shared/validation/README.md)",
    )


def _h200(r: dict[str, Any]) -> MeasuredRun:
    cluster = ClusterSpec(num_nodes=1, gpus_per_node=1, gpu="H200")
    training = TrainingSpec(global_batch_size=r["mbs"], precision="bf16", framework="deepspeed")
    parallel = ParallelConfig(
        zero_stage=r["zero"],
        micro_batch_size=r["mbs"],
        recompute="full" if r["recompute"] else "none",
        offload_optimizer=r["offload"],
    )
    name = f"TinyLlama-1.1B ZeRO-{r['zero']} mbs{r['mbs']}{' recompute' if r['recompute'] else ''} 1xH200"
    return MeasuredRun(
        name,
        "h200-deepspeed",
        tinyllama(),
        cluster,
        training,
        parallel,
        r["step_s"],
        r["peak_reserved_gib"],
        r["peak_alloc_gib"],
        "measured step",
    )


def load(data: Path = DATA) -> tuple[list[MeasuredRun], list[str]]:
    """Every evaluable measured run, and the names of the rows that are not (with why)."""
    runs: list[MeasuredRun] = []
    skipped: list[str] = []
    for r in json.loads((data / "published_runs_public.json").read_text(encoding="utf-8")):
        family = _family(r["source"])
        run = None
        if family == "megatron-a100":
            run = _megatron_a100(r)
        elif family == "dgxc-h100":
            run = _dgxc(r)
        elif family == "llm-foundry-a100":
            run = _llm_foundry(r)
        elif family == "maxtext-h100":
            run = _maxtext(r)
        if run is None:
            why = "analytical memory row, no step time" if r.get("mem_gb") else "no architecture / no modelled stack"
            skipped.append(f"{r['name']}: {why}")
        else:
            runs.append(run)
    for line in (data / "h200_deepspeed_llama1b.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if "zero" in row:
            runs.append(_h200(row))
    return runs, skipped


def korthikanti_memory_rows(data: Path = DATA) -> list[dict[str, Any]]:
    """The analytical memory rows of Korthikanti et al. Fig. 1 (GiB), for the activation-formula check."""
    rows = json.loads((data / "published_runs_public.json").read_text(encoding="utf-8"))
    return [r for r in rows if r.get("mem_gb")]
