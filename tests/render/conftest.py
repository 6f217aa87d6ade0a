"""Session fixtures: the real DeepSpeed config classes (one-process gloo group), megatron-core, rendered cases."""

from __future__ import annotations

import os
import socket
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from render_cases import GOLDEN, SEARCHED, Case, fixed_result, options_for, searched

from app.planner.results import PlanResult
from app.render import Artifacts, RenderOptions, render


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MPU:
    """The parallel-state object DeepSpeed asks for its data-parallel size (Megatron passes its mpu)."""

    def __init__(self, dp: int, mp: int) -> None:
        self.dp, self.mp = dp, mp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_data_parallel_rank(self) -> int:
        return 0

    def get_model_parallel_world_size(self) -> int:
        return self.mp

    def get_model_parallel_rank(self) -> int:
        return 0


@pytest.fixture(scope="session")
def deepspeed_config() -> Iterator[Callable[[dict[str, Any], int, int], Any]]:
    """`check(cfg, dp, mp)` -> DeepSpeed's own DeepSpeedConfig, built with an mpu reporting dp and mp.

    DeepSpeed reads its world size through deepspeed.comm, which needs an initialised backend: a one-process
    gloo group on a free port. No engine is built and no op is JIT-compiled."""
    saved = dict(os.environ)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import torch.distributed as dist
    from deepspeed.runtime.config import DeepSpeedConfig

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    if not dist.is_initialized():
        deepspeed.init_distributed(
            dist_backend="gloo",
            init_method=f"tcp://127.0.0.1:{_free_port()}",
            rank=0,
            world_size=1,
            auto_mpi_discovery=False,
        )

    def check(cfg: dict[str, Any], dp: int, mp: int) -> Any:
        return DeepSpeedConfig(cfg, mpu=MPU(dp, mp))

    yield check
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="session")
def megatron_core() -> Any:
    warnings.filterwarnings("ignore", message=".*Transformer Engine.*")
    warnings.filterwarnings("ignore", message=".*Apex.*")
    import megatron.core

    return megatron.core


@pytest.fixture(scope="session")
def golden_rendered() -> dict[str, tuple[Case, PlanResult, Artifacts]]:
    out = {}
    for case in GOLDEN:
        result = fixed_result(case.request, case.parallel)
        out[case.name] = (case, result, render(result, 1, RenderOptions(**case.options)))
    return out


@pytest.fixture(scope="session")
def searched_rendered() -> list[tuple[str, PlanResult, int, Artifacts]]:
    """Every plan the search returns for the SEARCHED requests, rendered with default options."""
    out = []
    for request in SEARCHED:
        result = searched(request)
        assert result.plans, f"no plan for {request}"
        for plan in result.plans:
            label = f"{result.model.name}/{result.training.framework}/#{plan.rank}"
            out.append((label, result, plan.rank, render(result, plan.rank, options_for(result))))
    return out


@pytest.fixture(scope="session")
def all_rendered(
    golden_rendered: dict[str, tuple[Case, PlanResult, Artifacts]],
    searched_rendered: list[tuple[str, PlanResult, int, Artifacts]],
) -> list[tuple[str, PlanResult, int, Artifacts]]:
    return [(name, result, 1, arts) for name, (_c, result, arts) in golden_rendered.items()] + searched_rendered
