"""Search invariants: every returned plan satisfies every rule and fits; ranking follows the objective."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.planner import PlanRequest, plan, rules, search, space
from app.planner.calibration import apply_profile
from app.planner.candidates import Found, SearchState, _fits, _try_recompute
from app.planner.errors import InputError
from app.planner.estimate import evaluate, time_estimate
from app.planner.explain import SIMPLER_WITHIN, simplicity
from app.planner.layout import num_microbatches
from app.planner.placement import make_config, placements
from app.planner.traffic import moves_per_microbatch

from .conftest import assert_throughput_ranking

MODELS = ["tiny-gpt", "llama-2-7b", "llama-3-8b", "gpt3-175b", "mixtral-8x7b"]


@st.composite
def requests(draw: st.DrawFn) -> PlanRequest:
    framework = draw(st.sampled_from(["megatron", "deepspeed", "megatron-deepspeed"]))
    gpus_per_node = draw(st.sampled_from([1, 2, 4, 8]))
    return PlanRequest(
        model=draw(st.sampled_from(MODELS)),
        cluster={
            "num_nodes": draw(st.sampled_from([1, 2, 3, 4, 16])),
            "gpus_per_node": gpus_per_node,
            "gpu": draw(st.sampled_from(["A100-40GB", "A100-80GB", "H100-SXM", "L40S"])),
            "nvme_path": "/local_nvme",
        },
        training={
            "global_batch_size": draw(st.sampled_from([8, 32, 96, 256, 1000])),
            "framework": framework,
            "precision": draw(st.sampled_from(["bf16", "fp16"])),
            "objective": draw(st.sampled_from(["throughput", "min_gpus", "headroom"])),
            "flash_attention": draw(st.booleans()),
            "max_plans": 5,
        },
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_every_returned_plan_obeys_every_rule_and_fits(request: PlanRequest) -> None:
    result = plan(request)
    m, c, t = result.model, result.cluster, result.training
    assert result.stats.feasible >= len(result.plans)
    for p in result.plans:
        par = p.parallel
        assert rules.check(m, c, t, par, par.world_size) == []
        est = p.estimate
        assert est.feasible and est.reasons == []
        assert est.memory.peak_bytes <= est.memory.usable_bytes
        assert p.layout.world_size == par.tp * par.pp * par.cp * par.dp <= c.world_size
        assert t.global_batch_size == par.micro_batch_size * num_microbatches(t, par) * par.dp
        assert m.num_attention_heads % par.tp == 0
        assert par.tp <= min(c.gpus_per_node, c.nvlink_domain)
        if t.framework != "megatron" and par.pp > 1:
            assert par.zero_stage <= 1
        uneven = par.first_stage_layers is not None or par.pipeline_layout is not None
        if t.framework == "megatron" and not uneven:
            accounted = par.account_for_embedding_in_pipeline_split + par.account_for_loss_in_pipeline_split
            assert (m.num_layers + accounted) % (par.pp * par.vpp) == 0
        assert sum(p.layout.stage_layers) == m.num_layers and min(p.layout.stage_layers) >= 1
    times = [p.estimate.time.step_s for p in result.plans]
    if t.objective == "throughput":  # by throughput, but a simpler plan within 1 % of the fastest goes first
        assert_throughput_ranking(result.plans)
    elif t.objective == "min_gpus":
        worlds = [p.layout.world_size for p in result.plans]
        assert worlds == sorted(worlds)
    else:
        peaks = [p.estimate.memory.peak_bytes for p in result.plans]
        assert peaks == sorted(peaks)
    assert all(x > 0 for x in times)
    if not result.plans:
        assert result.suggestions and result.rejected


def test_estimate_agrees_with_the_search() -> None:
    result = plan(
        PlanRequest(
            model="llama-2-7b", cluster={"num_nodes": 2, "gpu": "H100-SXM"}, training={"global_batch_size": 256}
        )
    )
    best = result.plans[0]
    again = evaluate(result.model, result.cluster, result.training, best.parallel)
    assert again.time.step_s == pytest.approx(best.estimate.time.step_s)
    assert again.memory.peak_bytes == best.estimate.memory.peak_bytes
    # the fastest, or a simpler plan within 1 % of it (api._simpler_first)
    head = best.why[0]
    assert head.startswith(f"fastest of {result.stats.feasible} feasible plans") or head.startswith("within "), head
    assert f"of the fastest of {result.stats.feasible} feasible plans" in head or head.startswith("fastest")


@pytest.mark.parametrize(("precision", "said"), [("fp8", True), ("bf16", False)])
def test_fp8_mfu_says_it_is_of_the_bf16_peak(precision: str, said: bool) -> None:
    """FP8 MFU divides by the BF16 peak (so FP8 and BF16 compare) and passes 100 % on GB300: "MFU 99.8%" read as a bug
    and contradicted the field's description (QA 2026-12-07)."""
    result = plan(
        PlanRequest(
            model="llama-2-7b",
            cluster={"num_nodes": 1, "gpu": "H100-SXM"},
            training={"global_batch_size": 64, "precision": precision},
        )
    )
    headline = result.plans[0].why[0]
    assert ("MFU" in headline) and (
        f"{100 * result.plans[0].estimate.time.mfu:.1f}% of the BF16 peak" in headline
    ) is said
    assert "BF16 peak for FP8" in type(result.plans[0].estimate.time).model_fields["mfu"].description


def test_pinned_dimensions_are_respected() -> None:
    result = plan(
        PlanRequest(
            model="llama-2-70b",
            cluster={"num_nodes": 4, "gpu": "H100-SXM"},
            training={"global_batch_size": 256, "pinned": {"tp": 8, "pp": 2, "recompute": "full"}},
        )
    )
    assert result.plans and all(
        p.parallel.tp == 8 and p.parallel.pp == 2 and p.parallel.recompute == "full" for p in result.plans
    )


def test_min_gpus_finds_the_smallest_world() -> None:
    result = plan(
        PlanRequest(
            model="llama-2-13b",
            cluster={"num_nodes": 8, "gpu": "A100-80GB"},
            training={"global_batch_size": 128, "objective": "min_gpus"},
        )
    )
    smallest = result.plans[0].layout.world_size
    assert smallest < 64
    fewer = smallest // 2 if smallest <= 8 else smallest - 8
    nodes = max(1, fewer // 8)
    below = plan(
        PlanRequest(
            model="llama-2-13b",
            cluster={"num_nodes": nodes, "gpus_per_node": min(8, fewer), "gpu": "A100-80GB"},
            training={"global_batch_size": 128},
        )
    )
    assert not below.plans


def test_tp_across_nodes_only_when_forced() -> None:
    req = {
        "model": "llama-2-70b",
        "cluster": {"num_nodes": 8, "gpus_per_node": 4, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 64, "pinned": {"tp": 8}},
    }
    assert not plan(PlanRequest(**req)).plans
    forced = plan(PlanRequest(**{**req, "training": {**req["training"], "allow_tp_across_nodes": True}}))
    assert forced.plans and forced.plans[0].estimate.time.breakdown["tp_comm_s"] > 0


def test_130b_on_one_node_of_a100_40gb_with_tp4_zero2_does_not_fit() -> None:
    """A popular tuning guide claims a 130B model trains on 8 x A100-40GB with TP4 + ZeRO-2. It does not:
    the answer names the numbers and what would fit."""
    glm_130b = {
        "name": "glm-130b-like",
        "num_layers": 70,
        "hidden_size": 12288,
        "num_attention_heads": 96,
        "ffn_hidden_size": 32768,
        "swiglu": True,
        "vocab_size": 150528,
        "seq_length": 2048,
    }
    result = plan(
        PlanRequest(
            model=glm_130b,
            cluster={"num_nodes": 1, "gpus_per_node": 8, "gpu": "A100-40GB"},
            training={
                "global_batch_size": 64,
                "framework": "megatron-deepspeed",
                "pinned": {"tp": 4, "zero_stage": 2, "offload_optimizer": "none"},
            },
        )
    )
    assert result.plans == []
    oom = next(g for g in result.rejected if g.reason == "out_of_memory")
    gib = float(re.search(r"needs? ([\d.]+) GiB", oom.message).group(1))  # type: ignore[union-attr]
    assert gib > 100  # far beyond 40 GB: 130e9 params / TP4 x (2 + 2/2 + 16/2) bytes alone is ~340 GiB
    text = " ".join(result.suggestions)
    assert "130" in result.suggestions[0] or "131" in result.suggestions[0]
    assert "nodes" in text  # more GPUs would fit, with how many


def test_bf16_optimizer_states_are_suggested_where_they_make_a_plan_fit() -> None:
    """Llama-2 70B on one node of 8 H200 (141 GB): fp32 Adam state is 12 B/param over the 8 GPUs (~97 GiB) before
    the weights and grads, so nothing fits; with bf16 moments and the master as remainders (6 B/param) it does, and
    the suggestion says so with a plan that the planner then really finds."""
    req = {"model": "llama-2-70b", "cluster": {"num_nodes": 1, "gpu": "H200"}, "training": {"global_batch_size": 64}}
    result = plan(PlanRequest(**req))
    assert result.plans == []
    hint = next(s for s in result.suggestions if s.startswith("optimizer_states bf16"))
    assert "would fit on this cluster" in hint
    again = plan(PlanRequest(**{**req, "training": {**req["training"], "optimizer_states": "bf16"}}))
    assert again.plans and again.plans[0].estimate.feasible


@pytest.mark.parametrize(
    ("pins", "field"),
    [
        ({"cp": 137110}, "training.pinned.cp: 137110 > the cluster's 8 GPUs"),
        ({"tp": 4, "pp": 4}, "tp x pp x dp x cp = 16"),
    ],
)
def test_pins_larger_than_the_cluster_are_refused(pins: dict[str, int], field: str) -> None:
    req = PlanRequest(model="llama-2-7b", cluster={"num_nodes": 1, "gpu": "H100-SXM"},
                      training={"global_batch_size": 64, "pinned": pins})  # fmt: skip
    with pytest.raises(InputError, match=re.escape(field)) as caught:
        plan(req)
    assert caught.value.field.startswith("training.pinned")


@pytest.mark.parametrize(
    ("model", "gpu", "nodes", "batch"),
    [
        ({"preset": "llama-2-70b", "seq_length": 8192}, "H100-SXM", 8, 128),
        # a bound 3 % above the floors (unsound) drops a recomputing plan from this ranking
        ({"preset": "llama-2-70b", "seq_length": 16384}, "H100-SXM", 4, 64),
    ],
)
def test_levels_behind_the_bar_are_not_evaluated_and_the_ranking_stays(
    monkeypatch: pytest.MonkeyPatch, model: object, gpu: str, nodes: int, batch: int
) -> None:
    """A recomputation level whose stage floors plus its recomputation already exceed the bar is left unevaluated:
    the ranking (layouts and step times) is that of the search that evaluates every level, with fewer memory
    evaluations."""
    from app.planner import candidates

    req = PlanRequest(model=model, cluster={"num_nodes": nodes, "gpu": gpu}, training={"global_batch_size": batch})
    bounded = plan(req)
    original = candidates._try_recompute

    def every_level(*args: object) -> candidates.Outcome:
        return original(*args[:10])  # type: ignore[arg-type]  # no stage floors: no level is behind the bar

    monkeypatch.setattr(candidates, "_try_recompute", every_level)
    evaluated = plan(req.model_copy(deep=True))
    assert [(p.parallel, p.estimate.time.step_s) for p in bounded.plans] == [
        (p.parallel, p.estimate.time.step_s) for p in evaluated.plans
    ]
    assert bounded.stats.evaluated < evaluated.stats.evaluated
    assert bounded.stats.skipped > evaluated.stats.skipped


@pytest.mark.parametrize(
    ("framework", "hint", "then"),
    [
        ("megatron-deepspeed", "set training.stack 'megatron-deepspeed-bigscience'", {}),
        (
            "megatron",
            "set training.framework 'megatron-deepspeed' with training.stack 'megatron-deepspeed-bigscience'",
            {"framework": "megatron-deepspeed"},
        ),
    ],
)
def test_an_alibi_model_on_a_stack_without_alibi_names_the_stack_that_runs_it(
    framework: str, hint: str, then: dict[str, str]
) -> None:
    """BLOOM-176B (ALiBi) on 384 A100: upstream Megatron-DeepSpeed and Megatron-core have no ALiBi, so every
    candidate is refused, and the reason names the stack that trained BLOOM (BigScience's fork, in the stack data);
    following it plans BLOOM as that fork runs it."""
    cluster = {"num_nodes": 48, "gpu": "A100-80GB"}
    refused = plan(PlanRequest(model="bloom-176b", cluster=cluster,
                               training={"global_batch_size": 2048, "framework": framework}))  # fmt: skip
    assert refused.plans == []
    reason = next(r for r in refused.rejected if r.reason == "framework_support")
    assert "bloom-176b uses ALiBi" in reason.message and hint in reason.message
    training = {"global_batch_size": 2048, "framework": framework, **then, "stack": "megatron-deepspeed-bigscience"}
    assert plan(PlanRequest(model="bloom-176b", cluster=cluster, training=training)).plans


def test_out_of_memory_by_monotonicity_alone_still_has_a_message() -> None:
    """Candidates counted out of memory because smaller ones did not fit, before any evaluated miss gave the reason
    its message (the smaller ones broke a rule instead): the rejected list still builds, and an evaluated miss
    replaces the generic message."""
    from app.planner.api import _rejected
    from app.planner.candidates import SearchState
    from app.planner.specs import ParallelConfig

    state = SearchState()
    state.known_out_of_memory(3)
    (group,) = _rejected(state)
    assert (group.reason, group.count, group.examples) == ("out_of_memory", 3, [])
    assert "runs out of memory" in group.message
    state.rejected.add("out_of_memory", "needs 90.0 GiB per GPU", ParallelConfig(), score=90.0)
    (group,) = _rejected(state)
    assert (group.count, group.message, len(group.examples)) == (4, "needs 90.0 GiB per GPU", 1)


def test_a_pinned_cp_is_skipped_on_worlds_that_cannot_hold_it() -> None:
    """min_gpus tries worlds from one GPU up; a pinned CP of 2 (with a pinned PP) on one GPU left no data-parallel
    rank (dp 0) and the search failed (ZeroDivisionError in placement._inner, found by
    tests/api/test_random_inputs.py)."""
    training = {"global_batch_size": 64, "objective": "min_gpus", "pinned": {"cp": 2, "pp": 1}}
    r = PlanRequest(model="tiny-gpt", cluster={"num_nodes": 1, "gpu": "H100-SXM"}, training=training)
    result = plan(r)
    assert result.plans
    assert all(p.parallel.cp == 2 and p.parallel.dp >= 1 for p in result.plans)
    assert {p.parallel.world_size for p in result.plans} == {result.plans[0].parallel.world_size}


CASES = {
    # Memory is not monotone along the recomputation levels: selective recomputation of the norms and the expert
    # activations on every layer keeps less than full recomputation of up to 16 of the 32 layers, and costs less
    # time. A bisection that took the levels as one chain ran into a full level that did not fit, searched only
    # above it, and kept full recomputation of 31 layers under Megatron-FSDP optim_grads (7.46 s against 5.62 s);
    # the first plan was another sharding's, 2 % slower than the fastest that fits.
    "mixtral-selective": (
        "mixtral-8x7b",
        "H200",
        {"global_batch_size": 64, "pinned": {"tp": 1, "pp": 1, "cp": 1, "ep": 4, "micro_batch_size": 1}},
    ),
    # DeepSpeed's ZeRO stages are not ordered by time: ZeRO-3 was tried only with the levels faster than the one
    # ZeRO-1 needed, so the search kept ZeRO-1 (9.613 s) over ZeRO-3 at the same recomputation (9.590 s). (Since
    # ZeRO-1's gradients are counted under the later micro-batches' activations, ZeRO-1 at micro-batch 2 no longer
    # fits: ZeRO-2 and ZeRO-3 with full recomputation are left, 9.59 s each.)
    "deepspeed-zero": (
        "llama-3-8b",
        "H100-SXM",
        {"global_batch_size": 64, "framework": "deepspeed", "pinned": {"tp": 1, "pp": 1, "micro_batch_size": 2}},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_search_keeps_the_fastest_sharding_and_recomputation_that_fit(case: str) -> None:
    """The first plan is no slower than any sharding the stack offers with any recomputation level, at its
    layout and micro-batch size, that fits."""
    model, gpu, training = CASES[case]
    request = PlanRequest(model=model, cluster={"num_nodes": 1, "gpu": gpu}, training=training)
    result = plan(request)
    best = result.plans[0]
    steps = []
    for sharding in space.sharding_options(request.training, best.parallel.dp, 1, 1, False):
        for level in space.recompute_options(request.model, request.training, request.model.num_layers):
            full = level.recompute == "full"
            par = best.parallel.model_copy(
                update={
                    "distributed_optimizer": best.parallel.distributed_optimizer,
                    "megatron_fsdp": None,
                    **sharding,
                    "recompute": level.recompute,
                    "recompute_modules": level.modules,
                    "recompute_method": level.method,
                    "recompute_num_layers": level.layers,
                    "moe_ep_overlap": best.parallel.moe_ep_overlap and not full,
                }
            )
            estimate = evaluate(request.model, result.cluster, request.training, par)
            if estimate.feasible and estimate.time is not None:
                steps.append((estimate.time.step_s, sharding, level))
    fastest = min(steps, key=lambda s: s[0])
    assert len(steps) >= 2
    assert best.estimate.time is not None
    # the fastest, or a plan with fewer moving parts within 1 % of it (api._simpler_first)
    kept = best.estimate.time.step_s
    if kept > fastest[0] * (1 + 1e-9):
        assert kept <= fastest[0] * (1 + SIMPLER_WITHIN), (best.parallel, fastest)
        faster = [p for p in result.plans if p.estimate.time.step_s < kept]
        assert faster and all(simplicity(p.parallel) > simplicity(best.parallel) for p in faster)


@pytest.mark.parametrize(
    ("model", "gpu", "nodes", "batch"),
    [
        ("mixtral-8x7b", "H200", 1, 64),
        ("qwen3-30b-a3b", "A100-40GB", 8, 256),
        ("llama-3-70b", "H200", 8, 256),
        ("llama-2-70b", "A100-80GB", 4, 1024),
        ("llama-2-7b", "L40S", 1, 64),
    ],
)
def test_the_level_tried_first_that_fits_is_the_fastest_that_fits(model: str, gpu: str, nodes: int, batch: int) -> None:
    """For every tenth placement, its first two shardings and three smallest micro-batch sizes: the level the search
    keeps (the first in the order it tries that fits) is within 2 % of the fastest level that fits, found by timing
    every level. The bisection over the levels as one chain kept levels up to 33 % slower in 68 of 1,001 such sets
    over 40 random requests; 1 is left there, 0.35 % slower. The order is by the busiest stage's layer time, which
    leaves out the sharding's per-micro-batch traffic that recomputation gives more time to hide behind (Qwen3-30B-A3B
    under Megatron-FSDP optim_grads here: full recomputation of 4 layers kept, a level 1.4 % faster fits). Since its
    expert gradients are reduce-scattered over the expert-data-parallel group (one NIC per node, 2026-12-07), that
    traffic is larger, and under a sharding that moves it every micro-batch the kept level is within 3.5 % (3.3 %:
    one fully recomputed layer kept where selective `moe` recomputation hides more of it): a known limit of the
    order, on a placement whose 6 s is far behind the ranked plans (3.2 s) either way."""
    request = PlanRequest(model=model, cluster={"num_nodes": nodes, "gpu": gpu}, training={"global_batch_size": batch})
    cluster, _ = apply_profile(request.cluster, request.training)
    m, training, world = request.model, request.training, cluster.world_size
    budget = search.memory_budget(cluster, training)
    checked = 0
    for pl in list(placements(m, cluster, training, world))[::10]:
        work = search._work(m, cluster, training, world, pl, SearchState(), False)
        if work is None:
            continue
        for sharding in work.shardings[:2]:
            for mbs in work.sizes[:3]:
                order = search._levels_by_cost(m, cluster, training, pl, work.levels, mbs, work.shardings[0])
                tried = _try_recompute(m, cluster, training, world, pl, mbs, sharding, order, SearchState(), budget)
                index, found = tried.found, tried.plan
                fitting = []
                for level in order:
                    par = make_config(m, cluster, training, pl, mbs, level, sharding)
                    if rules.check(m, cluster, training, par, world, only=rules.CANDIDATE_RULES):
                        continue
                    if isinstance(_fits(m, cluster, training, par, SearchState(), budget), Found):
                        fitting.append(time_estimate(m, cluster, training, par).step_s)
                assert (found is None) == (not fitting), (pl, mbs, sharding)
                if found is not None:
                    kept = time_estimate(m, cluster, training, found.par).step_s
                    limit = 1.035 if moves_per_microbatch(training, found.par) else 1.02
                    assert kept <= min(fitting) * limit, (pl, mbs, sharding, order[index or 0])
                    checked += 1
    assert checked >= 5


def test_the_headroom_objective_ranks_the_plans_near_the_fastest() -> None:
    """Most memory headroom over every feasible plan put a 2x slower one first for Llama-3 8B (6.5x for 70B on 64
    H100, zero_comm 84 % of its step; QA 2026-12-07): nobody runs that. Headroom ranks the plans within 10 % of the
    fastest, by peak memory, and says so."""
    body = {
        "model": "llama-3-8b",
        "cluster": {"num_nodes": 2, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 128},
    }
    fastest = plan(PlanRequest.model_validate(body)).plans[0]
    body["training"]["objective"] = "headroom"  # type: ignore[index]
    result = plan(PlanRequest.model_validate(body))
    steps = [p.estimate.time.step_s for p in result.plans]
    peaks = [p.estimate.memory.peak_bytes for p in result.plans]
    assert result.plans and max(steps) <= fastest.estimate.time.step_s * 1.10 + 1e-9
    assert peaks == sorted(peaks) and peaks[0] < fastest.estimate.memory.peak_bytes
    assert "within 10% of the fastest" in result.plans[0].why[0]
    # one count of feasible plans: the stats said the search's, the headline added the recomputation pass's (QA)
    assert f"({result.stats.feasible} feasible)" in result.plans[0].why[0], (result.stats.feasible, result.plans[0].why)
