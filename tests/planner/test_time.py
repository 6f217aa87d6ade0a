"""Step-time formulas against hand-worked cases."""

from __future__ import annotations

import pytest

from app.planner import comm, compute
from app.planner.estimate import evaluate, time_estimate
from app.planner.specs import ClusterSpec, ParallelConfig, TrainingSpec
from app.planner.step import StageTime, pipeline_time

from .conftest import preset


def test_nccl_tests_bus_factors() -> None:
    assert comm.bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert comm.bus_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert comm.bus_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert comm.bus_factor("send_recv", 2) == 1.0


def test_collective_time_inside_a_node() -> None:
    cluster = ClusterSpec(num_nodes=1, gpu="A100-80GB")
    eff = cluster.gpu.efficiency
    size = 100e6
    expected = eff.collective_latency_s + size * 2 * 7 / 8 / (300e9 * eff.nvlink)
    assert comm.collective_time("all_reduce", size, 8, cluster, crosses_nodes=False) == pytest.approx(expected)


def test_ring_latency_grows_with_ranks_across_nodes() -> None:
    cluster = ClusterSpec(num_nodes=64, gpu="A100-80GB")
    small = comm.collective_time("all_gather", 1e3, 16, cluster, crosses_nodes=True)
    large = comm.collective_time("all_gather", 1e3, 512, cluster, crosses_nodes=True)
    assert large - small == pytest.approx((511 - 15) * cluster.gpu.efficiency.network_hop_latency_s, rel=1e-3)


def test_halving_bandwidth_doubles_the_bandwidth_term() -> None:
    fast = ClusterSpec(num_nodes=2, gpu="H100-SXM", inter_node_GBps=50)
    slow = ClusterSpec(num_nodes=2, gpu="H100-SXM", inter_node_GBps=25)
    size = 1e9
    lat = comm.latency(fast, True, "all_reduce", 16)
    t_fast = comm.collective_time("all_reduce", size, 16, fast, True) - lat
    t_slow = comm.collective_time("all_reduce", size, 16, slow, True) - lat
    assert t_slow == pytest.approx(2 * t_fast)


def test_pipeline_schedule_and_bubble() -> None:
    t = StageTime(compute=1.0)
    groups = [(t, 1), (t, 6), (t, 1)]
    total, bubble, _ = pipeline_time(groups, ParallelConfig(pp=8), microbatches=32)
    assert (total, bubble) == pytest.approx((32 + 7, 7))  # (m + p - 1) micro-batch times; bubble (p-1)/m of ideal
    total, bubble, _ = pipeline_time(groups, ParallelConfig(pp=8, vpp=2), microbatches=32)
    assert bubble == pytest.approx(7 / 2) and total == pytest.approx(32 + 3.5)
    slow = StageTime(compute=1.5)
    total, _, worst = pipeline_time([(t, 1), (t, 6), (slow, 1)], ParallelConfig(pp=8), microbatches=32)
    assert worst is slow and total == pytest.approx(32 * 1.5 + 7 * (7 + 1.5) / 8)


def test_gpt_model_flops_match_megatron_closed_form() -> None:
    """72 B s L h^2 (1 + s/(12h) + V/(12 L h)) for an MHA GPT with ffn = 4h (rules.md sec. 5)."""
    m = preset("gpt3-175b")
    L, h, s, V = m.num_layers, m.hidden_size, m.seq_length, m.vocab_size
    per_token = 72 * L * h**2 * (1 + s / (12 * h) + V / (12 * L * h))
    assert compute.model_flops_per_token(m) == pytest.approx(per_token)


def test_gemm_roofline() -> None:
    gpu = ClusterSpec(num_nodes=1, gpu="H100-SXM").gpu
    big = compute.Gemm(8192, 8192, 8192)
    assert compute.gemm_time(big, gpu, "bf16") == pytest.approx(
        2 * 8192**3 / (gpu.peak_flops("bf16") * gpu.efficiency.gemm) + gpu.efficiency.kernel_overhead_s
    )
    skinny = compute.Gemm(8, 8192, 8192)  # a GEMV: bound by reading the 8192^2 weight
    t = compute.gemm_time(skinny, gpu, "bf16") - gpu.efficiency.kernel_overhead_s
    assert t == pytest.approx(2 * (8 * 8192 + 8192**2 + 8 * 8192) / (gpu.hbm_bw * gpu.efficiency.hbm))
    assert compute.gemm_time(big, gpu, "fp8") < compute.gemm_time(big, gpu, "bf16")


def _llama(**par: object) -> tuple[float, dict[str, float], float]:
    m = preset("llama-2-7b")
    cluster = ClusterSpec(num_nodes=2, gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=128, **par.pop("training", {}))  # type: ignore[arg-type]
    t = time_estimate(m, cluster, training, ParallelConfig(**par))  # type: ignore[arg-type]
    return t.step_s, t.breakdown, t.mfu


def test_breakdown_adds_up_to_step_time() -> None:
    for par in (
        {"tp": 2, "pp": 2, "dp": 4, "sequence_parallel": True},
        {"tp": 1, "pp": 4, "vpp": 2, "dp": 4, "recompute": "full"},
        {"dp": 16, "distributed_optimizer": True},
    ):
        step, breakdown, _ = _llama(**dict(par))
        assert sum(breakdown.values()) == pytest.approx(step)


def test_full_recompute_costs_a_forward() -> None:
    base, b0, _ = _llama(dp=16, micro_batch_size=2)
    full, b1, _ = _llama(dp=16, micro_batch_size=2, recompute="full")
    assert b1["recompute_s"] == pytest.approx(b0["compute_s"] / 3, rel=0.05)
    assert full > base


def test_overlapping_gradient_reduction_hides_communication() -> None:
    overlapped, b_on, _ = _llama(dp=16, training={"overlap_grad_reduce": True})
    exposed, b_off, _ = _llama(dp=16, training={"overlap_grad_reduce": False})
    assert b_on["dp_comm_s"] < b_off["dp_comm_s"] and overlapped < exposed


def test_zero3_traffic_is_paid_per_microbatch() -> None:
    m = preset("llama-2-13b")
    cluster = ClusterSpec(num_nodes=8, gpu="A100-80GB")
    one = time_estimate(
        m,
        cluster,
        TrainingSpec(global_batch_size=64, framework="deepspeed"),
        ParallelConfig(dp=64, zero_stage=3, micro_batch_size=1),
    ).breakdown["zero_comm_s"]
    four = time_estimate(
        m,
        cluster,
        TrainingSpec(global_batch_size=256, framework="deepspeed"),
        ParallelConfig(dp=64, zero_stage=3, micro_batch_size=1),
    ).breakdown["zero_comm_s"]
    assert four == pytest.approx(4 * one, rel=1e-6) and one > 0


def test_mfu_is_model_flops_over_peak() -> None:
    m = preset("llama-2-7b")
    cluster = ClusterSpec(num_nodes=1, gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=64)
    est = evaluate(m, cluster, training, ParallelConfig(dp=8, distributed_optimizer=True))
    t = est.time
    assert t.flops_per_step == pytest.approx(compute.model_flops_per_token(m) * 64 * m.seq_length)
    assert t.mfu == pytest.approx(t.flops_per_step / t.step_s / 8 / (989.4e12))
    assert t.tokens_per_s == pytest.approx(64 * m.seq_length / t.step_s)
