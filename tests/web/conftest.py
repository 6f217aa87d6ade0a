"""Web fixtures: the app on a SQLite file, and a hand-made plan whose charts never change with the cost model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.planner.results import Estimate, Layout, MemoryEstimate, Plan, StageMemory, TimeEstimate
from app.planner.specs import ParallelConfig
from tests.api.conftest import make_sqlite_client

GiB = 2**30


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Any]:
    with make_sqlite_client(f"sqlite:///{tmp_path / 'trainplan.db'}") as client:
        yield client


def stage(i: int, weights: float, grads: float, optim: float, acts: float, other: float) -> StageMemory:
    parts = [int(x * GiB) for x in (weights, grads, optim, acts, other)]
    return StageMemory(
        stage=i,
        layers=8,
        params=parts[0] // 2,
        weights_bytes=parts[0],
        gradients_bytes=parts[1],
        optimizer_bytes=parts[2],
        activations_bytes=parts[3],
        other_bytes=parts[4],
        total_bytes=sum(parts),
        microbatches_in_flight=4 - i,
    )


def synthetic_plan(pp: int = 4, vpp: int = 1, microbatches: int = 8, rank: int = 1, step_s: float = 2.0) -> Plan:
    """A PP plan with round numbers: stage 0 is the heaviest; 80 GiB GPUs with a 10% headroom."""
    stages = [stage(i, 4, 4, 12, 30 - 5 * i, 6) for i in range(pp)]
    peak = max(stages, key=lambda s: s.total_bytes)
    memory = MemoryEstimate(
        peak_bytes=peak.total_bytes,
        peak_stage=peak.stage,
        capacity_bytes=80 * GiB,
        usable_bytes=72 * GiB,
        headroom_fraction=1 - peak.total_bytes / (80 * GiB),
        stages=stages,
    )
    breakdown = {
        "compute_s": 0.7 * step_s,
        "recompute_s": 0.0,
        "tp_comm_s": 0.1 * step_s,
        "pp_comm_s": 0.05 * step_s,
        "bubble_s": 0.1 * step_s,
        "dp_comm_s": 0.03 * step_s,
        "optimizer_s": 0.02 * step_s,
    }
    time = TimeEstimate(
        step_s=step_s,
        tokens_per_s=1e5,
        tflops_per_gpu=400,
        mfu=0.4,
        hfu=0.4,
        bubble_fraction=0.1,
        flops_per_step=1e15,
        flops_definition="6 x N x tokens",
        breakdown=breakdown,
    )
    parallel = ParallelConfig(tp=2, pp=pp, vpp=vpp, dp=2, distributed_optimizer=True, micro_batch_size=1)
    layout = Layout(
        world_size=4 * pp,
        num_nodes=pp // 2 or 1,
        gpus_per_node=8,
        num_microbatches=microbatches,
        global_batch_size=2 * microbatches,
        stage_layers=[8] * pp,
    )
    return Plan(
        rank=rank,
        parallel=parallel,
        layout=layout,
        estimate=Estimate(feasible=True, reasons=[], memory=memory, time=time),
        why=["because"],
    )
