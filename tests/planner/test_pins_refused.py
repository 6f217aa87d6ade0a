"""A pin the stack cannot honour is refused by name, never dropped; when the pins, not the cluster, are why nothing
fits, that is the one hint; a search stopped by its time cap says so instead of "no plan fits"."""

from __future__ import annotations

from typing import Any

import pytest

from app.planner import PlanRequest, plan, rules
from app.planner.specs import ParallelConfig

NODE = {"num_nodes": 1, "gpu": "H100-SXM"}


def _plan(**training: Any) -> Any:
    return plan(PlanRequest(model="llama-3-8b", cluster=NODE, training={"global_batch_size": 64, **training}))


@pytest.mark.parametrize(
    ("framework", "pin", "why"),
    [
        ("megatron", {"zero_stage": 3}, "not ZeRO stages or ZeRO offload"),
        ("megatron", {"offload_optimizer": "cpu"}, "not ZeRO stages or ZeRO offload"),
        ("megatron", {"offload_param": "cpu"}, "not ZeRO stages or ZeRO offload"),
        ("deepspeed", {"distributed_optimizer": True}, "not Megatron's distributed optimizer"),
        ("deepspeed", {"megatron_fsdp": "optim_grads"}, "has no Megatron-FSDP"),
        ("megatron-deepspeed", {"cp": 2}, "has no context parallelism"),
    ],
)
def test_a_pin_the_stack_cannot_run_is_refused_by_name(framework: str, pin: dict[str, Any], why: str) -> None:
    """Before, Megatron's search dropped a pinned ZeRO stage or offload (and DeepSpeed's a pinned distributed
    optimizer) and ranked unpinned plans; a pinned CP on a stack without CP searched 0 candidates and gave no reason."""
    result = _plan(framework=framework, pinned=pin)
    assert result.plans == []
    reason = max(result.rejected, key=lambda r: r.count)  # what most candidates fail (others break shape rules)
    assert reason.reason == "framework_support" and why in reason.message
    assert sum(r.count for r in result.rejected) == result.stats.candidates > 0
    name, value = next(iter(pin.items()))
    assert result.suggestions[1].startswith(f"without your pinned {name}={value}: ")
    assert len(result.suggestions) == 2  # the cluster fits the model: no node, offload or sequence hints


def test_pins_that_break_divisibility_get_the_one_hint_that_applies() -> None:
    """dp 8 x micro-batch 3 does not divide a global batch of 64: before, the hints also offered 2 nodes (at
    micro-batch 2), bf16 optimizer states, another framework and a shorter sequence, none of which is the fix."""
    result = _plan(pinned={"dp": 8, "micro_batch_size": 3})
    assert [r.reason for r in result.rejected] == ["global_batch_divisible"]
    assert len(result.suggestions) == 2 and "without your pinned dp=8, micro_batch_size=3: " in result.suggestions[1]


def test_a_search_out_of_time_says_so_rather_than_nothing_fits() -> None:
    result = _plan(search_time_limit_s=0.001)
    assert result.plans == [] and result.stats.truncated
    assert len(result.suggestions) == 1
    assert "before the search time cap (0.001 s) ran out" in result.suggestions[0]
    assert "raise training.search_time_limit_s" in result.suggestions[0]
    assert "no plan fits" not in result.suggestions[0]


def test_fp8_on_a_stack_without_it_names_the_stacks_that_plan_it() -> None:
    """It said "planned for Megatron-LM only" while torchtitan and MaxText plan FP8 too."""
    result = _plan(precision="fp8", framework="pytorch-fsdp")
    (reason,) = result.rejected
    assert reason.reason == "fp8_framework"
    assert "FP8 is planned with training.stack megatron-core, torchtitan, torchtitan-eager, maxtext, not " in (
        reason.message
    )
    assert _plan(precision="fp8", framework="pytorch-fsdp", stack="torchtitan").plans


@pytest.mark.parametrize(
    ("training", "pp", "why"),
    [
        ({"framework": "deepspeed"}, 1, "keeps bf16 optimizer states (DDP_BFLOAT16)"),
        ({"framework": "megatron-deepspeed"}, 1, "refuses bf16 weights with fp32 gradient accumulation"),
    ],
)
def test_bf16_without_zero_is_refused_for_what_deepspeed_would_do(training: dict[str, Any], pp: int, why: str) -> None:
    """engine.py `_do_optimizer_sanity_check`: ZeRO off, bf16 with fp32 accumulation (Megatron-DeepSpeed's) raises;
    with bf16 accumulation it keeps bf16 optimizer states (DDP_BFLOAT16). The message said DDP_BFLOAT16 for both
    (QA, 2026-12-06)."""
    req = PlanRequest(model="llama-3-8b", cluster=NODE, training={"global_batch_size": 64, **training})
    par = ParallelConfig(pp=pp, dp=8 // pp, zero_stage=0)
    bad = [v for v in rules.check(req.model, req.cluster, req.training, par, 8) if v.code == "framework_support"]
    assert len(bad) == 1 and why in bad[0].message, bad
