"""Which forwards a pipeline rank holds at its peak: the order against megatron-core's own schedule functions, and
the activation bytes of ranks whose chunks differ (the embedding or the loss as a pipeline unit) worked by hand."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from app.planner import activations as act
from app.planner.layout import StageShape, stage_shapes
from app.planner.memory import stage_parts
from app.planner.pipeline import in_flight, live_chunks, schedule_slots, schedule_table, warmup_forwards
from app.planner.specs import ClusterSpec, ParallelConfig, TrainingSpec
from app.planner.traffic import recomputed_fraction

from .conftest import preset

CASES = [(4, 2, 8), (4, 2, 16), (4, 3, 12), (8, 4, 8), (16, 8, 32), (4, 1, 6), (2, 4, 6)]


def megatron_schedules() -> object:
    with warnings.catch_warnings():  # "Transformer Engine and Apex are not installed" on this CPU-only machine
        warnings.simplefilter("ignore")
        from megatron.core.pipeline_parallel import schedules
    return schedules


@pytest.mark.parametrize(("p", "v", "m"), CASES)
@pytest.mark.parametrize("ep_overlap", [False, True])
def test_order_and_warmup_are_megatron_cores(p: int, v: int, m: int, ep_overlap: bool) -> None:
    schedules = megatron_schedules()
    if v > 1:  # the forward order: get_schedule_table, micro-batch groups of p (its default)
        assert list(schedule_table(m, v, p)) == schedules.get_schedule_table(m, v, p)  # type: ignore[attr-defined]
    par = ParallelConfig(pp=p, vpp=v, moe_ep_overlap=ep_overlap)
    for rank in range(p):
        comm = SimpleNamespace(
            pp_group=SimpleNamespace(size=lambda: p, rank=lambda r=rank: r),
            virtual_pipeline_model_parallel_size=v if v > 1 else None,
        )
        _, _, warm, _ = schedules.get_pp_rank_microbatches(  # type: ignore[attr-defined]
            m, v, p, overlap_moe_expert_parallel_comm=ep_overlap, p2p_communicator=comm
        )
        assert warmup_forwards(par, rank, m) == warm, rank


@pytest.mark.parametrize(("p", "v", "m"), [c for c in CASES if c[1] > 1])
def test_alike_chunks_hold_the_in_flight_count(p: int, v: int, m: int) -> None:
    """Where every chunk of a rank is alike, the live forwards add up to the in-flight count; and the replay of
    the chart's order (schedule_slots) peaks at the same live forwards per chunk."""
    par = ParallelConfig(pp=p, vpp=v)
    for rank in range(p):
        points = live_chunks(par, rank, m)
        assert max(sum(point) for point in points) == pytest.approx(in_flight(par, rank, m) * v)
        live, seen = [0] * v, set()
        for kind, _, chunk in schedule_slots(par, m)[rank]:
            live[chunk] += 1 if kind == "F" else -1
            seen.add(tuple(live))
        assert all(point in seen for point in points)
        assert not any(all(x > y for x, y in zip(other, point, strict=True)) for point in points for other in seen)


def test_embedding_and_loss_chunks_at_pp16_vpp8() -> None:
    """Llama-3.1 405B as NVIDIA and Meta split it: 126 layers + the embedding + the loss = 128 units over PP 16 x
    VP 8, one each. Rank 0 warms up (16 - 1) * 2 + 7 * 16 = 142 forwards; at its peak 143 are live: 16 of each
    chunk of the first micro-batch group and 15 more of chunk 0 (the embedding) of the second, so 112 layers and
    31 embeddings, not 143 / 8 = 17.875 copies of its 7 layers and embedding (125 layers). The last rank warms up
    7 * 16 = 112 forwards, all of them layers (chunks 0-6), then one of its loss-only chunk 7: 113 layers at most,
    where the stage-average count (113 / 8 x 7 = 98.9) was 14 % short."""
    par = ParallelConfig(
        tp=8,
        pp=16,
        vpp=8,
        sequence_parallel=True,
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
    )
    m = 32
    first = live_chunks(par, 0, m)
    assert (31, 16, 16, 16, 16, 16, 16, 16) in first
    assert max(sum(point[1:]) for point in first) == 112
    last = live_chunks(par, 15, m)
    assert max(sum(point[:7]) for point in last) == 113
    assert max(point[7] for point in last) == 1

    model = preset("llama-3-405b", seq_length=8192)
    assert (model.num_layers, model.hidden_size, model.ffn_hidden_size) == (126, 16384, 53248)
    cluster = ClusterSpec(num_nodes=1024, gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=2048)
    par = par.model_copy(update={"dp": 64})
    shapes = stage_shapes(model, training, par)
    assert shapes[0].chunks == (0, 1, 1, 1, 1, 1, 1, 1) and shapes[15].chunks == (1, 1, 1, 1, 1, 1, 1, 0)
    layer = act.layer_bytes(model, par, training, moe=False)
    embedding = act.embedding_stage_bytes(model, par)
    head = act.output_stage_bytes(model, par, training)
    rank0 = stage_parts(model, cluster, training, par, shapes[0], 7, 0, 0)
    assert rank0.activations == pytest.approx(112 * layer + 31 * embedding)
    rank15 = stage_parts(model, cluster, training, par, shapes[15], 7, 0, 15)
    assert rank15.activations == pytest.approx(113 * layer + head)
    middle = stage_parts(model, cluster, training, par, shapes[1], 8, 0, 1)  # alike chunks: 141 forwards of 1 layer
    assert middle.activations == pytest.approx(141 * layer)


def test_block_recompute_counts_each_chunk() -> None:
    """`--recompute-method block --recompute-num-layers N` recomputes the first N layers of every chunk: a rank with
    chunks of 3 and 5 layers and N = 4 recomputes 3 + 4 = 7 of its 8 (the chunk average, 4 of 4, said all)."""
    par = ParallelConfig(pp=2, vpp=2, recompute="full", recompute_method="block", recompute_num_layers=4)
    assert recomputed_fraction(par, StageShape((3, 5), False, False)) == pytest.approx(7 / 8)
    assert recomputed_fraction(par, StageShape((4, 4), False, False)) == 1.0
    assert (
        recomputed_fraction(par.model_copy(update={"recompute_num_layers": 2}), StageShape((3, 5), True, False)) == 0.5
    )
