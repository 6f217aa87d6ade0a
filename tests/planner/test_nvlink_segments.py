"""NVLink domains that span trays (GB200/GB300 NVL72): the job's trays come in segments that share a rack, as
NVIDIA's benchmarks ask Slurm for them, and a group whose span does not tile the segment straddles two racks."""

from __future__ import annotations

import pytest

from app.planner import PlanRequest, plan
from app.planner import layout as lay
from app.planner.comm import Group, group, straddle
from app.planner.specs import ClusterSpec, ParallelConfig


@pytest.mark.parametrize(
    ("trays", "segment", "domain"),
    [(1, 1, 4), (4, 4, 16), (18, 18, 72), (32, 16, 64), (36, 18, 72), (64, 16, 64), (17, 17, 68), (19, 1, 4)],
)
def test_the_jobs_nvlink_domain_is_its_segment_of_trays(trays: int, segment: int, domain: int) -> None:
    """Megatron-Bridge's executor (scripts/performance/utils/executors.py L168-177) asks for `--segment` = the
    largest tray count up to 18 that divides the job's: 32 trays run as 2 x 16 (64 GPUs a domain, not 72), a prime
    19 as single trays."""
    cluster = ClusterSpec(num_nodes=trays, gpu="GB200")
    assert (cluster.segment_nodes(), cluster.nvlink_domain) == (segment, domain)
    assert ClusterSpec(num_nodes=trays, gpu="H100-SXM").nvlink_domain == 8  # an 8-GPU node is its own domain


@pytest.mark.parametrize(
    ("trays", "per_tray", "segment", "domain"), [(36, 2, 18, 36), (18, 2, 18, 36), (10, 8, 5, 40), (9, 8, 9, 72)]
)
def test_a_rack_holds_its_trays_however_many_of_their_gpus_a_job_uses(
    trays: int, per_tray: int, segment: int, domain: int
) -> None:
    """36 trays using 2 of their 4 GPUs were one 72-GPU segment (`--segment=36`, a clique affinity no rack could
    meet), though an NVL72 rack holds 18 trays (QA 2026-12-07); a described node above the tray fills the domain
    with fewer nodes."""
    cluster = ClusterSpec(num_nodes=trays, gpus_per_node=per_tray, gpu="GB200")
    assert (cluster.segment_nodes(), cluster.nvlink_domain) == (segment, domain)


def test_a_group_whose_span_does_not_tile_the_rack_straddles_two() -> None:
    """EP64 on 36 trays (two 72-GPU segments): the group of ranks 64-127 has 8 in the first rack and 56 in the
    next, and its all-to-all leaves through 8 NICs; it was timed as if on NVLink. On 32 trays (segments of 16) the
    same group stays in its 64-GPU segment."""
    assert straddle(64, 1, 72) == 8 and straddle(16, 1, 72) == 8 and straddle(32, 2, 72) == 4
    on36, on32 = ClusterSpec(num_nodes=36, gpu="GB200"), ClusterSpec(num_nodes=32, gpu="GB200")
    assert group(64, 1, on36) == Group(64, 8, 2) and group(8, 1, on36) == Group(8, 8, 1)
    assert group(64, 1, on32) == Group(64, 64, 1)
    par = ParallelConfig(tp=2, pp=2, dp=36, ep=64, etp=1, micro_batch_size=1)
    assert lay.ep_group(par, on36).crosses
    # a plan on 32 of the 36 trays is its own job: two segments of 16
    assert group(64, 1, on36, world=128) == Group(64, 64, 1)


def test_tp_across_trays_is_judged_on_the_jobs_segments() -> None:
    """19 trays come as single trays (19 is prime), so the cluster's own domain is a tray; the 16-tray world the
    search also tries (fewer nodes) is one segment of 16 trays, and keeps TP 8 across trays on NVLink."""
    result = plan(PlanRequest(model="llama-3-70b", cluster={"num_nodes": 19, "gpu": "GB200"},
                              training={"global_batch_size": 256, "pinned": {"tp": 8}}))  # fmt: skip
    assert ClusterSpec(num_nodes=19, gpu="GB200").nvlink_domain == 4
    assert result.plans and all((p.parallel.world_size, p.parallel.tp) == (64, 8) for p in result.plans)
    assert not any(g.reason == "tp_within_nvlink_domain" for g in result.rejected)


def test_a_full_mesh_gives_a_group_only_the_links_between_its_members() -> None:
    """MI300X: 7 Infinity Fabric links of 64 GB/s, one to each peer, no switch. A pair shares one link and a group of
    4 three, where every group inside the node was given all seven (practitioner review 2026-12-07); behind a
    switch (H100) a group of any size uses all of a GPU's NVLink."""
    from app.planner.comm import bus_bandwidth, collective_time

    mi300 = ClusterSpec(num_nodes=2, gpu="MI300X")
    full = bus_bandwidth(Group(8, 8, 1), mi300)
    assert bus_bandwidth(Group(2, 2, 1), mi300) == pytest.approx(full / 7)
    assert bus_bandwidth(Group(4, 4, 1), mi300) == pytest.approx(full * 3 / 7)
    assert full == pytest.approx(448e9 * mi300.gpu.efficiency.nvlink)
    # a pair's point-to-point transfer takes one link; a group crossing nodes with 2 ranks a node is capped by them
    one_link = 64e9 * mi300.gpu.efficiency.nvlink
    assert collective_time("send_recv", 64e9, Group(2, 2, 1), mi300) == pytest.approx(64e9 / one_link, rel=0.01)
    assert bus_bandwidth(Group(4, 2, 2), mi300) <= full / 7
    h100 = ClusterSpec(num_nodes=1, gpu="H100-SXM")
    assert bus_bandwidth(Group(2, 2, 1), h100) == bus_bandwidth(Group(8, 8, 1), h100)
    # so on one MI300X node a 70B plan keeps its tensor-parallel groups out of the mesh's single links
    best = plan(PlanRequest(model="llama-3-70b", cluster={"num_nodes": 1, "gpu": "MI300X"},
                            training={"global_batch_size": 64})).plans[0]  # fmt: skip
    assert best.parallel.tp == 1, best.parallel
