"""benchmarks/gpu_validation.py without a GPU: the memory comparison, the targets, the table, the failure reading
and the budgeted loop, on synthetic results (fast); the real subprocess paths run in test_gpu_validation_smoke.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import gpu_validation as gv  # noqa: E402
import gpu_validation_report as rep  # noqa: E402

from app.planner.layout import stage_shapes  # noqa: E402
from app.planner.memory import stage_parts  # noqa: E402

H200 = {"num_nodes": 1, "gpus_per_node": 1, "gpu": "H200", "cpu_memory_GiB": 125}


def record(
    label: str,
    *,
    status: str = "ok",
    fits: bool = True,
    alloc: tuple[float, float] = (10.0, 10.0),
    tokens: tuple[float, float] = (100.0, 100.0),
    model: str = "m",
    role: str = "grid",
    kind: str = "cuda_max_memory_allocated",
) -> dict[str, Any]:
    """A results.jsonl line; alloc and tokens are (predicted, measured), memory in GiB."""
    ran = status == "ok"
    return {
        "label": label,
        "model": model,
        "role": role,
        "status": status,
        "predicted_fits": fits,
        "predicted_allocated_bytes": alloc[0] * 2**30,
        "predicted_reserved_bytes": alloc[0] * 1.05 * 2**30,
        "predicted_tokens_per_s": tokens[0],
        "memory_kind": kind if ran else None,
        "measured_allocated_bytes": alloc[1] * 2**30 if ran else None,
        "measured_reserved_bytes": alloc[1] * 1.1 * 2**30 if ran and kind.startswith("cuda") else None,
        "measured_tokens_per_s": tokens[1] if ran else None,
    }


@pytest.mark.parametrize(
    "par",
    [
        {"dp": 1, "zero_stage": 1, "micro_batch_size": 4, "recompute": "none"},
        {"dp": 1, "zero_stage": 3, "micro_batch_size": 16, "recompute": "full"},
        {"dp": 1, "zero_stage": 3, "micro_batch_size": 1, "recompute": "full", "offload_optimizer": "cpu"},
    ],
)
def test_allocated_prediction_is_states_activations_and_buckets_only(par: dict[str, Any]) -> None:
    """The allocated peak compared with torch's is the planner's weights + grads + optimizer + activations (or the
    step's temporaries) + buckets/gathered parameters; reserved adds the stack's fragmentation and slack; the total
    the runtime overhead outside the allocator (app/planner/memory.py)."""
    args = gv.parse_args([])
    suite = gv.suite_for(args)
    req = gv.request_for(suite, "llama-1.1b", H200)
    cfg = gv.Config(
        "llama-1.1b", par["zero_stage"], par["micro_batch_size"], par["recompute"], par.get("offload_optimizer", "none")
    )
    result, est = gv.pinned_result(req, cfg.parallel())
    eff = result.cluster.gpu.efficiency
    stage = est.memory.stages[0]
    allocated, reserved = gv.allocator_prediction(stage, eff)
    shape = stage_shapes(req.model, req.training, cfg.parallel())[0]
    p = stage_parts(req.model, result.cluster, req.training, cfg.parallel(), shape, req.model.num_layers, 0, 0)
    assert allocated == pytest.approx(p.allocated, rel=1e-8)
    costs = req.training.software.generation(result.cluster.gpu.generation)
    assert reserved == pytest.approx(
        allocated * (1 + costs.allocator_fragmentation) + costs.allocator_slack_bytes, rel=1e-8
    )
    assert stage.total_bytes - reserved == pytest.approx(eff.runtime_overhead_bytes, abs=2)
    if p.phase == "backward":
        states = p.weights + p.grads + p.optimizer
        assert states + p.activations < allocated  # the rest: buckets and gathered parameters
    rec = gv.predicted(est, eff)
    assert rec["predicted_fits"] == est.feasible and rec["predicted_tokens_per_s"] == est.time.tokens_per_s


def test_error_is_measured_minus_predicted_over_predicted() -> None:
    assert rep.pct(100.0, 110.0) == pytest.approx(10.0)
    assert rep.pct(200.0, 150.0) == pytest.approx(-25.0)
    assert rep.pct(None, 1.0) is None and rep.pct(0.0, 1.0) is None and rep.pct(1.0, None) is None
    t = rep.within(
        [record("a", alloc=(10, 10.5)), record("b", alloc=(10, 8.8))],
        "predicted_allocated_bytes",
        "measured_allocated_bytes",
        10.0,
    )
    assert (t["pass"], t["n"], t["within"], t["worst"]) == (False, 2, 1, "b")
    assert t["worst_pct"] == pytest.approx(-12.0)


def test_a_plan_predicted_to_fit_that_ran_out_of_memory_fails_the_target() -> None:
    records = [
        record("fit-ok"),
        record("fit-oom", status="oom"),
        record("nofit-oom", status="oom", fits=False),
        record("nofit-ran", fits=False),
    ]
    s = rep.summarise(records, "fit-ok", "m")
    assert s["no_fit_oom"]["pass"] is False and s["no_fit_oom"]["violations"] == ["fit-oom"]
    assert s["no_fit_oom"]["predicted_no_fit"] == ["nofit-oom", "nofit-ran"]
    assert s["statuses"] == {"ok": 2, "oom": 2}
    clean = rep.summarise([record("fit-ok"), record("nofit-oom", status="oom", fits=False)], "fit-ok", "m")
    assert clean["no_fit_oom"]["pass"] is True
    assert any("ran out of memory: PASS" in line for line in rep.summary_lines(clean))


def test_chosen_against_the_fastest_measured() -> None:
    grid = [
        record("slow", tokens=(100, 90)),
        record("best", tokens=(100, 100)),
        record("near", tokens=(100, 97.5)),
        record("other-model", tokens=(1, 500), model="x"),
    ]
    best = rep.chosen_vs_best(grid, "best", "m")
    assert (best["pass"], best["fastest"], best["ratio"], best["best"]) == (True, True, 1.0, "best")
    near = rep.chosen_vs_best(grid, "near", "m")
    assert (near["pass"], near["fastest"]) == (True, False) and near["ratio"] == pytest.approx(0.975)
    slow = rep.chosen_vs_best(grid, "slow", "m")
    assert slow["pass"] is False and slow["ratio"] == pytest.approx(0.9)
    oom = rep.chosen_vs_best([*grid, record("chosen", status="oom")], "chosen", "m")
    assert oom["pass"] is False and oom["ratio"] is None and "no measurement" in oom["detail"]
    assert rep.chosen_vs_best([record("a", status="timeout")], "a", "m")["pass"] is None
    line = next(ln for ln in rep.summary_lines(rep.summarise(grid, "slow", "m")) if "planner's choice" in ln)
    assert "0.900 of the fastest measured (best)" in line and "FAIL" in line


def test_memory_target_compares_allocator_figures_only() -> None:
    """A CPU run reports max RSS: shown, marked not comparable, and left out of the memory target."""
    cpu = record("cpu", alloc=(0.01, 0.4), kind="cpu_max_rss")
    s = rep.summarise([cpu], "cpu", "m")
    assert s["memory"]["pass"] is None and s["tokens_per_s"]["n"] == 1
    assert rep.summary_lines(s)[0] == "peak memory (allocated) within 10 %: n/a (no comparable measurement)"
    row = rep.row(cpu)
    assert row[4].endswith("RSS") and row[5] == "n/c"
    gpu = rep.summarise([record("g", alloc=(40, 42)), record("h", alloc=(40, 44.4))], "g", "m")
    assert gpu["memory"]["pass"] is False and gpu["memory"]["worst"] == "h"
    assert gpu["memory_reserved"]["n"] == 2


def test_table_has_a_row_per_configuration_and_the_targets(tmp_path: Path) -> None:
    records = [
        record("a", alloc=(40, 41), tokens=(70_000, 66_000)),
        record("b", status="oom"),
        record("c", status="skipped", role="planner"),
    ]
    records[2]["predicted_fits"] = None
    text, md = rep.report(records, rep.summarise(records, "c", "m"), ["date: today", "hardware: test"])
    lines = text.splitlines()
    assert lines[0] == "date: today" and lines[3].split()[:3] == ["config", "fits", "status"]
    row_a = next(ln for ln in lines if ln.startswith("a "))
    assert "40.00 GiB" in row_a and "41.00 GiB" in row_a and "+2.5 %" in row_a and "-5.7 %" in row_a
    assert "70,000" in row_a and "66,000" in row_a
    assert next(ln for ln in lines if ln.startswith("c *")).split()[2] == "-"  # fits unknown
    assert md.count("\n| ") == 4 and "|---|" in md and "- date: today" in md
    assert sum(ln.startswith("- ") for ln in md.splitlines()) == 2 + 6


TORCHRUN_TAIL = "exitcode  : 1 (pid: 7425)\nerror_file: <N/A>\nlauncher: job finished: exit code 1"


@pytest.mark.parametrize(
    ("text", "status", "detail"),
    [
        (
            "Traceback ...\n[default0]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
            "RuntimeError: later noise\n" + TORCHRUN_TAIL,
            "oom",
            "[default0]:torch.OutOfMemoryError: CUDA out of memory",
        ),
        ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate", "oom", "RuntimeError: CUDA"),
        ("Traceback\nValueError: bad config\n" + TORCHRUN_TAIL, "failed", "ValueError: bad config"),
        ("torch.distributed.elastic...: exitcode: -9 (Signal 9 (SIGKILL) received by PID 7)", "failed", "exitcode: -9"),
        ("just some output", "failed", "just some output"),
    ],
)
def test_failures_are_read_from_the_output(text: str, status: str, detail: str) -> None:
    assert gv.classify_failure(text) == status
    assert gv.failure_detail(text).startswith(detail) or detail in gv.failure_detail(text)
    assert gv.failure_detail("") == "no output"


def test_order_puts_the_planners_choice_after_the_grid_and_offload_last() -> None:
    suite = gv.suite_for(gv.parse_args([]))
    assert len(suite.grid) == 12 and {c.label for c in suite.grid} >= {
        "llama-1.1b-z1-mbs1-rcoff",
        "llama-1.1b-z3-mbs16-rcon",
    }
    in_grid = gv.Config("llama-1.1b", 3, 16, "none", role="planner")
    order = gv.run_order(suite, in_grid)
    assert len(order) == 14 and order[-1].label == "llama-2-7b-z3-mbs1-rcon-offload"
    assert order[0] == gv.Config("llama-1.1b", 3, 16, "none") and order[0].role == "grid"  # the grid's own entry
    assert len({c.label for c in order}) == 14
    outside = gv.Config("llama-1.1b", 2, 8, "none", role="planner")
    order = gv.run_order(suite, outside)
    assert order[0] == outside and len(order) == 15 and order[1:13] == list(suite.grid)
    assert gv.run_order(suite, None)[:12] == list(suite.grid)
    assert len(gv.suite_for(gv.parse_args(["--full-grid"])).grid) == 24
    assert [c.offload_optimizer for c in gv.suite_for(gv.parse_args(["--skip-offload"])).pair] == ["none"]
    assert gv.suite_for(gv.parse_args(["--zero", "2", "--mbs", "8", "--skip-pair"])).pair == ()
    cpu = gv.suite_for(gv.parse_args(["--cpu"]))
    assert (cpu.accelerator, cpu.steps, cpu.warmup, len(cpu.grid), len(cpu.pair)) == ("cpu", 3, 1, 2, 2)
    with pytest.raises(SystemExit):
        gv.parse_args(["--steps", "2", "--warmup", "2"])


def run_fake(tmp_path: Path, budget_s: float, run_s: float) -> tuple[list[dict[str, Any]], list[float]]:
    """The default GPU order (12 grid + 7B + 7B offload) through a stand-in runner that takes run_s per run on a
    fake clock and raises for one grid point."""
    suite = gv.suite_for(gv.parse_args([]))
    configs = gv.run_order(suite, None)
    now = [0.0]
    limits: list[float] = []

    def runner(cfg: gv.Config, limit: float) -> dict[str, Any]:
        limits.append(limit)
        if cfg.label == "llama-1.1b-z1-mbs4-rcoff":
            raise ValueError("renderer refused")
        now[0] += run_s
        ran = record(cfg.label)
        return {k: v for k, v in ran.items() if k.startswith(("predicted", "measured", "memory", "status"))}

    results = tmp_path / "results.jsonl"
    records = gv.run_all(configs, suite, runner, results, budget_s=budget_s, clock=lambda: now[0])
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["label"] for r in lines] == [c.label for c in configs] and lines == records
    return records, limits


def test_the_loop_writes_a_line_per_configuration_and_records_refusals(tmp_path: Path) -> None:
    records, limits = run_fake(tmp_path, budget_s=10_000.0, run_s=30.0)
    statuses = [r["status"] for r in records]
    assert statuses.count("ok") == 13 and records[2]["status"] == "failed"
    assert "ValueError: renderer refused" in records[2]["detail"]
    assert limits[0] == 150.0 and limits[-2:] == [240.0, 300.0]  # per-model timeouts, offload last
    assert records[0]["wall_s"] == 30.0 and records[0]["zero_stage"] == 1 and records[0]["role"] == "grid"


def test_the_loop_keeps_to_its_budget_and_keeps_room_for_the_pair(tmp_path: Path) -> None:
    """At 40 s a run, 400 s leave room for 5 grid runs once the pair's 60 + 120 s are kept back; the 7B run
    keeps back the offload run's 120 s, which then gets what is left."""
    records, limits = run_fake(tmp_path, budget_s=400.0, run_s=40.0)
    statuses = [r["status"] for r in records]
    assert statuses[:6] == ["ok", "ok", "failed", "ok", "ok", "ok"]
    assert statuses[6:12] == ["skipped"] * 6 and "time budget" in records[6]["detail"]
    assert statuses[12:] == ["ok", "ok"]
    assert all(limit <= 400.0 - gv.REPORT_RESERVE_S for limit in limits)
    assert limits[-2] == 400.0 - 5 * 40.0 - gv.REPORT_RESERVE_S - 120.0  # the 7B run: what the offload run leaves
    assert limits[-1] == 400.0 - 6 * 40.0 - gv.REPORT_RESERVE_S  # the offload run: the rest


def test_a_run_that_did_not_recompute_as_planned_is_not_a_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """validate renders the pinned plan (the recompute flags reach plan.json) and refuses a run whose trainer
    reports another recomputation."""
    suite = gv.suite_for(gv.parse_args([]))
    seen: list[list[str]] = []

    def fake_bench(plan_json: Path, work: Path, suite: gv.Suite, timeout_s: float) -> dict[str, Any]:
        seen.append(json.loads(plan_json.read_text())["entrypoint"]["args"])
        return {"status": "ok", "detail": "", "measured_recompute": "none"}

    monkeypatch.setattr(gv, "bench", fake_bench)
    full = gv.validate(gv.Config("llama-1.1b", 1, 4, "full"), suite, H200, tmp_path, 60.0)
    assert full["status"] == "failed" and "recomputed 'none', the plan says full" in full["detail"]
    assert full["predicted_fits"] is True and full["predicted_allocated_bytes"] > 2**30
    assert "--recompute-granularity" in seen[0] and seen[0][seen[0].index("--recompute-granularity") + 1] == "full"
    plain = gv.validate(gv.Config("llama-1.1b", 1, 4, "none"), suite, H200, tmp_path, 60.0)
    assert plain["status"] == "ok" and "--recompute-granularity" not in seen[1]
    assert json.loads(Path(plain["plan_json"]).read_text())["job"]["name"] == "llama-1-1b-z1-mbs4-rcoff"


def test_every_gpu_configuration_renders_a_plan_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The full grid, the pair and a planner pick outside the grid all get through the planner and the renderer
    (job names, recompute and offload flags) before any GPU time is spent."""

    def fake_bench(plan_json: Path, work: Path, suite: gv.Suite, timeout_s: float) -> dict[str, Any]:
        args = json.loads(plan_json.read_text())["entrypoint"]["args"]
        flag = "--recompute-granularity"
        return {
            "status": "ok",
            "detail": "",
            "measured_recompute": args[args.index(flag) + 1] if flag in args else "none",
        }

    monkeypatch.setattr(gv, "bench", fake_bench)
    suite = gv.suite_for(gv.parse_args(["--full-grid"]))
    configs = gv.run_order(suite, gv.Config("llama-1.1b", 2, 2, "none", role="planner"))
    records = [gv.validate(c, suite, H200, tmp_path, 60.0) for c in configs]
    assert len(records) == 27 and all(r["status"] == "ok" for r in records), [r.get("detail") for r in records]
    by_label = dict(zip([c.label for c in configs], records, strict=True))
    sys.path.insert(0, str(ROOT / "examples"))
    import train_gpt

    for cfg, rec in zip(configs, records, strict=True):  # the trainer reads every argument the plan gives it
        plan = json.loads(Path(rec["plan_json"]).read_text())
        assert plan["world"]["accelerator"] == "cuda" and plan["parallel"]["zero_stage"] == cfg.zero_stage
        args = train_gpt.parse_args([a.replace("{run_dir}", str(tmp_path)) for a in plan["entrypoint"]["args"]])
        assert args.ignored == [] and (args.micro_batch_size, args.global_batch_size) == (cfg.micro_batch_size, 16)
        assert (args.recompute is not None) == (cfg.recompute == "full")
        shape = (
            args.num_layers,
            args.hidden_size,
            args.num_attention_heads,
            args.num_query_groups,
            args.ffn_hidden_size,
            args.vocab_size,
            args.seq_length,
            args.swiglu,
            args.untie_embeddings_and_output_weights,
            args.normalization,
            args.position_embedding_type,
        )
        assert shape == (
            (22, 2048, 32, 4, 5632, 32000, 2048, True, True, "RMSNorm", "rope")
            if cfg.model == "llama-1.1b"
            else (32, 4096, 32, None, 11008, 32000, 2048, True, True, "RMSNorm", "rope")
        ), cfg.label  # MHA
    offload = json.loads(
        (Path(by_label["llama-2-7b-z3-mbs1-rcon-offload"]["plan_json"]).parent / "ds_config.json").read_text()
    )
    assert offload["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    # 7B ZeRO-3 on one H200: 100 GiB of states + the step's temporaries, 124 GiB predicted (127 at the interval's
    # upper end) of 140.4 GiB; the offloaded twin keeps the fp32 states, and their fp32 gradients, on the host:
    # 18 B x 6.7e9 = 117 GiB, past 90 % of the machine's 125 GiB (it counted 14 B, 91 GiB, before 2026-12-06): the
    # run measures whether it does fit
    without, offloaded = by_label["llama-2-7b-z3-mbs1-rcon"], by_label["llama-2-7b-z3-mbs1-rcon-offload"]
    assert without["predicted_fits"] is True and offloaded["predicted_fits"] is False
    assert offloaded["predicted_reserved_bytes"] < without["predicted_reserved_bytes"] - 50 * 2**30


def test_the_moe_suite_renders_transformers_sparse_blocks_for_the_trainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--moe`: a Qwen3-MoE-like grid and a Mixtral-like pair; each rendered plan passes the trainer the experts'
    flags and --model-impl hf, and the trainer reads every argument (nothing ignored)."""

    def fake_bench(plan_json: Path, work: Path, suite: gv.Suite, timeout_s: float) -> dict[str, Any]:
        args = json.loads(plan_json.read_text())["entrypoint"]["args"]
        full = "--recompute-granularity" in args
        return {"status": "ok", "detail": "", "measured_recompute": "full" if full else "none"}

    monkeypatch.setattr(gv, "bench", fake_bench)
    suite = gv.suite_for(gv.parse_args(["--moe"]))
    assert suite.grid_model == "qwen3-moe-1b" and {c.model for c in suite.pair} == {"mixtral-2b"}
    assert len(suite.grid) == 8 and suite.global_batch_size == 8
    sys.path.insert(0, str(ROOT / "examples"))
    import train_gpt

    for cfg in (suite.grid[0], suite.pair[0]):
        rec = gv.validate(cfg, suite, H200, tmp_path, 60.0)
        assert rec["status"] == "ok", rec.get("detail")
        plan = json.loads(Path(rec["plan_json"]).read_text())
        args = train_gpt.parse_args([a.replace("{run_dir}", str(tmp_path)) for a in plan["entrypoint"]["args"]])
        shape = gv.QWEN3_MOE_1B if cfg.model == "qwen3-moe-1b" else gv.MIXTRAL_2B
        assert args.ignored == [] and args.model_impl == "hf"
        assert (args.num_experts, args.moe_router_topk, args.moe_ffn_hidden_size, args.qk_layernorm) == (
            shape["num_experts"],
            shape["moe_router_topk"],
            shape["moe_ffn_hidden_size"],
            shape["qk_layernorm"],
        )


def test_seq_puts_every_model_of_the_suite_at_that_length() -> None:
    suite = gv.suite_for(gv.parse_args(["--seq", "16384", "--moe"]))
    assert {m["seq_length"] for m in suite.models.values()} == {16384}
    assert suite.extra_notes[-1] == "every model at sequence length 16384 (--seq)"
    assert gv.suite_for(gv.parse_args([])).models["llama-1.1b"]["seq_length"] == 2048
