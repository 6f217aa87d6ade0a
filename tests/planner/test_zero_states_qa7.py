"""ZeRO state terms checked against DeepSpeed's own code paths (QA of 2026-12-07, which compared the planner with
DeepSpeed's estimators and read stage_1_and_2.py / stage3.py): each test names its finding."""

from __future__ import annotations

import pytest

from app.planner.decisions import deepspeed_decision
from app.planner.layout import StageShape
from app.planner.specs import ParallelConfig, TrainingSpec
from app.planner.states import stage_params, stage_states

from .conftest import preset

SHAPE = StageShape((32,), True, True)


def _states(framework: str, **par: object):  # type: ignore[no-untyped-def]
    m = preset("llama-2-7b")
    p = ParallelConfig(dp=8, micro_batch_size=1, **par)
    training = TrainingSpec(global_batch_size=64, framework=framework)
    return m, p, training, stage_states(m, training, p, SHAPE, 32, 0), stage_params(m, p, SHAPE, 32, 0).total / 8


def test_zero2_with_the_optimizer_on_the_cpu_keeps_no_gradient_partition_on_the_gpu() -> None:
    """copy_grads_in_partition sends each gradient to the host before grads_in_partition is made: DeepSpeed's own
    estimator gives the GPU 2P only; the planner counted 2P/N more (1.57 GiB for 7B on 8 GPUs)."""
    *_, offloaded, _ = _states("deepspeed", zero_stage=2, offload_optimizer="cpu")
    *_, on_gpu, shard = _states("deepspeed", zero_stage=2)
    assert offloaded.lazy_grads == 0.0 and offloaded.step_peak == 0.0
    # on the GPU, with 8 micro-batches: the partition kept aside and the one the next backward builds (review
    # 2026-12-07: stage_1_and_2.py all_grad_tensors, seen on CPU)
    assert on_gpu.lazy_grads == pytest.approx(4 * shard)


def test_zero2_flattens_its_16_bit_partition_before_the_fp32_cast() -> None:
    """The step's flatten is a torch.cat copy made before .to(fp32) (stage_1_and_2.py step): 2 + 4 bytes per element
    on top of the partition, as ZeRO-1 already counted; ZeRO-3's per sub-group likewise (stage3.py
    _prepare_fp32_grad_for_sub_group). Under Megatron-DeepSpeed's fused Adam these set the step's peak."""
    *_, z2, shard = _states("megatron-deepspeed", zero_stage=2, grad_reduce_dtype="bf16")
    assert z2.lazy_grads == pytest.approx(4 * shard) and z2.step_peak == pytest.approx(8 * shard)  # 2 partitions
    *_, z3, shard3 = _states("megatron-deepspeed", zero_stage=3)
    assert z3.step_peak == pytest.approx(6 * min(shard3, 1e9))


def test_fp32_accumulation_counted_is_fp32_accumulation_rendered() -> None:
    """Megatron-DeepSpeed ZeRO-2 was counted with the fp32 partition buffer (the stack accumulates in fp32) while the
    rendered ds_config asked for fp32 accumulation only under BF16_Optimizer, so DeepSpeed accumulated in bf16. The
    decision now carries grad_accum_dtype wherever the memory model counts fp32 accumulation; the fp32 buffer is
    used as it is at the step (no flatten, no cast)."""
    m, p, training, s, shard = _states("megatron-deepspeed", zero_stage=2)
    assert s.lazy_grads == pytest.approx(4 * shard) and s.step_peak == pytest.approx(4 * shard)
    assert deepspeed_decision(m, training, p).grad_accum_dtype == "fp32"
    m, p, training, *_ = _states("deepspeed", zero_stage=2)  # deepspeed-hf reduces in bf16: DeepSpeed's default
    assert deepspeed_decision(m, training, p).grad_accum_dtype is None


def test_zero3_gathers_a_hugging_face_models_projections_one_at_a_time() -> None:
    """ZeRO-3 fetches whole modules. Megatron's fc1 is SwiGLU's gate and up projections in one linear; LlamaMLP has
    gate_proj and up_proj apart, so for Llama-2 70B (h 8192, ffn 28672, vocab 32000) the largest module under
    DeepSpeed with a Hugging Face model is the embedding (262.1M), not a fused fc1 (469.8M): its gathered buffer
    and full gradient were 4 B x 207.6M = 0.83 GB too large on every GPU."""
    m = preset("llama-2-70b")
    p = ParallelConfig(dp=64, micro_batch_size=1, zero_stage=3)
    shape = StageShape((80,), True, True)
    h, f, v = 8192, 28672, 32000
    assert stage_params(m, p, shape, 80, 0, fused_fc1=False).largest_module == max(h * f, v * h) == 262_144_000
    assert stage_params(m, p, shape, 80, 0).largest_module == 2 * h * f
    hf, mds = (stage_states(m, TrainingSpec(global_batch_size=64, framework=fw), p, shape, 80, 0)
               for fw in ("deepspeed", "megatron-deepspeed"))  # fmt: skip
    assert mds.buffers - hf.buffers == pytest.approx(4.0 * (2 * h * f - v * h))
    # the rendered sub-group and NVMe buffer hold the same largest parameter (decisions._largest_param)
    at4 = ParallelConfig(dp=2, micro_batch_size=1, zero_stage=3, offload_param="nvme", offload_optimizer="nvme")
    sizes = {fw: deepspeed_decision(m, TrainingSpec(global_batch_size=64, framework=fw), at4).zero.sub_group_size
             for fw in ("deepspeed", "megatron-deepspeed")}  # fmt: skip
    assert sizes == {"deepspeed": v * h // 2, "megatron-deepspeed": 2 * h * f // 2}


def test_zero1_drops_every_gradient_before_its_step() -> None:
    """At the accumulation boundary ZeRO-1 sets every param.grad to None (stage_1_and_2.py `_clear_param_grad_only`)
    and flattens only its 16-bit partition before the fp32 cast: 2 + 6 B per sharded parameter, not the whole
    model's 16-bit gradients beside them (2 B per parameter: 11 GiB too many for 7B on 8 GPUs, review 2026-12-07)."""
    *_, z1, shard = _states("deepspeed", zero_stage=1)
    assert z1.lazy_grads == pytest.approx(2 * 8 * shard)  # every gradient through the backward
    assert z1.step_peak == pytest.approx(8 * shard)
