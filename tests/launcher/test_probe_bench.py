"""`probe` and `bench` on CPU (gloo, small sizes): every measurement path runs in real worker processes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import processes_mentioning, run_launcher, write_plan
from make_plan import tiny_plan

from launcher.profile import OPS, validate
from launcher.spec import Hardware, Prediction

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def test_probe_without_a_plan_writes_a_valid_profile(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    done = run_launcher(
        "probe",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        "--output",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "probe: gemm fp32" in done.stdout and "probe: CPU AdamW" in done.stdout  # progress, live
    profile = json.loads(out.read_text())
    validate(profile)
    assert (profile["num_nodes"], profile["gpus_per_node"]) == (1, 2)
    assert profile["device"]["backend"] == "gloo" and profile["host_to_device"] is None
    assert {g["precision"] for g in profile["gemm"]} == {"fp32", "bf16"}
    rows = profile["collectives"]
    assert {(c["op"], c["scope"], c["ranks"]) for c in rows} == {(op, "intra_node", 2) for op in OPS}
    for c in rows:
        assert c["algbw_GBps"] == pytest.approx(c["bytes"] / c["time_s"] / 1e9)
        factor = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "send_recv": 1.0}[c["op"]]
        assert c["busbw_GBps"] == pytest.approx(c["algbw_GBps"] * factor)
    assert len({c["bytes"] for c in rows}) == 3
    assert not processes_mentioning(str(tmp_path))


def test_probe_with_a_plan_compares_with_its_catalogue(tmp_path: Path) -> None:
    plan = replace(
        tiny_plan(),
        hardware=Hardware(
            name="cpu", bf16_TFLOPs=1.0, fp16_TFLOPs=1.0, intra_node_GBps=10.0, cpu_adam_params_per_s=1e9
        ),
    )
    done = run_launcher("probe", str(write_plan(tmp_path, plan)), "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = {line.split("  ")[0]: line.split() for line in done.stdout.splitlines() if line.startswith(("GEMM", "CPU"))}
    ratio = float(table["GEMM bf16 (best shape)"][-1])
    measured = float(table["GEMM bf16 (best shape)"][4])
    assert ratio == pytest.approx(round(measured / 1.0, 2))  # catalogue bf16 peak is 1 TFLOP/s
    profile = json.loads((tmp_path / "run" / "cluster_profile.json").read_text())
    # the plan's model gives the GEMM shapes: tokens x h x h with tokens = mbs * seq = 64, h = 64
    first = profile["gemm"][0]
    assert [first["m"], first["n"], first["k"]] == [64, 64, 64]


def test_bench_reports_measured_next_to_predicted(tmp_path: Path) -> None:
    plan = replace(
        tiny_plan(), prediction=Prediction(tokens_per_s=5000.0, step_s=0.0256, peak_memory_bytes=(300 * 2**20,))
    )
    out = tmp_path / "bench.json"
    done = run_launcher(
        "bench",
        str(write_plan(tmp_path, plan)),
        "--steps",
        "6",
        "--warmup",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        "--output",
        str(out),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["steps"] == 6 and report["memory_kind"] == "cpu_max_rss" and "max RSS" in report["note"]
    tps = report["tokens_per_s"]
    assert tps["predicted"] == 5000.0 and tps["measured"] > 0
    assert tps["error_pct"] == pytest.approx(100 * (tps["measured"] - 5000.0) / 5000.0)
    assert report["step_s"]["measured"] == pytest.approx(4 * 32 / tps["measured"])  # gbs 4 x seq 32 tokens
    assert [m["rank"] for m in report["peak_memory"]] == [0, 1]
    assert all(m["predicted_bytes"] == 300 * 2**20 and m["measured_bytes"] > 2**20 for m in report["peak_memory"])
    assert "peak memory rank 1 (stage 0)" in done.stdout and "tokens_per_s" in done.stdout
    # measured from step 0 without saving: it resumed from, and wrote into, the plan's checkpoint directory, and a
    # second bench found its step 6 there and crashed with a traceback (QA, 2026-12-06)
    assert not (tmp_path / "run" / "checkpoints").exists()
    metrics = json.loads((tmp_path / "run" / "metrics" / "rank0.json").read_text())
    assert metrics["resumed_from"] == 0 and len(metrics["steps"]) == 6


def test_probe_refuses_zero_gpus_per_node(tmp_path: Path) -> None:
    """--gpus-per-node 0 was read as "not given": two processes measured and exit 0 (QA 2026-12-07)."""
    done = run_launcher("probe", "--nodes", "1", "--gpus-per-node", "0", timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and "--gpus-per-node(0) must be >= 1" in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "cluster_profile.json").exists()


def test_bench_refuses_fewer_steps_than_warm_up_with_exit_2(tmp_path: Path) -> None:
    """Refused before the start, as every refusal is (exit 2); it exited 1 (QA 2026-12-07)."""
    plan = write_plan(tmp_path, tiny_plan())
    done = run_launcher("bench", plan, "--steps", "3", "--warmup", "5", timeout=60)
    assert done.returncode == 2 and "--steps(3) must be > --warmup(5)" in done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("steps", "warmup", "why"), [("-1", "-5", "--warmup(-5) must be >= 0"), ("0", "-1", "--warmup(-1)")]
)
def test_bench_refuses_a_negative_warm_up_with_exit_2(tmp_path: Path, steps: str, warmup: str, why: str) -> None:
    """`--steps -1 --warmup -5` passed the check (-1 > -5): 0 steps trained and exit 75, "job stopped early" (QA
    2026-12-07). Refused before anything starts: no run directory is made."""
    plan = write_plan(tmp_path, tiny_plan())
    run_dir = tmp_path / "run"
    done = run_launcher("bench", str(plan), "--steps", steps, "--warmup", warmup, "--run-dir", str(run_dir), timeout=60)
    assert done.returncode == 2 and why in done.stderr, done.stdout + done.stderr
    assert not run_dir.exists()
