"""Checkpoint interval and goodput (app/planner/goodput.py), hand-worked against the papers it cites."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from app.planner import PlanRequest, plan
from app.planner.goodput import (
    GPU_HOURS_PER_FAILURE,
    checkpoint_bytes,
    checkpoint_plan,
    daly_interval,
    goodput,
    mtbf_s,
    young_interval,
)
from app.planner.specs import ClusterSpec
from tests.planner.conftest import preset

MIN = 60.0
HOUR = 3600.0


@pytest.mark.parametrize(
    ("mtbf", "expected_min"),
    [(24 * HOUR, 117.0), (6 * HOUR, 57.0), (15 * MIN, 9.1)],  # Daly 2006, Figs. 3-5: delta = 5 min
)
def test_daly_interval_reproduces_the_papers_figures(mtbf: float, expected_min: float) -> None:
    assert daly_interval(5 * MIN, mtbf) / MIN == pytest.approx(expected_min, abs=0.5)


def test_young_is_the_first_order_term_and_daly_caps_at_the_mtbf() -> None:
    assert young_interval(5 * MIN, 24 * HOUR) == pytest.approx(120 * MIN)  # sqrt(2 * 5 * 1440) min
    assert daly_interval(3 * HOUR, 1 * HOUR) == 1 * HOUR  # delta >= 2M: checkpoint once per MTBF


def test_goodput_by_hand() -> None:
    # tau 1 h, delta 0.1 h, R 0.2 h, M 10 h: T_w / T_s = 10 e^0.02 (e^0.11 - 1) / 1 = 1.18627
    g = goodput(1 * HOUR, 0.1 * HOUR, 0.2 * HOUR, 10 * HOUR)
    assert g == pytest.approx(1 / (10 * math.exp(0.02) * (math.exp(0.11) - 1)), rel=1e-12)
    assert g == pytest.approx(0.84298, abs=1e-5)
    # without failures only the saves cost time: tau / (tau + delta)
    assert goodput(100.0, 10.0, 60.0, 1e12) == pytest.approx(100 / 110, rel=1e-6)
    assert goodput(100.0, 10.0, 60.0, 1.0) < 1e-60  # failures every second: nothing survives
    assert goodput(1000.0, 10.0, 60.0, 1.0) == 0.0  # past e^700: exactly nothing


def test_checkpoint_bytes_are_14_per_parameter() -> None:
    model = preset("llama-2-7b")
    assert checkpoint_bytes(model) == 14 * model.num_parameters  # 2 B weights + 12 B Adam state (ZeRO §3.1)


def test_default_mtbf_is_llama_3s_rate_divided_by_the_gpus() -> None:
    cluster = ClusterSpec(num_nodes=2048, gpus_per_node=8, gpu="H100-SXM")
    assert mtbf_s(cluster, 16_384) / HOUR == pytest.approx(54 * 24 / 419)  # 419 interruptions in 54 days
    assert mtbf_s(cluster, 8) / HOUR == pytest.approx(GPU_HOURS_PER_FAILURE / 8)
    own = ClusterSpec(num_nodes=1, gpu="H100-SXM", mtbf_hours=12.0)
    assert mtbf_s(own, 8) == 12 * HOUR


def test_checkpoint_plan_uses_the_cluster_settings() -> None:
    model = preset("llama-2-7b")
    cluster = ClusterSpec(
        num_nodes=4, gpu="H100-SXM", mtbf_hours=10.0, checkpoint_storage_GBps=5.0, restart_overhead_s=100.0
    )
    cp = checkpoint_plan(model, cluster, 32, step_s=2.0)
    save = 14 * model.num_parameters / 5e9
    assert cp.save_s == pytest.approx(save) and cp.load_s == pytest.approx(save)
    assert cp.restart_s == pytest.approx(100.0 + save)
    assert cp.interval_steps == round(daly_interval(save, 10 * HOUR) / 2.0)
    assert cp.interval_s == pytest.approx(cp.interval_steps * 2.0)
    assert cp.goodput == pytest.approx(goodput(cp.interval_s, save, 100.0 + save, 10 * HOUR))
    assert cp.mtbf_source == "cluster.mtbf_hours"
    default = checkpoint_plan(model, ClusterSpec(num_nodes=4, gpu="H100-SXM"), 32, step_s=2.0)
    assert default.save_s == pytest.approx(14 * model.num_parameters / 4e9)  # 1 GB/s per node
    assert default.restart_s == pytest.approx(300.0 + default.load_s)
    assert "/ 32 GPUs" in default.mtbf_source


def test_every_ranked_plan_carries_its_interval_and_goodput() -> None:
    request = PlanRequest(
        model="llama-2-7b",
        cluster={"num_nodes": 1, "gpu": "H100-SXM"},
        training={"global_batch_size": 64, "max_plans": 3},
    )
    result = plan(request)
    assert result.plans
    for p in result.plans:
        assert p.checkpoint is not None
        expected = checkpoint_plan(result.model, result.cluster, p.layout.world_size, p.estimate.time.step_s)
        assert p.checkpoint == expected
        assert 0.9 < p.checkpoint.goodput < 1.0 and p.checkpoint.interval_steps >= 1


@pytest.mark.parametrize(
    ("field", "value"),
    [("mtbf_hours", 0.0), ("checkpoint_storage_GBps", -1.0), ("restart_overhead_s", 1e9)],
)
def test_out_of_range_settings_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValidationError) as err:
        ClusterSpec(num_nodes=1, gpu="H100-SXM", **{field: value})
    assert field in str(err.value)


def test_the_checkpoint_is_written_by_the_nodes_the_plan_uses() -> None:
    """A 2-GPU plan on a 64-node cluster saved at 64 GB/s, and its --save-interval followed the cluster's size: the
    same job got 2,015 steps on 1 node and 252 on 64 (QA 2026-12-07). Storage scales with the job's own nodes."""
    model = preset("llama-3-8b")
    small, big = ClusterSpec(num_nodes=1, gpu="H100-SXM"), ClusterSpec(num_nodes=64, gpu="H100-SXM")
    assert checkpoint_plan(model, small, 2, 1.0) == checkpoint_plan(model, big, 2, 1.0)
    assert checkpoint_plan(model, big, 16, 1.0).save_s == pytest.approx(14 * model.num_parameters / 2e9)
    stated = ClusterSpec(num_nodes=64, gpu="H100-SXM", checkpoint_storage_GBps=8.0)  # an aggregate stays as stated
    assert checkpoint_plan(model, stated, 2, 1.0).save_s == pytest.approx(14 * model.num_parameters / 8e9)


def test_bf16_optimizer_states_make_a_smaller_checkpoint() -> None:
    """With bf16 moments and the master's 16-bit remainder the optimizer holds 6 B per parameter, not 12: the save
    time, interval and goodput were those of the fp32 states (QA 2026-12-07)."""
    model = preset("llama-2-70b")
    assert checkpoint_bytes(model, "bf16") == 8 * model.num_parameters
    request = {
        "model": "llama-2-70b",
        "cluster": {"num_nodes": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 512, "optimizer_states": "bf16", "max_plans": 1},
    }
    (best,) = plan(PlanRequest(**request)).plans
    assert best.checkpoint is not None and best.checkpoint.size_bytes == 8 * model.num_parameters
