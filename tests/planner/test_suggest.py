"""The "N nodes would fit" hint: the count it names is the fewest that fits, and a search stopped by its time cap is
never taken for one that found nothing."""

from __future__ import annotations

import re
import time

import pytest

from app.planner import PlanRequest, plan, suggest
from app.planner.candidates import SearchState
from app.planner.clock import Deadline
from app.planner.search import search_world

LLAMA_405B = {"model": "llama-3-405b", "training": {"global_batch_size": 512}}


@pytest.fixture(autouse=True)
def _unhurried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Time caps wide enough that no search here stops at one on a slow or busy machine: the tests are about the
    counts, and the one that is about a capped search caps it itself."""
    monkeypatch.setattr(suggest, "BUDGET_S", 120.0)
    monkeypatch.setattr(suggest, "SUB_SEARCH_S", 60.0)


def _request(nodes: int) -> PlanRequest:
    return PlanRequest(**LLAMA_405B, cluster={"num_nodes": nodes, "gpu": "H100-SXM"})


def _node_hint(suggestions: list[str]) -> str:
    return next(s for s in suggestions if re.match(r"\d+ nodes \(", s))


def test_the_node_count_suggested_is_the_fewest_that_fits() -> None:
    """Llama-3 405B on 2 nodes of H100: nothing fits; the hint names a count on which the planner really finds a
    plan, and on one node fewer it finds none."""
    result = plan(_request(2))
    assert result.plans == []
    hint = _node_hint(result.suggestions)
    assert "may fit too" not in hint  # every count below was settled
    nodes = int(hint.split()[0])
    assert plan(_request(nodes)).plans
    assert plan(_request(nodes - 1)).plans == []


def test_a_search_stopped_by_its_cap_is_not_taken_for_nothing_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the search on one count stops at its time cap without a plan, whether that count fits is not known:
    the hint must not name a larger count as if it were the fewest (before, it did), and says fewer may fit."""
    fewest = int(_node_hint(plan(_request(2)).suggestions).split()[0])

    def capped(model, cluster, training, world, state, deadline, offload):  # type: ignore[no-untyped-def]
        if cluster.num_nodes == fewest:  # this count's search runs out of time before it finds a plan
            state.truncated = True
            return None
        return search_world(model, cluster, training, world, state, deadline, offload)

    monkeypatch.setattr(suggest, "search_world", capped)
    hint = _node_hint(plan(_request(2)).suggestions)
    nodes = int(hint.split()[0])
    assert nodes > fewest
    assert f"fewer than {nodes} may fit too" in hint


def test_a_yes_no_search_stops_at_the_first_plan() -> None:
    """`first_fit` answers whether anything fits: it stops after the first placement with a plan, having looked at
    fewer candidates than the full search, and what it found is one of the full search's plans."""
    req = _request(16)
    model, cluster, training = req.model, req.cluster, req.training
    full, first = SearchState(), SearchState(first_fit=True)
    for state in (full, first):
        search_world(model, cluster, training, cluster.world_size, state, Deadline.after(60), False)
    assert first.found and len(first.found) < len(full.found)
    assert first.evaluated < full.evaluated
    assert {f.par for f in first.found} <= {f.par for f in full.found}
    found, known = suggest._fits_on(model, cluster.model_copy(update={"num_nodes": 1}), training, 16, False,
                                    time.perf_counter() + 60)  # fmt: skip
    assert found is not None and known
    assert suggest._fits_on(model, cluster, training, 16, False, time.perf_counter() - 1) == (None, False)


def test_a_capped_search_on_a_cluster_the_states_alone_overflow_says_so() -> None:
    """DeepSeek-V3 on one 8 x H100 node with a 0.01 s cap: the search stops before it has rejected everything, yet
    the model states alone need far more GPUs than 8 (known without a search). The answer said only "raise the time
    cap", which no cap would fix (QA 2026-12-07); a cap on a cluster that could fit still says that."""
    req = {
        "model": "deepseek-v3-like",
        "cluster": {"num_nodes": 1, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 64, "search_time_limit_s": 0.01},
    }
    result = plan(PlanRequest(**req))
    assert result.stats.truncated and not result.plans
    first = result.suggestions[0]
    assert re.search(r"model states alone need at least \d+ of these GPUs", first), first
    assert not any("raise training.search_time_limit_s" in s for s in result.suggestions)
    small = {**req, "model": "llama-3-70b", "cluster": {"num_nodes": 8, "gpu": "H100-SXM"}}
    state = SearchState(truncated=True)
    hint = suggest.suggestions(PlanRequest(**small), state)
    assert len(hint) == 1 and "raise training.search_time_limit_s" in hint[0]


def test_where_the_host_cannot_hold_the_offloaded_states_nvme_is_suggested() -> None:
    """70B on 4 H100 with 512 GiB of host memory: plans offloading to NVMe were refused for want of
    cluster.nvme_path and no hint said so, only "8 nodes would fit" (practitioner review 2026-12-07)."""
    cluster = {"num_nodes": 1, "gpus_per_node": 4, "gpu": "H100-SXM", "cpu_memory_GiB": 512}
    result = plan(PlanRequest(model="llama-3-70b", cluster=cluster,
                              training={"global_batch_size": 32, "framework": "deepspeed"}))  # fmt: skip
    assert not result.plans and any(g.reason == "nvme_needs_path" for g in result.rejected)
    said = [h for h in result.suggestions if "cluster.nvme_path" in h]
    assert said and "ZeRO-3" in said[0] and "nvme" in said[0], result.suggestions
    # and the plan it names is what the search finds once the path is given
    given = plan(PlanRequest(model="llama-3-70b", cluster={**cluster, "nvme_path": "/local_nvme"},
                             training={"global_batch_size": 32, "framework": "deepspeed"}))  # fmt: skip
    assert given.plans and "nvme" in (given.plans[0].parallel.offload_optimizer, given.plans[0].parallel.offload_param)
