"""Layouts the planner called feasible (or refused) where megatron-core says otherwise, each from a QA run of
2026-12-07 against megatron-core core_v0.16.1 and Megatron-LM's validate_args."""

from __future__ import annotations

from typing import Any

import pytest

from app.planner import EstimateRequest, PlanRequest, estimate, plan
from app.planner.explain import describe
from app.planner.specs import ParallelConfig
from app.service.bounds import layout_errors


def _estimate(model: Any, nodes: int, gbs: int, **par: Any) -> Any:
    return estimate(
        EstimateRequest(
            model=model,
            cluster={"num_nodes": nodes, "gpu": "H100-SXM"},
            training={"global_batch_size": gbs},
            parallel=par,
        )
    )


def test_an_moe_model_split_by_tp_needs_sequence_parallel() -> None:
    """MoELayer.forward raises in training when TP > 1 without sequence parallelism (moe_layer.py L379), past
    every config check: Mixtral TP2 EP8 ETP1 without SP was "feasible" and rendered. Dense models are not bound."""
    moe = _estimate("mixtral-8x7b", 1, 256, tp=2, dp=4, ep=8, etp=1, sequence_parallel=False)
    assert not moe.feasible and any("needs sequence_parallel" in r for r in moe.reasons), moe.reasons
    with_sp = _estimate("mixtral-8x7b", 1, 256, tp=2, dp=4, ep=8, etp=1, sequence_parallel=True)
    assert not any("sequence_parallel" in r for r in with_sp.reasons), with_sp.reasons
    dense = _estimate("llama-3-8b", 1, 256, tp=2, dp=4, sequence_parallel=False)
    assert not any("sequence_parallel" in r for r in dense.reasons), dense.reasons
    pinned = plan(
        PlanRequest(
            model="mixtral-8x7b",
            cluster={"num_nodes": 1, "gpu": "H100-SXM"},
            training={"global_batch_size": 256, "pinned": {"tp": 2, "sequence_parallel": False}},
        )
    )
    assert pinned.plans == []


def test_uniform_recompute_groups_must_divide_every_chunk() -> None:
    """transformer_block.py L536-541 checkpoints layers[k*i : k*(i+1)] with no clamp: chunks of 9 and 11 layers in
    groups of 2 raise IndexError in the first backward. Groups of 1 always fit; block recompute takes any count."""
    base = {"tp": 8, "pp": 8, "first_stage_layers": 9, "last_stage_layers": 11, "sequence_parallel": True}
    full = {**base, "recompute": "full"}
    bad = _estimate("llama-3-70b", 8, 64, **full, recompute_method="uniform", recompute_num_layers=2)
    assert not bad.feasible and any("chunks of [9, 11] layers" in r for r in bad.reasons), bad.reasons
    for method, k in (("uniform", 1), ("block", 2)):
        ok = _estimate("llama-3-70b", 8, 64, **full, recompute_method=method, recompute_num_layers=k)
        assert not any("recompute" in r for r in ok.reasons), ok.reasons


@pytest.mark.parametrize(
    "extra",
    [
        {"account_for_embedding_in_pipeline_split": True},
        {"first_stage_layers": 16, "last_stage_layers": 14},
    ],
)
def test_a_layout_string_takes_no_other_pipeline_split(extra: dict[str, Any]) -> None:
    """TransformerConfig refuses pipeline_model_parallel_layout beside first/last stage layers or the accounting
    flags (transformer_config.py L1306-1318); the planner called both feasible and rendered both flags."""
    model = {"preset": "llama-3-405b", "seq_length": 8192}
    par = {"tp": 8, "pp": 8, "cp": 2, "dp": 8, "sequence_parallel": True, "distributed_optimizer": True}
    layout = "Et*15|(t*16|)*6,t*15L"
    alone = _estimate(model, 128, 2048, **par, pipeline_layout=layout)
    assert not any("pipeline_layout" in r for r in alone.reasons), alone.reasons
    both = _estimate(model, 128, 2048, **par, pipeline_layout=layout, **extra)
    assert not both.feasible and any("cannot be set with other pipeline layout" in r for r in both.reasons)


def test_the_size_bound_counts_the_embedding_and_loss_as_stage_work() -> None:
    """NVIDIA's Llama-3.1 405B layout: 126 layers + embedding + loss on PP16 x VPP8, 128 units. The service's
    size bound said "pp * vpp(128) > num_layers(126)"; the search itself generates this layout."""
    par = ParallelConfig(
        tp=8,
        pp=16,
        vpp=8,
        cp=2,
        dp=4,
        sequence_parallel=True,
        distributed_optimizer=True,
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
    )
    req = EstimateRequest(
        model={"preset": "llama-3-405b", "seq_length": 8192},
        cluster={"num_nodes": 128, "gpu": "H100-SXM"},
        training={"global_batch_size": 2048},
        parallel=par,
    )
    assert layout_errors(req) == []
    unaccounted = req.model_copy(
        update={"parallel": par.model_copy(update={"account_for_loss_in_pipeline_split": False})}
    )
    assert [e.field for e in layout_errors(unaccounted)] == ["parallel"]
    # a layout string says what each stage holds, empty stages included (Megatron allows them): its rule decides
    tiny = {"preset": "tiny-gpt", "num_layers": 4}
    empty = EstimateRequest(
        model=tiny,
        cluster={"num_nodes": 1, "gpu": "H100-SXM"},
        training={"global_batch_size": 8},
        parallel=ParallelConfig(pp=4, vpp=2, dp=2, pipeline_layout="Et|t||t|t|||L"),
    )
    assert layout_errors(empty) == []


def test_a_layout_whose_repeats_expand_past_any_model_is_an_input_error() -> None:
    """`t*99999999999999` ran `trainplan estimate` out of memory expanding it (a MemoryError traceback)."""
    from app.planner.errors import InputError

    with pytest.raises((InputError, ValueError), match="expands past"):
        _estimate("llama-3-8b", 1, 64, tp=2, pp=4, dp=1, pipeline_layout="Et*99999999999999|t*8|t*8|t*8L")
    # many repeats each under the cap: counted before the pass that would make them (it reached 832 MB first)
    import tracemalloc

    from app.planner.layout import parse_layout_text

    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"expands past .* characters$"):
            parse_layout_text("E" + "t*1048000|" * 400 + "L")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10_000_000  # bytes: nothing near the 419 MB string one pass would build


def test_the_flex_dispatcher_is_named_for_what_it_is_not_one_backend() -> None:
    """The plan said "DeepEP" where the rendered backend is HybridEP (GB200 NVL72): the name is the dispatcher's."""
    par = ParallelConfig(tp=1, pp=1, dp=8, ep=8, moe_token_dispatcher="flex")
    assert "flex-dispatch" in describe(par) and "DeepEP" not in describe(par)


def test_an_uneven_split_that_vpp_does_not_divide_names_each_stage_in_order() -> None:
    """Llama-3 70B on PP3 with first 18 and last 14 layers was refused as "stage layers [18, 14, 48] not divisible by
    vpp(4)": first, last, then the middle, unnamed, read as three stages in that order (practitioner QA)."""
    est = _estimate("llama-3-70b", 3, 96, tp=8, pp=3, dp=1, vpp=4, first_stage_layers=18, last_stage_layers=14)
    said = [r for r in est.reasons if "vpp(4)" in r]
    assert said, est.reasons
    assert "(first stage 18, 1 middle stage 48, last stage 14)" in said[0], said[0]
    only_last = _estimate("llama-3-70b", 3, 96, tp=8, pp=3, dp=1, vpp=4, last_stage_layers=14)
    said = [r for r in only_last.reasons if "vpp(4)" in r]
    assert said and "(2 other stages 33 each, last stage 14)" in said[0], said[0]


def test_multi_latent_attention_gets_no_tp_comm_overlap() -> None:
    """megatron-core's TELinear turns tp_comm_overlap off on the shared config at MLA's first projection (userbuffers
    for qkv, proj, fc1, fc2 only), so every later layer's TP communication is exposed; the planner credited the
    overlap and rendered --tp-comm-overlap for DeepSeek-V3-like TP4 (render review 2026-12-07)."""
    mla = plan(
        PlanRequest(
            model="deepseek-v3-like",
            cluster={"num_nodes": 32, "gpu": "H100-SXM"},
            training={"global_batch_size": 2048, "precision": "fp8", "pinned": {"tp": 4}},
        )
    )
    assert mla.plans and all(p.parallel.tp == 4 for p in mla.plans)
    assert not any(p.parallel.tp_comm_overlap for p in mla.plans), [describe(p.parallel) for p in mla.plans]
    pinned = _estimate("deepseek-v3-like", 32, 2048, tp=4, dp=64, ep=64, etp=1, sequence_parallel=True,
                       tp_comm_overlap=True)  # fmt: skip
    assert not pinned.feasible and any("multi-latent attention" in r for r in pinned.reasons), pinned.reasons
    dense = plan(PlanRequest(model="llama-3-70b", cluster={"num_nodes": 8, "gpu": "H100-SXM"},
                             training={"global_batch_size": 512, "pinned": {"tp": 4}}))  # fmt: skip
    assert any(p.parallel.tp_comm_overlap for p in dense.plans)
