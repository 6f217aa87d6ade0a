"""A pin the stack cannot honour is refused by name, never dropped; when the pins, not the cluster, are why nothing
fits, that is the one hint; a search stopped by its time cap says so instead of "no plan fits"."""

from __future__ import annotations

from typing import Any

import pytest

from app.planner import PlanRequest, plan, rules
from app.planner.errors import InputError
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


@pytest.mark.parametrize(
    ("pin", "field", "words"),
    [
        ({"pp": 40}, "training.pinned.pp", "40 > model.num_layers(32)"),
        ({"pp": 2, "vpp": 64}, "training.pinned.vpp", "64 with pp(2): no split of num_layers(32)"),
        ({"pp": 1, "vpp": 2}, "training.pinned.vpp", "training.pinned.pp is 1"),
        ({"tp": 1, "tp_comm_overlap": True}, "training.pinned.tp_comm_overlap", "needs tp > 1; pinned tp is 1"),
        ({"cp": 1, "cp_comm_type": "a2a"}, "training.pinned.cp_comm_type", "pinned cp is 1"),
        ({"recompute_modules": ["mla_up_proj"]}, "training.pinned.recompute_modules", "multi-latent attention"),
        ({"recompute_modules": ["moe"]}, "training.pinned.recompute_modules", "needs an MoE model"),
        ({"recompute": "full", "recompute_modules": ["core_attn"]}, "training.pinned.recompute_modules", "is full"),
        ({"cpu_offloading_num_layers": 2, "recompute": "full"}, "training.pinned.recompute", "without recomputation"),
    ],
)
def test_pins_that_contradict_the_model_or_each_other_are_input_errors(
    pin: dict[str, Any], field: str, words: str
) -> None:
    """QA 2026-12-07: pp 40 on 32 layers, vpp 64 on pp 2 and the like searched no candidate and stored "no plan
    fits" with no reason; an overlap pinned with tp 1, a CP comm type with cp 1 or an MLA recompute module on a
    dense model were dropped and the plan contradicted the pin. Each is now a 422 naming the pin and the numbers."""
    with pytest.raises(InputError) as caught:
        _plan(pinned=pin)
    assert caught.value.field == field and words in caught.value.message


def test_pins_that_the_plan_dropped_now_shape_it() -> None:
    """A pinned overlap, CP comm type or recompute module set was dropped by the chosen plan (TP 1, CP 1, no
    recomputation); now every plan has what was pinned."""
    overlap = _plan(pinned={"tp_comm_overlap": True})
    assert overlap.plans and all(p.parallel.tp > 1 and p.parallel.tp_comm_overlap for p in overlap.plans)
    cp = _plan(pinned={"cp_comm_type": "a2a"})
    assert cp.plans and all(p.parallel.cp > 1 and p.parallel.cp_comm_type == "a2a" for p in cp.plans)
    modules = _plan(pinned={"recompute_modules": ["core_attn"]})
    assert modules.plans and all(
        p.parallel.recompute == "selective" and p.parallel.recompute_modules == ("core_attn",) for p in modules.plans
    )


@pytest.mark.parametrize("framework", ["jax", "pytorch-fsdp"])
def test_zero_offload_pinned_on_an_fsdp_stack_is_refused_by_rule(framework: str) -> None:
    """JAX planned offload_param cpu as no offload at all (QA 2026-12-07): refused by name, as on Megatron."""
    result = _plan(framework=framework, pinned={"offload_param": "cpu"})
    assert result.plans == [] and "not ZeRO stages or ZeRO offload" in result.rejected[0].message


def test_a_deepspeed_param_offload_below_zero_3_is_an_input_error() -> None:
    with pytest.raises(InputError) as caught:
        _plan(framework="deepspeed", pinned={"offload_param": "cpu", "zero_stage": 1})
    assert caught.value.field == "training.pinned.offload_param" and "needs ZeRO-3" in str(caught.value)


def test_a_window_longer_than_the_sequence_is_full_attention() -> None:
    """A window of 100,000 keys at 8,192 tokens gave negative attention FLOPs (MFU -733.8 %, QA 2026-12-07)."""
    from app.planner.compute import causal_keys

    full = PlanRequest(model="llama-3-8b", cluster=NODE, training={"global_batch_size": 64}).model
    wide = full.model_copy(update={"sliding_window": 100_000})
    assert causal_keys(wide) == causal_keys(full) > 0
    assert causal_keys(full.model_copy(update={"sliding_window": 2 * full.seq_length})) == causal_keys(full)


def test_an_estimate_whose_stages_do_not_hold_the_layers_is_an_input_error() -> None:
    """first + last stage layers of 20 + 20 on 32 layers and PP 2 was a 500 (an assertion in the parameter count),
    1 + 1 an estimate with MFU 252 % (QA 2026-12-07)."""
    from app.planner import EstimateRequest, estimate

    for first, last in ((20, 20), (1, 1)):
        request = {
            "model": "llama-3-8b",
            "cluster": NODE,
            "training": {"global_batch_size": 64},
            "parallel": {"pp": 2, "dp": 4, "first_stage_layers": first, "last_stage_layers": last},
        }
        with pytest.raises(InputError) as caught:
            estimate(EstimateRequest.model_validate(request))
        assert caught.value.field == "parallel.first_stage_layers"
        assert f"first({first}) + last({last}) = {first + last} layers on pp(2), num_layers is 32" in str(caught.value)


@pytest.mark.parametrize(("pp", "vpp", "loss", "placed"), [(4, 1, True, 30), (2, 2, False, 31), (2, 1, True, 32)])
def test_an_accounted_split_that_leaves_layers_out_is_an_input_error(
    pp: int, vpp: int, loss: bool, placed: int
) -> None:
    """Llama-3 8B at PP 4 with the embedding and the loss accounted as layers put 7/8/8/7 = 30 of its 32 layers on
    the stages, and the estimate timed that smaller model (a step faster than the valid PP 4's, QA 2026-12-07)."""
    from app.planner import EstimateRequest, estimate

    par = {"pp": pp, "vpp": vpp, "dp": 8 // pp, "account_for_embedding_in_pipeline_split": True,
           "account_for_loss_in_pipeline_split": loss}  # fmt: skip
    request = {"model": "llama-3-8b", "cluster": NODE, "training": {"global_batch_size": 64}, "parallel": par}
    if placed == 32:  # 32 + 2 units on 2 stages: 17 each, every layer placed
        assert sum(s.layers for s in estimate(EstimateRequest.model_validate(request)).memory.stages) == 32
        return
    with pytest.raises(InputError) as caught:
        estimate(EstimateRequest.model_validate(request))
    assert caught.value.field == "parallel.account_for_embedding_in_pipeline_split"
    assert f"the stages would hold {placed} of the 32 layers" in str(caught.value)


def test_mxfp8_off_blackwell_is_an_input_error_for_plan_and_estimate_alike() -> None:
    """The search rejected 36,169 candidates one by one ("mxfp8 needs Blackwell") while the estimate of a fixed
    layout said "feasible" (QA 2026-12-07): both are the same 422 now."""
    from app.planner import EstimateRequest, estimate

    training = {"global_batch_size": 64, "precision": "fp8", "fp8_recipe": "mxfp8"}
    with pytest.raises(InputError) as planned:
        plan(PlanRequest(model="llama-3-8b", cluster=NODE, training=training))
    request = {"model": "llama-3-8b", "cluster": NODE, "training": training, "parallel": {"tp": 1, "dp": 8}}
    with pytest.raises(InputError) as estimated:
        estimate(EstimateRequest.model_validate(request))
    assert planned.value.field == estimated.value.field == "training.fp8_recipe"
    assert "H100-SXM (hopper)" in planned.value.message
    blackwell = plan(PlanRequest(model="llama-3-8b", cluster={**NODE, "gpu": "B200"}, training=training))
    assert blackwell.plans


def test_fsdp_sharding_traffic_is_named_fsdp_in_the_why() -> None:
    """llm-foundry's, torchtitan's and MaxText's sharded traffic read "dist-opt" (QA 2026-12-07)."""
    request = {"model": "llama-3-70b", "cluster": {"num_nodes": 4, "gpu": "H100-SXM"},
               "training": {"global_batch_size": 128, "framework": "pytorch-fsdp", "max_plans": 3}}  # fmt: skip
    result = plan(PlanRequest(**request))
    text = " ".join(line for p in result.plans for line in p.why)
    assert "FSDP " in text and "dist-opt" not in text, text


def test_a_sharding_the_stack_cannot_run_is_refused_by_name_not_called_out_of_memory() -> None:
    """A pinned ZeRO-1 on Megatron: 16,416 of its candidates were reported out of memory (their model states were
    weighed before the stack's rules), although none can run at all (QA 2026-12-07)."""
    result = plan(
        PlanRequest(
            model="llama-3-70b",
            cluster={"num_nodes": 4, "gpu": "H100-SXM"},
            training={"global_batch_size": 512, "pinned": {"zero_stage": 1}},
        )
    )
    reasons = {r.reason: r.count for r in result.rejected}
    assert "out_of_memory" not in reasons, reasons  # (a few break an earlier rule first: interleaving_microbatches)
    assert reasons["framework_support"] > 0.9 * result.stats.candidates > 10_000


@pytest.mark.parametrize("cp", [4, 8])
def test_a2a_p2p_pinned_inside_one_nvlink_domain_splits_its_cp_group(cp: int) -> None:
    """cp_comm_type a2a+p2p pinned where the CP group fits one node made a layout without its two levels, and the
    plan failed its own validation (a traceback naming `parallel`, QA 2026-12-07): every split of the group into an
    a2a level and a ring level is searched."""
    result = _plan(pinned={"cp": cp, "cp_comm_type": "a2a+p2p"})
    assert result.plans
    for p in result.plans:
        a2a, ring = p.parallel.hierarchical_cp_sizes or (0, 0)
        assert (p.parallel.cp_comm_type, a2a * ring, a2a > 1, ring > 1) == ("a2a+p2p", cp, True, True)
        ParallelConfig.model_validate(p.parallel.model_dump())  # the config's own checks


@pytest.mark.parametrize(
    ("training", "words"),
    [
        ({"pinned": {"cp": 2, "cp_comm_type": "a2a+p2p"}}, "pinned cp 2 has no such split"),
        (
            {"framework": "pytorch-fsdp", "stack": "torchtitan", "pinned": {"cp": 2, "cp_comm_type": "a2a+p2p"}},
            "stack runs CP with",
        ),
    ],
)
def test_an_a2a_p2p_pin_that_cannot_be_made_is_a_named_input_error(training: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError, match=words) as err:
        _plan(**training)
    assert err.value.field == "training.pinned.cp_comm_type"


@pytest.mark.parametrize(("gpu", "refused"), [("L40S", True), ("H100-SXM", False), ("B200", False)])
def test_blockwise_fp8_before_hopper_is_an_input_error(gpu: str, refused: bool) -> None:
    """Blockwise FP8 was planned and rendered on L40S (Ada, SM 8.9), where Transformer Engine's recipe check refuses
    it before the first FP8 forward (block-scaled GEMMs need SM90; QA 2026-12-07)."""
    training = {"global_batch_size": 64, "precision": "fp8", "fp8_recipe": "blockwise"}
    request = PlanRequest(model="llama-3-8b", cluster={"num_nodes": 1, "gpu": gpu}, training=training)
    if not refused:
        assert plan(request).plans
        return
    with pytest.raises(InputError, match="Hopper or later") as caught:
        plan(request)
    assert caught.value.field == "training.fp8_recipe"
    par = ParallelConfig(dp=8, fp8_recipe="blockwise")
    assert [v.code for v in rules.check(request.model, request.cluster, request.training, par)] == ["fp8_recipe"]


def test_a2a_p2p_pinned_where_no_split_holds_whole_heads_is_never_planned_as_p2p() -> None:
    """Llama-3 8B's 8 K/V groups over TP 8 leave one a rank: no a2a level splits them, and the pinned a2a+p2p was
    replaced by p2p in every plan, unsaid (review 2026-12-07). The pins are named instead."""
    request = PlanRequest(
        model="llama-3-8b",
        cluster={"num_nodes": 4, "gpu": "H100-SXM"},
        training={"global_batch_size": 64, "pinned": {"cp": 4, "tp": 8, "cp_comm_type": "a2a+p2p"}},
    )
    with pytest.raises(InputError, match="cp_comm_type") as caught:
        result = plan(request)
        assert all(p.parallel.cp_comm_type == "a2a+p2p" for p in result.plans), [p.parallel for p in result.plans]
    assert caught.value.field == "training.pinned"


def test_a_pinned_recompute_layer_count_beyond_the_stage_is_an_input_error() -> None:
    """recompute_num_layers 50 with pp 4 of 80 layers: every candidate broke the 1..layers-per-stage rule and the
    search reported "140 of 168 candidates fail out_of_memory" (practitioner review 2026-12-07)."""
    pins = {"tp": 8, "pp": 4, "recompute": "full", "recompute_num_layers": 50}
    with pytest.raises(InputError) as caught:
        plan(PlanRequest(model="llama-3-70b", cluster={"num_nodes": 4, "gpu": "H100-SXM"},
                         training={"global_batch_size": 128, "pinned": pins}))  # fmt: skip
    assert caught.value.field == "training.pinned.recompute_num_layers"
    assert "50 > the 20 layers of each pipeline stage" in str(caught.value)
    fits = {**pins, "recompute_num_layers": 20}
    ok = plan(PlanRequest(model="llama-3-70b", cluster={"num_nodes": 4, "gpu": "H100-SXM"},
                          training={"global_batch_size": 128, "pinned": fits}))  # fmt: skip
    assert ok.plans and all(p.parallel.recompute_num_layers == 20 for p in ok.plans)


def test_tp_beyond_a_gpu_without_nvlink_names_pcie_not_nodes() -> None:
    """L40S has no NVLink: TP 2 inside one node was refused as if it crossed nodes (practitioner review)."""
    result = plan(PlanRequest(model="llama-3-8b", cluster={"num_nodes": 1, "gpu": "L40S"},
                              training={"global_batch_size": 64, "pinned": {"tp": 2}}))  # fmt: skip
    said = [g.message for g in result.rejected if g.reason == "tp_within_nvlink_domain"]
    assert said and "over PCIe or the network" in said[0] and "across nodes;" not in said[0], said
    h100 = plan(PlanRequest(model="llama-3-8b", cluster={"num_nodes": 2, "gpu": "H100-SXM"},
                            training={"global_batch_size": 64, "pinned": {"tp": 16}}))  # fmt: skip
    said = [g.message for g in h100.rejected if g.reason == "tp_within_nvlink_domain"]
    assert said and "across nodes" in said[0], said
