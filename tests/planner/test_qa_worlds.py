"""The GPU counts the search tries and what it says when nothing fits (QA of the CLI, 2026-12-07): a GPU the CUDA
context fills, nodes of 6 GPUs, a batch smaller than the model-parallel rest, a pinned node count, a TP group that
does not divide a node."""

from __future__ import annotations

import pytest

from app.planner import PlanRequest, plan, rules
from app.planner.errors import InputError
from app.planner.specs import ClusterSpec, ParallelConfig, TrainingSpec
from app.planner.worlds import fewer_nodes

from .conftest import preset

SIX = {"num_nodes": 7, "gpus_per_node": 6, "gpu": "H100-SXM"}


def test_a_gpu_the_cuda_context_fills_is_an_input_error() -> None:
    """A custom GPU of 1 GiB left nothing for the model beside the 1.5 GiB context and workspaces: the hint's GPU
    count became infinite and `plan` died of an OverflowError."""
    gpu = {"preset": "H100-SXM", "name": "tiny", "memory_bytes": 2**30}
    request = PlanRequest(model="llama-3-8b", cluster={"num_nodes": 4, "gpu": gpu}, training={"global_batch_size": 64})
    with pytest.raises(InputError) as err:
        plan(request)
    assert err.value.field == "cluster.gpu.memory_bytes"
    assert "1.00 GiB leaves nothing" in str(err.value) and "take 1.50 GiB" in str(err.value)


def test_nodes_of_six_gpus_search_the_count_a_pp_of_9_needs() -> None:
    """Llama-3 8B, a batch of 128 on 7 nodes of 6: 42 GPUs leave TP x PP x CP 21; the rule of an odd rest of at
    most 3 kept only 4 nodes (198k tokens/s), where 6 nodes (PP 9: the node's own factor 3 times 3) run 1.4x
    faster. The odd rest allowed is 3 times the node's own odd factor."""
    assert fewer_nodes(7, 6, 128) == [6, 4]
    assert fewer_nodes(7, 8, 1536) == [6, 4] and fewer_nodes(1000, 8, 4096) == [768, 512]  # nodes of 8 as before
    best = plan(PlanRequest(model="llama-3-8b", cluster=SIX, training={"global_batch_size": 128})).plans[0]
    four = plan(
        PlanRequest(model="llama-3-8b", cluster=SIX, training={"global_batch_size": 128, "pinned": {"num_nodes": 4}})
    ).plans[0]
    assert best.layout.world_size == 36 and any("6 stay idle" in line for line in best.why), best.why
    assert best.estimate.time is not None and four.estimate.time is not None
    assert best.estimate.time.tokens_per_s > 1.2 * four.estimate.time.tokens_per_s


def test_a_batch_smaller_than_the_model_parallel_rest_tries_fewer_nodes() -> None:
    """tiny-gpt with a batch of 7 on 8 nodes of 8: 64 GPUs divide no data-parallel size but 1, and no layout
    splits the model 64 ways: "no plan". 7 nodes give 7 replicas of 8 GPUs."""
    assert fewer_nodes(8, 8, 7) == [7]
    result = plan(
        PlanRequest(model="tiny-gpt", cluster={"num_nodes": 8, "gpu": "H100-SXM"}, training={"global_batch_size": 7})
    )
    assert result.plans and result.plans[0].layout.world_size == 56


def test_the_hint_without_a_pinned_node_count_searches_the_counts_the_planner_tries() -> None:
    """With num_nodes 5 pinned (30 GPUs, no data-parallel size divides the batch) the hint said nothing fits
    without the pin, though the unpinned search plans on 6 nodes; and the first line named all 42 GPUs."""
    pinned = {"global_batch_size": 128, "pinned": {"num_nodes": 5}}
    result = plan(PlanRequest(model="llama-3-8b", cluster=SIX, training=pinned))
    assert not result.plans
    assert "on 30 of the 42 x H100-SXM (pinned num_nodes)" in result.suggestions[0]
    assert any(
        s.startswith("without your pinned num_nodes=5:") and "on 6 of the 7 nodes" in s for s in result.suggestions
    )


def test_a_tp_group_that_does_not_divide_the_node_is_refused() -> None:
    """TP groups are consecutive ranks: TP 4 on nodes of 6 puts ranks 4-7 on two nodes; a pinned TP 4 was planned
    with TP-overlap across them."""
    cluster = ClusterSpec(num_nodes=4, gpus_per_node=6, gpu="H100-SXM")
    model, training = preset("llama-3-8b"), TrainingSpec(global_batch_size=96)
    par = ParallelConfig(tp=4, pp=2, dp=3, sequence_parallel=True)
    assert [v.code for v in rules.check(model, cluster, training, par)] == ["tp_within_nvlink_domain"]
    across = training.model_copy(update={"allow_tp_across_nodes": True})
    assert not rules.check(model, cluster, across, par)
    assert not rules.check(model, cluster, training, par.model_copy(update={"tp": 2, "dp": 6}))
