"""MoE token dispatch (app/planner/dispatch.py): what alltoall and DeepEP's flex dispatcher move, worked by hand."""

from __future__ import annotations

import itertools
from math import comb

import pytest

from app.planner import comm, dispatch
from app.planner.api import plan
from app.planner.estimate import evaluate
from app.planner.specs import ClusterSpec, ParallelConfig, PlanRequest, TrainingSpec

from .conftest import preset


def test_reach_is_the_chance_that_a_token_lands_on_a_unit() -> None:
    # top-2 of 8 experts, one expert per GPU: a GPU is missed when both choices fall on the 7 others
    assert dispatch.reach(8, 1, 2) == pytest.approx(1 - 21 / 28)
    # DeepSeek-V3 (256 experts, top-8) on 8 nodes without groups: a node holds 32
    assert dispatch.reach(256, 32, 8) == pytest.approx(1 - comb(224, 8) / comb(256, 8))
    # ... with group-limited routing (8 groups, 4 chosen): one of 4 nodes holds 2 whole groups; missed when neither
    # is chosen (15 of 70 choices), or when j of them are and all 8 picks among the 128 chosen experts miss them
    missed = comb(6, 4) + comb(2, 1) * comb(6, 3) * comb(96, 8) / comb(128, 8) + comb(6, 2) * comb(64, 8) / comb(128, 8)
    assert dispatch.reach(256, 64, 8, 8, 4) == pytest.approx(1 - missed / comb(8, 4))
    # a GPU inside one group: its group is chosen (4/8), then hit among the 128 experts of the chosen groups
    assert dispatch.reach(256, 8, 8, 8, 4) == pytest.approx(4 / 8 * (1 - comb(120, 8) / comb(128, 8)))
    assert dispatch.reach(64, 64, 6) == 1.0


def test_deepep_sends_a_token_once_per_node_it_reaches() -> None:
    """DeepSeek-V3 on 32 B200 nodes, EP32 over 4 of them: alltoall sends each of the 8 copies whose expert is on
    another node (8 x 24/32 = 6 per token); DeepEP one per node reached (about 3 x 55/70 = 2.36), so its network
    term is that share of alltoall's."""
    model = preset("deepseek-v3-like", seq_length=4096)
    cluster = ClusterSpec(num_nodes=32, gpus_per_node=8, gpu="B200")
    g = comm.group(32, 1, cluster)
    assert (g.size, g.per_domain, g.domains) == (32, 8, 4)
    gpus, domains = dispatch.flex_copies(model, g)
    assert domains == pytest.approx(3 * dispatch.reach(256, 64, 8, 8, 4))
    assert 2.1 < domains < 3 * 55 / 70  # 3 x 55/70 if every chosen group got one of the 8
    assert gpus == pytest.approx(31 * dispatch.reach(256, 8, 8, 8, 4))
    tokens, token_bytes = 4096.0, 2 * 7168
    lat = comm.latency("all_to_all", g, cluster)
    flex = dispatch.all_to_all_time(model, "flex", tokens, token_bytes, g, cluster) - lat
    a2a = dispatch.all_to_all_time(model, "alltoall", tokens, token_bytes, g, cluster) - lat
    nic = cluster.inter_bw * cluster.gpu.efficiency.network
    assert flex == pytest.approx(tokens * token_bytes * domains / nic)
    assert a2a == pytest.approx(tokens * 8 * token_bytes * 24 / 32 / nic)
    assert flex / a2a == pytest.approx(domains / 6)


def test_flex_never_moves_more_than_alltoall() -> None:
    """A token reaches at most top-k GPUs and nodes, so dedup can only shrink the volume (Mixtral: equal)."""
    cluster = ClusterSpec(num_nodes=16, gpus_per_node=8, gpu="H100-SXM")
    for experts, topk, ep, groups in itertools.product((8, 64, 128, 256), (1, 2, 8), (8, 16, 64), (None, 8)):
        if ep > experts or topk > experts:
            continue
        model = preset(
            "deepseek-v3-like",
            num_experts=experts,
            moe_router_topk=topk,
            moe_router_num_groups=groups if groups and experts % groups == 0 and topk <= experts // 2 else None,
            moe_router_group_topk=min(4, groups) if groups and experts % groups == 0 and topk <= experts // 2 else None,
        )
        g = comm.group(ep, 1, cluster)
        flex = dispatch.all_to_all_time(model, "flex", 4096, 14336, g, cluster)
        a2a = dispatch.all_to_all_time(model, "alltoall", 4096, 14336, g, cluster)
        assert flex <= a2a * (1 + 1e-9), (experts, topk, ep, groups)
    mixtral = preset("mixtral-8x7b")
    one_node = comm.group(8, 1, ClusterSpec(num_nodes=1, gpu="H100-SXM"))
    node = ClusterSpec(num_nodes=1, gpu="H100-SXM")
    assert dispatch.all_to_all_time(mixtral, "flex", 4096, 8192, one_node, node) == pytest.approx(
        dispatch.all_to_all_time(mixtral, "alltoall", 4096, 8192, one_node, node)
    )


def test_the_dispatcher_changes_the_layer_ep_time() -> None:
    model = preset("deepseek-v3-like", seq_length=4096)
    cluster = ClusterSpec(num_nodes=32, gpus_per_node=8, gpu="B200")
    training = TrainingSpec(global_batch_size=4096, precision="bf16")
    base = {"pp": 8, "vpp": 2, "dp": 32, "ep": 32, "etp": 1, "distributed_optimizer": True}
    ep = {
        d: evaluate(model, cluster, training, ParallelConfig(**base, moe_token_dispatcher=d)).time.breakdown[
            "ep_comm_s"
        ]
        for d in ("alltoall", "flex")
    }
    assert 0 < ep["flex"] < 0.6 * ep["alltoall"]


def test_the_planner_picks_deepep_for_expert_parallelism_unless_pinned() -> None:
    request = {
        "model": {"preset": "deepseek-v3-like", "num_layers": 8, "seq_length": 4096},
        "cluster": {"num_nodes": 4, "gpus_per_node": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 256, "precision": "bf16", "pinned": {"ep": 16}},
    }
    best = plan(PlanRequest(**request)).plans[0].parallel
    assert best.ep == 16 and best.moe_token_dispatcher == "flex"
    request["training"]["pinned"] |= {"moe_token_dispatcher": "alltoall"}  # type: ignore[index]
    assert plan(PlanRequest(**request)).plans[0].parallel.moe_token_dispatcher == "alltoall"
    deepspeed = TrainingSpec(global_batch_size=256, framework="megatron-deepspeed")
    assert not deepspeed.software.can.flex_dispatcher


def test_flex_only_where_it_moves_less() -> None:
    """Mixtral's top-2 of 8 on EP8 sends two copies either way: the simpler alltoall stays (no deep_ep needed);
    on EP2 a token whose two experts share the other GPU goes once (21 % less), and DeepSeek-V3 sends 3.2 copies
    instead of 7 on EP8; across nodes the saving counted is the network's."""
    mixtral, deepseek, kimi = preset("mixtral-8x7b"), preset("deepseek-v3-like"), preset("kimi-k2-like")
    node, nodes = ClusterSpec(num_nodes=1, gpu="H100-SXM"), ClusterSpec(num_nodes=8, gpu="H100-SXM")
    assert not dispatch.flex_saves(mixtral, comm.group(8, 1, node))
    assert dispatch.flex_saves(mixtral, comm.group(2, 1, node))
    assert dispatch.flex_saves(deepseek, comm.group(8, 1, node))
    # 384 experts on 64 GPUs: per GPU only 5 % fewer copies, but across the eight nodes 4.6 instead of 7
    assert dispatch.flex_saves(kimi, comm.group(64, 1, nodes))
    assert not dispatch.flex_saves(deepseek, comm.group(1, 1, node))
    assert not dispatch.flex_saves(preset("llama-2-7b"), comm.group(8, 1, node))
    request = {
        "model": "mixtral-8x7b",
        "cluster": {"num_nodes": 8, "gpus_per_node": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 512, "pinned": {"ep": 8}},
    }
    assert plan(PlanRequest(**request)).plans[0].parallel.moe_token_dispatcher == "alltoall"


def test_deepep_buffers_as_its_size_hints_give_them() -> None:
    """10 channels (20 SMs) x 8 NVLink peers x 256 receive tokens x (2 x 7168 + 128 x 12 + 128 x 4) bytes at EP8;
    from 16 ranks 288 tokens and an RDMA buffer of 10 x peers/8 x 128 x 2 x (slot + 16) + 1 MiB."""
    model = preset("deepseek-v3-like")
    slot = 2 * 7168 + 128 * 12 + 128 * 4
    assert dispatch.flex_buffer_bytes(model, 8, 1) == 10 * 8 * 256 * slot
    assert dispatch.flex_buffer_bytes(model, 64, 1) == 10 * 8 * 288 * slot + 10 * 8 * 128 * 2 * (slot + 16) + 2**20
    assert dispatch.flex_buffer_bytes(model, 1, 1) == 0.0
    cluster = ClusterSpec(num_nodes=8, gpus_per_node=8, gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=512, precision="bf16")
    small = preset("deepseek-v3-like", num_layers=8, seq_length=4096)
    base = {"pp": 2, "vpp": 2, "dp": 32, "ep": 64, "etp": 1, "distributed_optimizer": True}
    totals = {
        d: evaluate(small, cluster, training, ParallelConfig(**base, moe_token_dispatcher=d)).memory.peak_bytes
        for d in ("alltoall", "flex")
    }
    assert totals["flex"] - totals["alltoall"] == pytest.approx(dispatch.flex_buffer_bytes(small, 64, 1), rel=1e-6)


def test_a_flex_pin_without_experts_is_refused_by_name() -> None:
    request = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 64, "pinned": {"moe_token_dispatcher": "flex"}},
    }
    result = plan(PlanRequest(**request))
    assert not result.plans
    assert result.rejected[0].reason == "moe_token_dispatcher"
    assert any("without your pinned moe_token_dispatcher=flex" in s for s in result.suggestions)
