"""GPU validation (issue 6): the planner's predicted peak memory and tokens/s next to measured runs on one GPU.

    benchmarks/gpu_validation.sh                         # on the one-H200 machine: carried wheels, then this
    python benchmarks/gpu_validation.py --out DIR        # default grid (12 + planner's pick + 7B pair), < 10 min
    python benchmarks/gpu_validation.py --full-grid      # ZeRO 1/2/3 x mbs 1/4/8/16 x recompute off/on (24)
    python benchmarks/gpu_validation.py --cpu --out DIR  # smoke: tiny models on CPU (gloo), every code path
    python benchmarks/gpu_validation.py --moe            # Hugging Face MoE: a Qwen3-MoE-like grid, a Mixtral-like pair
    python benchmarks/gpu_validation.py --seq 16384 --mbs 1,2 --skip-pair   # long context

1. `python -m launcher probe --nodes 1 --gpus-per-node 1` measures the machine (a cluster profile).
2. For each configuration (pinned ZeRO stage, micro-batch size, recompute, offload) the planner estimates that
   exact layout on 1 x GPU with the profile; the renderer writes its plan.json; `python -m launcher bench` runs it
   in its own subprocess with a timeout (an out-of-memory error or a crash is a result); one JSON line per
   configuration goes to OUT/results.jsonl as soon as it finishes.
3. The planner runs unpinned on the same model and batch (objective throughput): its first plan is the choice
   whose measured speed is compared with the fastest measured configuration (run too if outside the grid).
4. OUT/table.txt, OUT/table.md and OUT/summary.json: predicted vs measured, the error of each, four targets.

Memory is compared like with like. The planner predicts, per stage, the allocated peak
(`StageMemory.allocated_bytes`, compared with torch.cuda.max_memory_allocated), the reserved peak (allocated x
(1 + the stack's allocator fragmentation) + its slack, data/stacks.json; compared with
torch.cuda.max_memory_reserved) and the total (reserved + runtime_overhead_bytes: CUDA context and workspaces,
outside the allocator). On CPU the trainer reports max
RSS, which is not comparable: the smoke run shows it and leaves the memory target n/a.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from gpu_validation_report import TARGETS, Record, report, size, summarise  # noqa: E402

from app.planner import EstimateRequest, ParallelConfig, PlanRequest, __version__, estimate, plan  # noqa: E402
from app.planner.calibration import apply_profile  # noqa: E402
from app.planner.gpu import Efficiency  # noqa: E402
from app.planner.layout import make_layout  # noqa: E402
from app.planner.results import Estimate, Plan, PlanResult, SearchStats, StageMemory  # noqa: E402
from app.render import RenderOptions, render, write_artifacts  # noqa: E402

LLAMA_1B = {
    "name": "llama-1.1b",
    "num_layers": 22,
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_query_groups": 4,
    "ffn_hidden_size": 5632,
    "vocab_size": 32000,
    "seq_length": 2048,
    "swiglu": True,
    "untie_embeddings_and_output_weights": True,
    "normalization": "RMSNorm",
    "position_embedding_type": "rope",
}
LLAMA_7B = {"preset": "llama-2-7b", "name": "llama-2-7b", "seq_length": 2048}  # the 1.1B grid's sequence length
TINY_A = {
    "name": "tiny-a",
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_query_groups": 2,
    "ffn_hidden_size": 128,
    "vocab_size": 256,
    "seq_length": 32,
    "swiglu": True,
    "untie_embeddings_and_output_weights": True,
}
TINY_B = {**TINY_A, "name": "tiny-b", "num_layers": 3}
# --moe: Hugging Face sparse MoE blocks under DeepSpeed (examples/hf_model.py; docs/planner.md, "Hugging Face MoE
# models"): many narrow experts (Qwen3-MoE's block, host-bound by its per-expert syncs) on the grid, few wide ones
# (Mixtral's block, GEMM-bound) for the pair
QWEN3_MOE_1B = {
    **LLAMA_1B,
    "name": "qwen3-moe-1b",
    "num_layers": 16,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "kv_channels": 64,
    "qk_layernorm": True,
    "ffn_hidden_size": 3072,
    "num_experts": 64,
    "moe_router_topk": 8,
    "moe_ffn_hidden_size": 256,
}
MIXTRAL_2B = {
    **QWEN3_MOE_1B,
    "name": "mixtral-2b",
    "num_layers": 8,
    "hidden_size": 2048,
    "num_query_groups": 8,
    "kv_channels": 128,
    "qk_layernorm": False,
    "num_experts": 8,
    "moe_router_topk": 2,
    "moe_ffn_hidden_size": 5632,
}
TINY_MOE_A = {**TINY_A, "name": "tiny-moe-a", "num_experts": 4, "moe_router_topk": 2, "moe_ffn_hidden_size": 64}
TINY_MOE_B = {**TINY_MOE_A, "name": "tiny-moe-b", "num_layers": 3, "qk_layernorm": True}
OOM_PATTERNS = ("torch.OutOfMemoryError", "CUDA out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED")
REPORT_RESERVE_S = 10.0  # kept back from the budget for the table


@dataclass(frozen=True)
class Config:
    model: str  # a key of Suite.models
    zero_stage: int
    micro_batch_size: int
    recompute: str  # none | full (selective is a no-op in the example trainer)
    offload_optimizer: str = "none"
    role: str = "grid"  # grid | planner (the planner's choice, outside the grid) | pair

    @property
    def label(self) -> str:
        off = "-offload" if self.offload_optimizer != "none" else ""
        rc = "on" if self.recompute != "none" else "off"
        return f"{self.model}-z{self.zero_stage}-mbs{self.micro_batch_size}-rc{rc}{off}"

    @property
    def job_name(self) -> str:
        """The label as the renderer's job names go (lowercase letters, digits, '-'; at most 40)."""
        return re.sub(r"[^a-z0-9-]+", "-", self.label.lower())[:40].strip("-")

    def parallel(self) -> ParallelConfig:
        return ParallelConfig(
            dp=1,
            zero_stage=self.zero_stage,
            micro_batch_size=self.micro_batch_size,
            recompute=self.recompute,
            offload_optimizer=self.offload_optimizer,
        )


@dataclass(frozen=True)
class Suite:
    """What one invocation runs: models, the grid and the pair, and the limits per model (seconds)."""

    models: dict[str, dict[str, Any]]
    grid: tuple[Config, ...]
    pair: tuple[Config, ...]
    global_batch_size: int
    steps: int
    warmup: int
    accelerator: str  # cuda | cpu
    gpu: str
    timeout_s: dict[str, float]  # per model; the offload run gets offload_timeout_s
    min_start_s: dict[str, float]  # a run starts only with this much budget left
    offload_timeout_s: float
    extra_notes: tuple[str, ...] = field(default=())

    @property
    def grid_model(self) -> str:
        return self.grid[0].model


def grid(model: str, zeros: list[int], sizes: list[int], recomputes: list[str]) -> tuple[Config, ...]:
    return tuple(Config(model, z, m, r) for z in zeros for m in sizes for r in recomputes)


def suite_for(args: argparse.Namespace) -> Suite:
    """The GPU suite (1.1B grid, 7B pair), or the CPU smoke suite with the same structure on tiny models."""
    if args.cpu:
        a, b = (TINY_MOE_A, TINY_MOE_B) if args.moe else (TINY_A, TINY_B)
        models, pair_model, gbs, pair_mbs = {a["name"]: a, b["name"]: b}, b["name"], 4, 2
        configs: tuple[Config, ...] = (Config(a["name"], 1, 2, "full"), Config(a["name"], 3, 4, "none"))
        timeout_s, min_start_s = dict.fromkeys(models, 90.0), dict.fromkeys(models, 10.0)
        offload_timeout_s = 90.0
        notes: tuple[str, ...] = (
            "CPU smoke run: predictions are for the planner's GPU, measurements are CPU "
            "processes (max RSS, gloo); only the code paths are checked",
        )
    elif args.moe:
        models, pair_model, gbs, pair_mbs = {"qwen3-moe-1b": QWEN3_MOE_1B, "mixtral-2b": MIXTRAL_2B}, "mixtral-2b", 8, 1
        # transformers 4's loop is host-bound at micro-batch 1 (12-18 s per step predicted on H200): grid from 2
        zeros, sizes = ([1, 2, 3], [1, 4, 8]) if args.full_grid else (args.zero, args.moe_mbs)
        configs = grid("qwen3-moe-1b", zeros, sizes, ["none", "full"])
        timeout_s, min_start_s = {"qwen3-moe-1b": 150.0, "mixtral-2b": 150.0}, dict.fromkeys(models, 40.0)
        offload_timeout_s, notes = 300.0, ("MoE suite: Hugging Face sparse blocks (--model-impl hf)",)
    else:
        models, pair_model, gbs, pair_mbs = {"llama-1.1b": LLAMA_1B, "llama-2-7b": LLAMA_7B}, "llama-2-7b", 16, 1
        zeros, sizes = ([1, 2, 3], [1, 4, 8, 16]) if args.full_grid else (args.zero, args.mbs)
        configs = grid("llama-1.1b", zeros, sizes, ["none", "full"])
        timeout_s, min_start_s = {"llama-1.1b": 150.0, "llama-2-7b": 240.0}, {"llama-1.1b": 40.0, "llama-2-7b": 60.0}
        offload_timeout_s, notes = 300.0, ()
    pair: tuple[Config, ...] = (
        ()
        if args.skip_pair
        else (
            Config(pair_model, 3, pair_mbs, "full", role="pair"),
            Config(pair_model, 3, pair_mbs, "full", "cpu", "pair"),
        )
    )
    if args.skip_offload:
        pair = tuple(c for c in pair if c.offload_optimizer == "none")
    if args.seq:  # long context: every model of the suite at this sequence length (RoPE reaches it by config)
        models = {name: {**shape, "seq_length": args.seq} for name, shape in models.items()}
        notes = (*notes, f"every model at sequence length {args.seq} (--seq)")
    return Suite(
        models=models,
        grid=configs,
        pair=pair,
        global_batch_size=gbs,
        steps=args.steps,
        warmup=args.warmup,
        accelerator="cpu" if args.cpu else "cuda",
        gpu=args.gpu,
        timeout_s=timeout_s,
        min_start_s=min_start_s,
        offload_timeout_s=offload_timeout_s,
        extra_notes=notes,
    )


# Predictions ---------------------------------------------------------------------------------------------------
def allocator_prediction(stage: StageMemory, eff: Efficiency) -> tuple[float, float]:
    """(allocated, reserved) bytes of the planner's stage peak, as torch reports them (max_memory_allocated,
    max_memory_reserved): reserved = allocated x (1 + the stack's fragmentation) + its slack; the total adds the
    runtime overhead outside the allocator (app/planner/memory.py stage_parts)."""
    del eff  # the stack's allocator constants are already in the stage's figures
    return float(stage.allocated_bytes), float(stage.reserved_bytes)


def hf_stack() -> str:
    """The deepspeed-hf stack of the installed transformers: 5's grouped_mm experts, or 4's per-expert loop (what
    examples/hf_model.py builds here for an MoE)."""
    try:
        major = int(importlib.metadata.version("transformers").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        return "deepspeed-hf"
    return "deepspeed-hf" if major >= 5 else "deepspeed-hf-transformers4"


def request_for(suite: Suite, model: str, cluster: dict[str, Any]) -> PlanRequest:
    training = {
        "global_batch_size": suite.global_batch_size,
        "framework": "deepspeed",
        "precision": "bf16",
        "objective": "throughput",
        "max_plans": 1,
    }
    if suite.models[model].get("num_experts"):
        training["stack"] = hf_stack()
    return PlanRequest(model=suite.models[model], cluster=cluster, training=training)


def pinned_result(req: PlanRequest, par: ParallelConfig) -> tuple[PlanResult, Estimate]:
    """The planner's estimate of exactly `par` (with the measured profile), as a one-plan result to render."""
    est = estimate(EstimateRequest(model=req.model, cluster=req.cluster, training=req.training, parallel=par))
    cluster, notes = apply_profile(req.cluster, req.training)
    one = Plan(
        rank=1,
        parallel=par,
        layout=make_layout(req.model, cluster, req.training, par),
        estimate=est,
        why=["pinned by benchmarks/gpu_validation.py"],
        notes=[],
    )
    result = PlanResult(
        planner_version=__version__,
        model=req.model,
        cluster=cluster,
        training=req.training,
        num_parameters=req.model.num_parameters,
        num_active_parameters=req.model.num_active_parameters,
        plans=[one],
        rejected=[],
        notes=notes,
        stats=SearchStats(candidates=1, evaluated=1, feasible=int(est.feasible), seconds=0.0),
    )
    return result, est


def predicted(est: Estimate, eff: Efficiency) -> Record:
    stage = est.memory.stages[est.memory.peak_stage]
    allocated, reserved = allocator_prediction(stage, eff)
    return {
        "predicted_fits": est.feasible,
        "predicted_reasons": est.reasons,
        "predicted_allocated_bytes": allocated,
        "predicted_reserved_bytes": reserved,
        "predicted_total_bytes": stage.total_bytes,
        "predicted_tokens_per_s": est.time.tokens_per_s,
        "predicted_step_s": est.time.step_s,
    }


def planner_choice(suite: Suite, cluster: dict[str, Any]) -> Config | None:
    """The unpinned planner's first plan for the grid's model, as a configuration (role planner)."""
    result = plan(request_for(suite, suite.grid_model, cluster))
    if not result.plans:
        return None
    p = result.plans[0].parallel
    return Config(suite.grid_model, p.zero_stage, p.micro_batch_size, p.recompute, p.offload_optimizer, "planner")


def run_order(suite: Suite, chosen: Config | None) -> list[Config]:
    """The planner's choice first (role planner if the grid lacks it), the rest of the grid, then the pair with
    offload last: if time runs short, what is skipped is the least needed."""
    pair = sorted(suite.pair, key=lambda c: c.offload_optimizer != "none")
    if chosen is None:
        return [*suite.grid, *pair]
    first = next((c for c in suite.grid if c.label == chosen.label), chosen)
    return [first, *(c for c in suite.grid if c.label != chosen.label), *pair]


# Running one configuration -------------------------------------------------------------------------------------
def classify_failure(text: str) -> str:
    return "oom" if any(p in text for p in OOM_PATTERNS) else "failed"


def failure_detail(text: str) -> str:
    """The line that says what went wrong (an out-of-memory line, else the last exception, else a signal or exit
    code, else the last line), for the table and results.jsonl."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for pattern in ("|".join(map(re.escape, OOM_PATTERNS)), r"\w(Error|Exception)\b[^:]*:", r"Killed|Signal|exitcode"):
        hits = [ln for ln in lines if re.search(pattern, ln)]
        if hits:
            return hits[-1][-300:]
    return (lines or ["no output"])[-1][-300:]


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the launcher's process group (it stops its job within the grace period), then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, 45.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def bench(plan_json: Path, work: Path, suite: Suite, timeout_s: float) -> Record:
    """`launcher bench` in its own process group; status ok | oom | failed | timeout and what it measured."""
    run_dir, log_path = work / "run", work / "launcher.out"
    work.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "bench",
        str(plan_json),
        "--steps",
        str(suite.steps),
        "--warmup",
        str(suite.warmup),
        "--run-dir",
        str(run_dir),
        "--output",
        str(work / "bench.json"),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            code = None
    text = log_path.read_text(errors="replace")
    text += "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").rglob("*")) if p.is_file())
    if code is None:
        return {"status": "timeout", "detail": f"no result within {timeout_s:.0f} s"}
    if code != 0 or not (work / "bench.json").exists():
        return {"status": classify_failure(text), "detail": failure_detail(text)}
    return {"status": "ok", "detail": "", **measured(work / "bench.json", run_dir / "metrics" / "rank0.json")}


def measured(bench_json: Path, rank0_json: Path) -> Record:
    report, metrics = json.loads(bench_json.read_text()), json.loads(rank0_json.read_text())
    return {
        "measured_allocated_bytes": report["peak_memory"][0]["measured_bytes"],
        "measured_reserved_bytes": metrics.get("peak_reserved_bytes"),
        "memory_kind": report["memory_kind"],
        "measured_tokens_per_s": report["tokens_per_s"]["measured"],
        "measured_step_s": report["step_s"]["measured"],
        "measured_recompute": metrics.get("recompute"),
    }


def validate(cfg: Config, suite: Suite, cluster: dict[str, Any], out: Path, timeout_s: float) -> Record:
    """Estimate, render and bench one configuration."""
    req = request_for(suite, cfg.model, cluster)
    result, est = pinned_result(req, cfg.parallel())
    work = out / "runs" / cfg.label
    work.mkdir(parents=True, exist_ok=True)
    options = RenderOptions(
        job_name=cfg.job_name, workdir=str(ROOT), accelerator=suite.accelerator, train_iters=suite.steps, log_interval=1
    )
    arts = render(result, 1, options)
    write_artifacts(arts, work / "files")
    rec = {**predicted(est, result.cluster.gpu.efficiency), "plan_json": str(work / "files" / "plan.json")}
    if "plan.json" not in arts.files:
        return {**rec, "status": "failed", "detail": "; ".join(arts.notes) or "no plan.json rendered"}
    ran = bench(work / "files" / "plan.json", work, suite, timeout_s)
    if ran["status"] == "ok" and not str(ran["measured_recompute"]).startswith(cfg.recompute):
        ran.update(
            status="failed",
            detail=f"the trainer recomputed {ran['measured_recompute']!r}, the plan says {cfg.recompute}",
        )
    return {**rec, **ran}


# The loop ------------------------------------------------------------------------------------------------------
Runner = Callable[[Config, float], Record]


def base_record(cfg: Config) -> Record:
    return {"label": cfg.label, **asdict(cfg)}


def needed_s(cfg: Config, suite: Suite) -> float:
    """Budget a run needs left to start: start-up and a few steps (the offload run twice that)."""
    return suite.min_start_s[cfg.model] * (2 if cfg.offload_optimizer != "none" else 1)


def run_all(
    configs: list[Config],
    suite: Suite,
    runner: Runner,
    results: Path,
    budget_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> list[Record]:
    """Each configuration within what is left of the budget, keeping back what the pair's later runs need to
    start; one JSON line per configuration as it finishes."""
    start, records = clock(), []
    for i, cfg in enumerate(configs):
        later_pair = sum(needed_s(c, suite) for c in configs[i + 1 :] if c.role == "pair")
        left = budget_s - (clock() - start) - REPORT_RESERVE_S - later_pair
        need, t0 = needed_s(cfg, suite), clock()
        if left < need:
            rec = {
                **base_record(cfg),
                "status": "skipped",
                "detail": f"time budget: {left:.0f} s left for it, needs {need:.0f} s",
            }
        else:
            limit = min(
                suite.offload_timeout_s if cfg.offload_optimizer != "none" else suite.timeout_s[cfg.model], left
            )
            try:
                rec = {**base_record(cfg), **runner(cfg, limit)}
            except Exception as exc:  # a planner or renderer refusal is a result too
                rec = {**base_record(cfg), "status": "failed", "detail": f"{type(exc).__name__}: {exc}"[:300]}
        rec["wall_s"] = round(clock() - t0, 1)
        with results.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        records.append(rec)
        print(f"[gpu_validation] {i + 1}/{len(configs)} {progress(rec)}", flush=True)
    return records


def progress(rec: Record) -> str:
    head = f"{rec['label']}: {rec['status']} in {rec['wall_s']:.0f} s"
    if rec["status"] != "ok":
        return f"{head} ({rec.get('detail', '')})"
    return (
        f"{head}; tokens/s {rec['measured_tokens_per_s']:.4g} (predicted {rec['predicted_tokens_per_s']:.4g}), "
        f"peak {size(rec['measured_allocated_bytes'])} ({rec['memory_kind']}; predicted allocated "
        f"{size(rec['predicted_allocated_bytes'])})"
    )


# Entry point ---------------------------------------------------------------------------------------------------
def probe(out: Path, timeout_s: float) -> dict[str, Any] | None:
    """The cluster profile of this machine, or None (the planner then uses its catalogue) if the probe fails."""
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "probe",
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--run-dir",
        str(out / "probe"),
        "--output",
        str(out / "cluster_profile.json"),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        print(f"[gpu_validation] probe: no result within {timeout_s:.0f} s; catalogue figures used", flush=True)
        return None
    (out / "probe.out").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        print(
            f"[gpu_validation] probe failed ({failure_detail(done.stdout + done.stderr)}); catalogue figures used",
            flush=True,
        )
        return None
    return json.loads((out / "cluster_profile.json").read_text())  # type: ignore[no-any-return]


def host_memory_gib() -> float:
    with open("/proc/meminfo") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    return kib / 2**20


def header_lines(suite: Suite, profile: dict[str, Any] | None, host_gib: float, chosen: Config | None) -> list[str]:
    dev = (profile or {}).get("device", {})
    return [
        f"date: {time.strftime('%Y-%m-%d %H:%M %Z')}; planner {__version__}",
        f"hardware: {dev.get('name', 'unknown (no profile)')}, {size(dev.get('memory_bytes') or None)}; "
        f"host memory {host_gib:.0f} GiB; torch {dev.get('torch', '-')}, CUDA {dev.get('cuda', '-')}; "
        f"planner GPU: {suite.gpu}",
        f"global batch {suite.global_batch_size} sequences (gradient accumulation = {suite.global_batch_size} / mbs); "
        f"bf16; {suite.steps} steps, median of the last {suite.steps - suite.warmup}",
        f"planner's unpinned choice: {chosen.label if chosen else 'none (nothing fits)'} (* in the table if it is "
        f"outside the grid)",
        *suite.extra_notes,
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])

    def ints(text: str) -> list[int]:
        return [int(v) for v in text.split(",")]

    p.add_argument("--out", default=os.environ.get("OUT", "runs/gpu-validation"), help="results directory ($OUT)")
    p.add_argument("--cpu", action="store_true", help="smoke run on CPU: tiny models, gloo, few steps")
    p.add_argument("--full-grid", action="store_true", help="ZeRO 1/2/3 x mbs 1/4/8/16 x recompute off/on")
    p.add_argument("--zero", type=ints, default=[1, 3], help="ZeRO stages of the grid (default 1,3)")
    p.add_argument("--mbs", type=ints, default=[1, 4, 16], help="micro-batch sizes of the grid (default 1,4,16)")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default 5; 3 with --cpu)")
    p.add_argument("--warmup", type=int, default=None, help="steps left out of the median (default 2; 1 with --cpu)")
    p.add_argument("--skip-offload", action="store_true", help="leave out the 7B CPU-offload run")
    p.add_argument("--skip-pair", action="store_true", help="leave out the 7B pair")
    p.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget for everything (default 540)")
    p.add_argument("--gpu", default="H200", help="the planner's GPU (catalogue name, default H200)")
    p.add_argument(
        "--moe", action="store_true", help="Hugging Face MoE models (Qwen3-MoE-like grid, Mixtral-like pair)"
    )
    p.add_argument("--seq", type=int, default=None, help="every model at this sequence length (long context)")
    p.add_argument("--moe-mbs", type=ints, default=[2, 8], help="micro-batch sizes of the --moe grid (default 2,8)")
    args = p.parse_args(argv)
    args.steps = args.steps or (3 if args.cpu else 5)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.cpu else 2)
    if args.steps <= args.warmup:
        p.error(f"--steps({args.steps}) must be > --warmup({args.warmup})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    suite, out, start = suite_for(args), Path(args.out), time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.jsonl").write_text("")
    profile, host = probe(out, 120.0), host_memory_gib()
    cluster = {"num_nodes": 1, "gpus_per_node": 1, "gpu": suite.gpu, "cpu_memory_GiB": host, "profile": profile}
    chosen = planner_choice(suite, cluster)
    configs = run_order(suite, chosen)
    print(
        f"[gpu_validation] {len(configs)} configuration(s); planner's choice: {chosen.label if chosen else 'none'}",
        flush=True,
    )

    def runner(cfg: Config, limit: float) -> Record:
        return validate(cfg, suite, cluster, out, limit)

    left = args.budget_s - (time.monotonic() - start)
    records = run_all(configs, suite, runner, out / "results.jsonl", left)
    summary = summarise(records, chosen.label if chosen else None, suite.grid_model)
    text, md = report(records, summary, header_lines(suite, profile, host, chosen))
    (out / "table.txt").write_text(text + "\n")
    (out / "table.md").write_text(md + "\n")
    (out / "summary.json").write_text(
        json.dumps(
            {
                "targets": TARGETS,
                "summary": summary,
                "suite": {
                    "steps": suite.steps,
                    "warmup": suite.warmup,
                    "global_batch_size": suite.global_batch_size,
                    "accelerator": suite.accelerator,
                    "chosen": chosen.label if chosen else None,
                },
            },
            indent=1,
        )
        + "\n"
    )
    print("\n" + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
