"""Gaps found while proving the renderer, owned elsewhere. An open gap is a strict xfail: it fails for the reason
given and turns into a failure (XPASS) once fixed upstream, when its marker is removed. The planner gaps are
fixed (rules.model_fits_framework) and now guard against coming back."""

from __future__ import annotations

import pytest

from app.planner import PlanRequest, plan
from app.render.support import unsupported
from launcher import spec


def refused(request: dict) -> list[str]:
    result = plan(PlanRequest(**request))
    entry = "examples/train_gpt.py" if result.training.framework == "deepspeed" else "pretrain_gpt.py"
    return [f"#{p.rank}: {r}" for p in result.plans for r in unsupported(result.model, result.training, p, entry)]


CLUSTER = {"num_nodes": 4, "gpus_per_node": 8, "gpu": "H100-SXM"}


def test_planner_plans_no_pipeline_for_plain_deepspeed() -> None:
    assert not refused(
        {"model": "llama-2-7b", "cluster": CLUSTER, "training": {"global_batch_size": 64, "framework": "deepspeed"}}
    )


def test_planner_plans_moe_for_megatron_only() -> None:
    assert not refused(
        {
            "model": "mixtral-8x7b",
            "cluster": CLUSTER,
            "training": {"global_batch_size": 256, "framework": "megatron-deepspeed"},
        }
    )


def test_planner_plans_no_alibi_for_megatron() -> None:
    assert not refused(
        {
            "model": "bloom-176b",
            "cluster": {**CLUSTER, "num_nodes": 8},
            "training": {"global_batch_size": 256, "framework": "megatron"},
        }
    )


def test_launcher_spec_accepts_expert_parallelism_across_tp() -> None:
    """Fixed in launcher/spec.py (optional parallel.etp): Megatron carves EP out of tp*cp*dp with ETP
    (parallel_state: tp*cp*dp % (etp*ep) == 0). The gap's example, tp 4, dp 2, ep 4, needs ETP 1: with ETP's
    default (= TP) Megatron refuses it too, so the spec does."""
    assert spec.Parallel(tp=4, dp=2, ep=4, etp=1, global_batch_size=8).etp == 1
    with pytest.raises(spec.PlanError, match=r"etp\(4\) \* ep\(4\) = 16"):
        spec.Parallel(tp=4, dp=2, ep=4, global_batch_size=8)


def test_planner_plans_alibi_only_where_a_flag_exists() -> None:
    assert not refused(
        {
            "model": "bloom-176b",
            "cluster": {**CLUSTER, "num_nodes": 8},
            "training": {"global_batch_size": 256, "framework": "megatron-deepspeed"},
        }
    )
