from __future__ import annotations

import pytest

from app.planner import catalog
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
