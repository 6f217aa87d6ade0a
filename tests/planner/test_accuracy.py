"""A regression guard on the measured runs (benchmarks/data): every evaluable row of the validation set is evaluated
on the stack that ran it. Constants are per stack and GPU generation, never per row; these tests fail if a change to
the model moves the predictions away from the measurements, calls a run that really ran infeasible, or breaks the
calibration of the 80 % intervals."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

from app.planner import validation
from app.planner.estimate import evaluate

ROOT = Path(__file__).resolve().parents[2]


def _accuracy() -> Any:
    spec = importlib.util.spec_from_file_location("accuracy_benchmark", ROOT / "benchmarks" / "accuracy.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["accuracy_benchmark"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    runs, skipped = validation.load()
    # 285 published + 9 H200 rows; PaxML (JAX) and analytical rows skipped
    assert len(runs) == 273 and len(skipped) == 21
    return list(_accuracy().evaluate_runs(runs))


def _family(rows: list[dict[str, Any]], family: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["family"] == family]


# Targets (issue 11): median <= 5%, p90 <= 12%, max <= 30% in every family with 10+ rows; every family meets
# them (megatron-a100 since DeepSpeed ZeRO-3 is timed unit by unit, traffic.py `_zero3_module_exposed`).
GUARD = {family: (0.05, 0.12, 0.30) for family in ("dgxc-h100", "llm-foundry-a100", "megatron-a100", "maxtext-h100")}


@pytest.mark.parametrize("family", sorted(GUARD))
def test_step_time_error_per_family(rows: list[dict[str, Any]], family: str) -> None:
    errors = sorted(abs(r["error"]) for r in _family(rows, family))
    median, p90, worst = GUARD[family]
    assert statistics.median(errors) <= median
    assert _accuracy().quantile(errors, 0.9) <= p90
    assert errors[-1] <= worst


def test_h200_tokens_per_second_within_15_percent_at_every_setting(rows: list[dict[str, Any]]) -> None:
    h200 = _family(rows, "h200-deepspeed")
    assert len(h200) == 9
    for r in h200:
        assert abs(r["error"]) <= 0.15, r["name"]


def test_measured_runs_are_feasible(rows: list[dict[str, Any]]) -> None:
    infeasible = [r["name"] for r in rows if not r["feasible"]]
    assert not infeasible, infeasible  # every measured run really ran


def test_nemotron_340b_fits_128_h100_only_with_its_bf16_optimizer_state(rows: list[dict[str, Any]]) -> None:
    """NVIDIA's recipe keeps Adam's state in bf16 (optim.dtype: bf16); with fp32 state (12 B/param over DP 2) the
    same layout does not fit 80 GB, with bf16 state (6 B/param) it does."""
    run = next(r for r in validation.load()[0] if r.name == "Nemotron-4 340B BF16 128xH100")
    assert run.training.optimizer_states == "bf16"
    fp32 = run.training.model_copy(update={"optimizer_states": "fp32"})
    with_bf16 = evaluate(run.model, run.cluster, run.training, run.parallel)
    with_fp32 = evaluate(run.model, run.cluster, fp32, run.parallel)
    assert with_bf16.feasible and not with_fp32.feasible
    saved = (with_fp32.memory.peak_bytes - with_bf16.memory.peak_bytes) / 2**30
    assert saved == pytest.approx(6 * 5.8e9 / 2 / 2**30, rel=0.1)  # 6 B/param of a ~5.8B-param stage over 2 ranks


def test_intervals_cover_75_to_90_percent_per_stack(rows: list[dict[str, Any]]) -> None:
    """Per stack and per stack x GPU generation (what an interval is taken from), wherever 9 or more rows are: the
    14 Megatron-core A100 rows held 71 % with interpolated ends (benchmarks/accuracy.py `quantile(..., hazen=True)`)."""
    by: dict[tuple[str, ...], list[bool]] = {}
    for r in rows:
        by.setdefault((r["stack"],), []).append(r["in_interval"])
        by.setdefault((r["stack"], r["generation"]), []).append(r["in_interval"])
    checked = 0
    for name, inside in by.items():
        if len(inside) >= 9:
            assert 0.75 <= sum(inside) / len(inside) <= 0.90, (name, sum(inside) / len(inside))
            checked += 1
    assert checked >= 10


def test_activation_memory_of_korthikanti_figure_1() -> None:
    acts = _accuracy().activation_rows()
    assert len(acts) == 8
    for a in acts:
        assert abs(a["error"]) < 0.002, a["name"]


def test_fsdp_rows_as_megatron_fsdp_and_zero3() -> None:
    """Issue 16: the MosaicML FSDP rows as Megatron-FSDP and as DeepSpeed ZeRO-3 would run them. Every mapped
    layout obeys every rule; those refused run out of memory (Megatron keeps more activations per token than MPT's
    fused layer, and a Hugging Face model in eager mode more still), never fewer with Megatron-FSDP than FSDP."""
    runs, _ = validation.load()
    foundry = [r for r in runs if r.family == "llm-foundry-a100"]
    accuracy = _accuracy()
    for mode in validation.SHARDED_MAPPINGS:
        mapped = accuracy.evaluate_runs([validation.fully_sharded_mappings(r)[mode] for r in foundry])
        assert len(mapped) == len(foundry)
        refused = [m for m in mapped if not m["feasible"]]
        assert all(reason.startswith("stage ") for m in refused for reason in m["reasons"]), refused[:1]
        summary = accuracy.summarise(mapped)
        assert summary["median"] < 0.15
    fsdp = accuracy.summarise(accuracy.evaluate_runs(foundry))
    megatron = accuracy.summarise(
        accuracy.evaluate_runs([validation.fully_sharded_mappings(r)["megatron-fsdp"] for r in foundry])
    )
    zero3 = accuracy.summarise(
        accuracy.evaluate_runs([validation.fully_sharded_mappings(r)["deepspeed-zero3"] for r in foundry])
    )
    assert fsdp["infeasible"] <= megatron["infeasible"] < zero3["infeasible"]


def test_the_residuals_file_is_what_the_rows_give(rows: list[dict[str, Any]]) -> None:
    """app/planner/data/residuals.json is `benchmarks/accuracy.py --write-residuals` of today's model: the spreads
    and what the runs cover (a change to the model that moves the residuals must rewrite it)."""
    from app.planner import catalog

    fresh = _accuracy().residual_table(rows)
    stored = catalog.load_data("residuals.json")["residuals"]
    assert set(fresh) == set(stored)
    for stack, gens in fresh.items():
        for gen, entry in gens.items():
            for kind, values in entry.items():
                got = stored[stack][gen][kind]
                assert got["runs"] == values["runs"] and got.get("covers") == values.get("covers"), (stack, gen)
                assert got["q10"] == pytest.approx(values["q10"], abs=1e-9), (stack, gen, kind)
                assert got["q90"] == pytest.approx(values["q90"], abs=1e-9), (stack, gen, kind)


def test_intervals_widen_outside_what_the_runs_cover() -> None:
    """The Megatron-core H100 runs cover MoE up to 8 experts (Grok-1), no MLA and sequences up to 8,192: Mixtral
    (8 experts) and Llama-3 8B at 8K keep the measured spread; DeepSeek-V3 (256 experts, MLA) and Llama-3 8B at
    32K fall back to the widest spread widened by half, naming why; the memory interval is the stack's either way."""
    from app.planner import uncertainty

    def est(model: Any, **par: Any) -> Any:
        return _estimate(model, "H100-SXM", 8, **par).time.step_interval

    def width(iv: Any) -> float:
        return float(iv.high / iv.low)

    measured = est("mixtral-8x7b", tp=1, dp=64, ep=8, distributed_optimizer=True)
    dense = est("llama-3-8b", tp=1, dp=64, distributed_optimizer=True)
    long = est({"preset": "llama-3-8b", "seq_length": 32768}, tp=8, dp=8, distributed_optimizer=True)
    deepseek = est("deepseek-v3-like", tp=1, pp=8, dp=8, ep=8, etp=1, distributed_optimizer=True)
    assert "from 88 measured runs" in measured.basis and "from 88 measured runs" in dense.basis
    assert "a MoE of 256 experts (its MoE runs have at most 8)" in deepseek.basis
    assert "multi-latent attention" in deepseek.basis
    assert "sequence length 32,768 (its runs reach 8,192)" in long.basis
    assert width(deepseek) == pytest.approx(width(long)) and width(deepseek) > width(dense) + 0.15
    low, high = uncertainty._fallback("time")
    assert width(deepseek) == pytest.approx((1 + high) / (1 + low))


def test_the_step_interval_of_a_narrow_eager_moe_reaches_its_published_runs() -> None:
    """Megatron-core's cost model leaves out the host cost of narrow MoE layers run eagerly (data/stacks.json
    `unmodelled`): NVIDIA's Qwen3-30B-A3B and gpt-oss-120b runs took up to 1.51x the predicted step. A narrow MoE's
    step interval reaches 1 / (1 - 0.34) of the prediction and says why; a wide one (Mixtral, hidden 4096) and a dense
    model keep their spread, and memory is not widened."""
    narrow = _estimate("qwen3-30b-a3b", "H100-SXM", 2, tp=1, dp=16, ep=16, etp=1, distributed_optimizer=True)
    wide = _estimate("mixtral-8x7b", "H100-SXM", 2, tp=1, dp=16, ep=8, distributed_optimizer=True)
    step, iv = narrow.time.step_s, narrow.time.step_interval
    assert iv.high == pytest.approx(step / (1 - 0.34)) and step / (1 - 0.34) > 1.5 * step
    assert "the host cost of narrow MoE layers run eagerly (hidden 2048 < 4096)" in iv.basis
    assert "to 1.52x the predicted step, as far as published runs of such layouts went" in iv.basis
    assert "narrow MoE" not in wide.time.step_interval.basis
    assert wide.time.step_interval.high < 1.2 * wide.time.step_s
    assert "narrow MoE" not in (narrow.memory.peak_interval.basis or "")


def _estimate(model: Any, gpu: str, nodes: int, **par: Any) -> Any:
    """The planner's estimate of one layout of `model` on `nodes` x 8 `gpu` at global batch 64."""
    from app.planner import PlanRequest
    from app.planner.estimate import evaluate
    from app.planner.specs import ParallelConfig

    r = PlanRequest(model=model, cluster={"num_nodes": nodes, "gpu": gpu}, training={"global_batch_size": 64})
    return evaluate(r.model, r.cluster, r.training, ParallelConfig(**par))
