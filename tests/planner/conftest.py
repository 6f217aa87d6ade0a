from __future__ import annotations

import itertools

import pytest

from app.planner import catalog
from app.planner.results import Plan
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


def preset(name: str, **overrides: object) -> ModelSpec:
    return ModelSpec(**{**catalog.model_fields(name), **overrides})


@pytest.fixture
def a100_node() -> ClusterSpec:
    return ClusterSpec(num_nodes=1, gpus_per_node=8, gpu="A100-80GB")


def korthikanti_training(gbs: int) -> TrainingSpec:
    """The 2022 Megatron runs: fp16, no flash attention, no overlapped DP reduction."""
    return TrainingSpec(
        global_batch_size=gbs,
        precision="fp16",
        flash_attention=False,
        overlap_grad_reduce=False,
        overlap_p2p_comm=False,
    )


__all__ = ["ParallelConfig", "korthikanti_training", "preset"]


def assert_throughput_ranking(plans: list[Plan]) -> None:
    """Ranked by throughput, except that a plan with fewer moving parts within 1 % of the fastest may stand above a
    faster one (api._simpler_first)."""
    from app.planner.explain import SIMPLER_WITHIN, simplicity

    fastest = min((p.estimate.time.step_s for p in plans), default=0.0)
    for above, below in itertools.pairwise(plans):
        a, b = above.estimate.time, below.estimate.time
        simpler = simplicity(above.parallel) < simplicity(below.parallel)
        assert a.tokens_per_s >= b.tokens_per_s or (simpler and a.step_s <= fastest * (1 + SIMPLER_WITHIN)), (
            above.parallel,
            below.parallel,
        )
