"""The `hf-fsdp` stack (a Hugging Face model under PyTorch FSDP through Accelerate or the Trainer): a data-only stack
made of terms measured elsewhere — the Hugging Face model's eager tensors and kernels (measured on H200 under
DeepSpeed) and FSDP's sharding (llm-foundry's) — so these tests check that it is composed as it says."""

from __future__ import annotations

import pytest

from app.planner import PlanRequest, plan, stack
from app.planner import activations as act
from app.planner.layout import StageShape
from app.planner.specs import ParallelConfig, TrainingSpec
from app.planner.states import stage_params, stage_states

from .conftest import preset


def hf_fsdp() -> TrainingSpec:
    return TrainingSpec(global_batch_size=64, framework="pytorch-fsdp", stack="hf-fsdp")


def test_the_model_is_the_hugging_face_one_and_the_sharding_fsdp() -> None:
    m = preset("llama-3-8b")
    par = ParallelConfig(dp=8, micro_batch_size=1)
    deepspeed_hf = TrainingSpec(global_batch_size=64, framework="deepspeed")
    assert act.layer_bytes(m, par, hf_fsdp(), moe=False) == act.layer_bytes(m, par, deepspeed_hf, moe=False)
    shape = StageShape((32,), True, True)
    sp = stage_params(m, par, shape, 32, 0)
    s = stage_states(m, hf_fsdp(), par, shape, 32, 0)
    assert (s.weights, s.grads, s.optimizer) == pytest.approx((4 * sp.total / 8, 4 * sp.total / 8, 8 * sp.total / 8))
    ours, hf = stack.get("hf-fsdp").generation("hopper"), stack.get("deepspeed-hf").generation("hopper")
    assert (ours.gemm_fraction, ours.host_op_s, ours.allocator_slack_bytes) == (
        hf.gemm_fraction,
        hf.host_op_s,
        hf.allocator_slack_bytes,
    )
    assert ours.overlap_contention == stack.get("llm-foundry").generation("ampere").overlap_contention


def test_the_search_offers_what_accelerate_runs() -> None:
    """FSDP over every GPU, no model parallelism, gradient checkpointing of whole decoder layers or none."""
    result = plan(PlanRequest(model="llama-3-8b", cluster={"num_nodes": 1, "gpu": "H100-SXM"}, training=hf_fsdp()))
    assert result.plans
    for p in result.plans:
        par = p.parallel
        assert (par.tp, par.pp, par.cp, par.dp) == (1, 1, 1, 8)
        assert par.recompute in ("none", "full") and par.zero_stage == 0 and not par.distributed_optimizer
