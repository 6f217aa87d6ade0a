"""The `maxtext` stack (framework `jax`): MaxText under XLA as NVIDIA's dgxc recipes run it — its named-checkpoint
remat (what a layer keeps, what backward re-runs), FSDP over every GPU — against hand-worked cases. Its accuracy on
the 12 measured MaxText rows is guarded with the other families in test_accuracy.py."""

from __future__ import annotations

import pytest

from app.planner import PlanRequest, plan, space
from app.planner import activations as act
from app.planner import compute as cp
from app.planner.specs import ClusterSpec, ParallelConfig, TrainingSpec

from .conftest import preset

H, KV = 8192, 1024  # Llama-2 70B: 64 heads of 128, 8 KV heads


def maxtext(precision: str = "bf16") -> TrainingSpec:
    return TrainingSpec(global_batch_size=128, framework="jax", precision=precision)


def test_named_checkpoints_keep_the_projections_and_the_mlp_output() -> None:
    """remat_policy=custom with query/key/value/qkv/out projections on the device (and mlpwo in BF16): per token of
    a layer, its input, q, k, v, the output projection's output and the MLP's output, 2 bytes each."""
    m = preset("llama-2-70b")
    tokens = 4096 * 2
    bf16 = ParallelConfig(dp=64, micro_batch_size=2, recompute="selective")
    assert act.layer_bytes(m, bf16, maxtext(), moe=False) == pytest.approx(tokens * 2 * (H + H + KV + KV + H + H))
    fp8 = bf16.model_copy(update={"recompute_modules": ("mlp",)})  # save_dot_except_mlp: mlpwo recomputed too
    assert act.layer_bytes(m, fp8, maxtext("fp8"), moe=False) == pytest.approx(tokens * 2 * (H + H + KV + KV + H))


def test_backward_reruns_the_attention_core_and_the_mlp_input_gemms() -> None:
    m, gpu = preset("llama-2-70b"), ClusterSpec(num_nodes=8, gpus_per_node=8, gpu="H100-SXM").gpu
    training = maxtext()
    costs = training.software.generation("hopper")
    par = ParallelConfig(dp=64, micro_batch_size=2, recompute="selective")
    lt = cp.layer_time(m, par, training, gpu, costs, moe=False)
    tokens = 4096 * 2
    ew = cp.elementwise(m, par, training, tokens, moe=False)
    ew_f = cp.stream_time(ew.total, ew.ops, gpu, costs)
    fc1 = cp.gemm_time(cp.Gemm(tokens, 2 * 28672, H), gpu, costs, "bf16")
    fc2 = cp.gemm_time(cp.Gemm(tokens, H, 28672), gpu, costs, "bf16")
    assert lt.recompute == pytest.approx(lt.attention_fwd + fc1 + ew_f, rel=1e-9)
    whole_mlp = par.model_copy(update={"recompute_modules": ("mlp",)})
    lt_mlp = cp.layer_time(m, whole_mlp, training, gpu, costs, moe=False)
    assert lt_mlp.recompute == pytest.approx(lt.recompute + fc2, rel=1e-9)


def test_the_search_offers_what_maxtext_runs() -> None:
    """FSDP over every GPU (no model parallelism), both of the recipes' remat policies, full recomputation or none."""
    result = plan(PlanRequest(model="llama-2-70b", cluster={"num_nodes": 8, "gpu": "H100-SXM"}, training=maxtext()))
    assert result.plans
    for p in result.plans:
        par = p.parallel
        assert (par.tp, par.pp, par.cp, par.dp) == (1, 1, 1, 64) and not par.distributed_optimizer
    levels = {(r.recompute, r.modules) for r in space.recompute_options(preset("llama-2-70b"), maxtext(), 80)}
    assert levels == {("none", None), ("selective", None), ("selective", ("mlp",)), ("full", None)}
