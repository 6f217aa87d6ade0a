"""A measured cluster profile replaces catalogue numbers, changes predictions (and, where it matters, the choice),
and every result says which numbers it used."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.planner import EstimateRequest, PlanRequest, estimate, plan
from app.planner.catalog import gpu


def profile(
    intra_busbw: float,
    inter_busbw: float,
    tflops: float = 790.0,
    name: str = "NVIDIA H100 80GB HBM3",
    backend: str = "nccl",
) -> dict[str, Any]:
    big = 256 * 2**20
    return {
        "schema_version": 1,
        "kind": "trainplan.cluster_profile",
        "created": "2026-11-30T12:00:00Z",
        "num_nodes": 2,
        "gpus_per_node": 8,
        "device": {"name": name, "memory_bytes": 85899345920, "backend": backend},
        "gemm": [
            {"precision": "bf16", "m": 8192, "n": 8192, "k": 8192, "tflops": tflops},
            {"precision": "bf16", "m": 1024, "n": 1024, "k": 1024, "tflops": tflops / 3},
        ],
        "collectives": [
            {
                "op": "all_reduce",
                "scope": "intra_node",
                "ranks": 8,
                "bytes": big,
                "time_s": 0.01,
                "algbw_GBps": intra_busbw / 1.75,
                "busbw_GBps": intra_busbw,
            },
            {
                "op": "all_reduce",
                "scope": "inter_node",
                "ranks": 16,
                "bytes": big,
                "time_s": 0.05,
                "algbw_GBps": inter_busbw / 1.875,
                "busbw_GBps": inter_busbw,
            },
            {
                "op": "all_reduce",
                "scope": "inter_node",
                "ranks": 16,
                "bytes": 1024,
                "time_s": 0.0001,
                "algbw_GBps": 0.01,
                "busbw_GBps": 0.02,
            },
        ],
        "host_to_device": {"h2d_GBps": 40.0, "d2h_GBps": 38.0},
        "cpu_adam": {"params_per_s": 2.5e8, "threads": 8},
    }


H100 = gpu("H100-SXM")
CATALOGUE_INTER = 50 * H100.efficiency.network  # GB/s bus bandwidth the catalogue assumes across nodes


def _request(prof: dict[str, Any] | None, **training: Any) -> dict[str, Any]:
    cluster: dict[str, Any] = {"num_nodes": 4, "gpu": "H100-SXM"}
    if prof is not None:
        cluster["profile"] = prof
    return {"model": "llama-2-13b", "cluster": cluster, "training": {"global_batch_size": 256, **training}}


def test_half_the_network_bandwidth_slows_the_prediction() -> None:
    par = {"tp": 1, "pp": 1, "dp": 32, "micro_batch_size": 1, "distributed_optimizer": True}
    base = estimate(EstimateRequest(**_request(None, overlap_grad_reduce=False), parallel=par))
    halved = estimate(
        EstimateRequest(**_request(profile(360.0, CATALOGUE_INTER / 2), overlap_grad_reduce=False), parallel=par)
    )
    assert halved.time.breakdown["dp_comm_s"] == pytest.approx(2 * base.time.breakdown["dp_comm_s"], rel=0.05)
    assert halved.time.step_s > base.time.step_s
    inter = next(c for c in halved.constants if c.name == "inter-node bus bandwidth")
    assert inter.value == pytest.approx(CATALOGUE_INTER / 2) and inter.source.startswith("profile 2026-11-30")
    assert next(c for c in base.constants if c.name == "inter-node bus bandwidth").source.startswith("catalogue")


def test_a_slow_network_changes_the_choice() -> None:
    fast = plan(PlanRequest(**{**_request(None), "model": "llama-3-8b"}))
    slow = plan(PlanRequest(**{**_request(profile(360.0, 0.5)), "model": "llama-3-8b"}))  # a 4 Gb/s network
    assert fast.plans and slow.plans
    assert slow.plans[0].estimate.time.step_s > fast.plans[0].estimate.time.step_s
    assert slow.plans[0].parallel != fast.plans[0].parallel
    # with little bandwidth between nodes the winner keeps data parallelism inside the node and sends only
    # pipeline activations across nodes
    assert slow.plans[0].parallel.dp <= 8 < fast.plans[0].parallel.dp and slow.plans[0].parallel.pp > 1


def test_measured_gemm_rate_sets_the_compute_speed() -> None:
    par = {"tp": 8, "pp": 1, "dp": 4, "micro_batch_size": 1, "sequence_parallel": True, "distributed_optimizer": True}
    slow_gemm = estimate(EstimateRequest(**_request(profile(360.0, 42.5, tflops=400.0)), parallel=par))
    fast_gemm = estimate(EstimateRequest(**_request(profile(360.0, 42.5, tflops=800.0)), parallel=par))
    assert slow_gemm.time.breakdown["compute_s"] > 1.5 * fast_gemm.time.breakdown["compute_s"]
    used = next(c for c in fast_gemm.constants if c.name == "GEMM throughput in training")
    share = fast_gemm.constants[0]  # the stack's share of the isolated rate (Megatron-core on Hopper)
    assert share.name == "GEMM share kept in training" and share.value == pytest.approx(0.743)
    assert used.value == pytest.approx(800.0 * 0.743) and used.source.startswith("profile")


def test_cpu_profiles_are_recorded_but_not_applied() -> None:
    result = plan(PlanRequest(**_request(profile(1.0, 0.1, tflops=0.2, name="cpu", backend="gloo"))))
    reference = plan(PlanRequest(**_request(None)))
    assert result.plans[0].estimate.time.step_s == pytest.approx(reference.plans[0].estimate.time.step_s)
    assert any("not applied" in n for n in result.notes)


def test_a_profile_of_another_gpu_keeps_the_catalogue_gemm_rate() -> None:
    result = plan(PlanRequest(**_request(profile(360.0, 42.5, tflops=300.0, name="NVIDIA A100-SXM4-80GB"))))
    assert any("not a H100-SXM" in n for n in result.notes)
    gemm = next(c for c in result.constants if c.name == "GEMM throughput in training")
    assert gemm.source.startswith("catalogue")


def test_malformed_profiles_are_refused_naming_the_field() -> None:
    bad = profile(360.0, 42.5)
    bad["schema_version"] = 7
    with pytest.raises(ValidationError, match="schema_version"):
        PlanRequest(**_request(bad))
    bad = profile(360.0, 42.5)
    bad["collectives"][0]["busbw_GBps"] = -1
    with pytest.raises(ValidationError, match="busbw_GBps"):
        PlanRequest(**_request(bad))
