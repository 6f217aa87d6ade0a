"""Issue 12, defect 4: the NCCL environment. NCCL_ALGO is process-wide, so it is pinned (to a tree all-reduce only)
where NCCL's tuning model has the tree well ahead of the ring for the plan's cross-node all-reduces, with the reason,
and only for an NCCL that parses the per-collective syntax; values that leave collectives without an algorithm are
refused; NCCL_NET_GDR_LEVEL is not set; GLOO_SOCKET_IFNAME follows NCCL_SOCKET_IFNAME, with the exact-match form for
full interface names."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError
from render_cases import fixed_result

from app.render import RenderOptions, render


def request(gpu: str = "A100-80GB", nodes: int = 2, **cluster: object) -> dict:
    hosts = [f"n{i}" for i in range(nodes)]
    return {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": nodes, "gpus_per_node": 8, "gpu": gpu, "hosts": hosts, **cluster},
        "training": {"global_batch_size": 256, "framework": "megatron"},
    }


def exports(text: str) -> dict[str, str]:
    return dict(re.findall(r"^export (\w+)=(\S+)", text, re.M))


DP_ALLREDUCE = {"tp": 1, "dp": 16}  # Megatron without the distributed optimizer: the gradients are all-reduced
DIST_OPT = {"tp": 1, "dp": 16, "distributed_optimizer": True}  # reduce-scatter + all-gather


def nccl(req: dict, par: dict, **options: object) -> tuple[dict[str, str], str, list[str]]:
    arts = render(fixed_result(req, par), 1, RenderOptions(**options))
    return exports(arts.files["nccl_env.sh"]), arts.files["nccl_env.sh"], arts.notes


# a model so small that its gradient bucket moves in a fraction of a millisecond: across 64 nodes the ring's 126
# network steps cost more than the bytes, and a tree takes 12
TINY = {"name": "tiny", "num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "seq_length": 512,
        "vocab_size": 1024}  # fmt: skip
MANY_NODES = {**request(nodes=64), "model": TINY, "training": {"global_batch_size": 512, "framework": "megatron"}}
TINY_DP = {"tp": 1, "dp": 512}


def test_tree_allreduce_where_nccls_model_has_it_well_ahead_with_the_reason() -> None:
    env, text, _ = nccl(MANY_NODES, TINY_DP, nccl_version="2.27.5")
    assert env["NCCL_ALGO"] == "allreduce:tree"
    line = next(line for line in text.splitlines() if line.startswith("export NCCL_ALGO"))
    assert "data-parallel gradient all-reduce cross 64 nodes" in line and "log2(nodes)" in line
    tree, ring = (float(x) for x in re.search(r"([\d.]+) ms as a tree vs ([\d.]+) ms as a ring", line).groups())
    assert tree <= 0.9 * ring, line
    assert "pipeline" not in line and "context" not in line  # p2p traffic has no all-reduce algorithm


def test_no_tree_where_the_bytes_dominate() -> None:
    """Megatron's 40M-element fp32 gradient buckets across 2 nodes: the tree's 0.92 bandwidth costs more than its
    saved network steps win, and NCCL picks the ring itself; the tree was pinned for its log2 latency (render review
    2026-12-07)."""
    env, _, _ = nccl(request(), DP_ALLREDUCE, nccl_version="2.27.5")
    assert "NCCL_ALGO" not in env
    reason = fixed_result(request(), DP_ALLREDUCE).plans[0].decisions.nccl.reason
    assert "NCCL chooses" in reason and "the bytes dominate" in reason, reason
    tree, ring = (float(x) for x in re.search(r"([\d.]+) ms as a tree vs ([\d.]+) ms as a ring", reason).groups())
    assert tree > 0.9 * ring, reason
    # without overlapped reduction Megatron's DDP makes one bucket of the stage: 6.7B fp32 gradients, not 40M
    whole = {**request(), "training": {**request()["training"], "overlap_grad_reduce": False}}
    one = fixed_result(whole, DP_ALLREDUCE).plans[0].decisions.nccl.reason
    ring_whole = float(re.search(r"([\d.]+) ms as a ring", one).group(1))
    assert ring_whole > 100 * ring, (one, reason)


def test_no_algo_where_no_allreduce_crosses_nodes() -> None:
    for par in (DIST_OPT, {"tp": 8, "pp": 2, "dp": 1}):  # reduce-scatter/all-gather; TP inside, PP p2p across
        env, _, _ = nccl(request(), par, nccl_version="2.27.5")
        assert "NCCL_ALGO" not in env, par


def test_no_algo_on_nvls_systems_where_it_would_disable_nvlstree() -> None:
    env, _, _ = nccl(request("H100-SXM"), DP_ALLREDUCE, nccl_version="2.27.5")
    assert "NCCL_ALGO" not in env
    result = fixed_result(request("H100-SXM"), DP_ALLREDUCE)
    assert "NVLSTree" in result.plans[0].decisions.nccl.reason


@pytest.mark.parametrize(
    ("version", "written"), [("2.27.5", True), ("2.24.3", True), ("2.23.4", False), ("2.21.5", False), (None, False)]
)
def test_never_on_an_nccl_that_misparses_the_syntax(version: str | None, written: bool) -> None:
    """NCCL 2.23 reads 'allreduce:tree' as one unknown algorithm name and enables none (tuning.cc parseList)."""
    env, _, notes = nccl(MANY_NODES, TINY_DP, nccl_version=version)
    assert ("NCCL_ALGO" in env) == written
    if not written:
        assert any("needs NCCL >= 2.24" in n for n in notes), notes


def test_explicit_tree_allreduce_on_an_old_nccl_is_refused() -> None:
    with pytest.raises(ValueError, match=r"allreduce:tree needs NCCL >= 2.24.*nccl_version is 2.21.5"):
        nccl(request(), DP_ALLREDUCE, nccl_algo="allreduce:tree", nccl_version="2.21.5")


@pytest.mark.parametrize("algo", ["Tree", "NVLS", "NVLSTree", "PAT", "CollnetDirect", "CollnetChain", "tree"])
def test_algorithms_that_leave_collectives_without_one_are_refused(algo: str) -> None:
    with pytest.raises(ValidationError, match=rf"nccl_algo: '{algo}' is refused: .*invalid-usage"):
        RenderOptions(nccl_algo=algo)


@pytest.mark.parametrize(
    ("algo", "expected"), [("default", None), ("Ring", "Ring"), ("allreduce:tree", "allreduce:tree")]
)
def test_allowed_overrides(algo: str, expected: str | None) -> None:
    env, text, _ = nccl(request(), DIST_OPT, nccl_algo=algo)
    assert env.get("NCCL_ALGO") == expected
    if expected:
        assert "# set by the render option nccl_algo" in text


def test_ib_hcas_exact_no_gdr_level_and_gloo_follows_the_socket_interface() -> None:
    env, _, _ = nccl(request(nics=["mlx5_0", "mlx5_3"], socket_ifname="ens1f0"), DIST_OPT)
    assert env == {"NCCL_IB_HCA": "'=mlx5_0,mlx5_3'", "NCCL_SOCKET_IFNAME": "'=ens1f0'", "GLOO_SOCKET_IFNAME": "ens1f0"}


def test_an_interface_prefix_stays_a_prefix_and_gloo_is_left_alone() -> None:
    env, _, notes = nccl(request(socket_ifname="eth"), DIST_OPT)
    assert env == {"NCCL_SOCKET_IFNAME": "eth"}
    assert any("GLOO_SOCKET_IFNAME" in n and "prefix" in n for n in notes)


def test_one_node_sets_nothing_not_asked_for() -> None:
    env, text, _ = nccl(request(nodes=1), {"tp": 2, "dp": 4})
    assert env == {} and "nothing to set" in text
