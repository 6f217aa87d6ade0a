"""The model-state floor (`states_floor_bytes`, `fewest_gpus`): a bound below what every candidate of every stack
keeps, so the GPU counts below it can be skipped (the `min_gpus` objective, the node-count hint) without changing
an answer."""

from __future__ import annotations

import time

import pytest

from app.planner import PlanRequest, api, plan, suggest
from app.planner.candidates import SearchState
from app.planner.clock import Deadline
from app.planner.memory import peak_memory
from app.planner.search import fewest_gpus, search_world
from app.planner.states import states_floor_bytes

CASES = {
    "megatron bf16": ("llama-2-7b", {}),
    "megatron fp8": ("llama-2-7b", {"precision": "fp8"}),
    "megatron bf16 moments": ("llama-2-7b", {"optimizer_states": "bf16"}),
    "megatron MoE": ("qwen3-30b-a3b", {}),
    "deepspeed": ("llama-2-7b", {"framework": "deepspeed"}),
    "megatron-deepspeed": ("llama-2-7b", {"framework": "megatron-deepspeed"}),
    "pytorch fsdp": ("llama-2-7b", {"framework": "pytorch-fsdp"}),
}


def test_the_floor_counts_weight_gradient_and_adam_bytes_per_parameter() -> None:
    """Hand-worked: bf16 2 + 2 + 12 = 16 B per parameter; FP8 primary weights 1 + 2 + 12 = 15; bf16 moments over the
    16-bit master remainder 2 + 2 + 6 = 10; fp16 2 + 2 + 16 = 20."""
    for training, per_param in (({}, 16), ({"precision": "fp8"}, 15), ({"optimizer_states": "bf16"}, 10),
                                ({"precision": "fp16"}, 20)):  # fmt: skip
        req = PlanRequest(
            model="llama-2-7b",
            cluster={"num_nodes": 1, "gpu": "H100-SXM"},
            training={"global_batch_size": 8, **training},
        )
        assert states_floor_bytes(req.model, req.training) == req.model.num_parameters * per_param


@pytest.mark.parametrize("case", CASES)
def test_every_candidate_that_fits_keeps_at_least_the_floor(case: str) -> None:
    """On one node (two for the MoE), every candidate the exhaustive search finds to fit holds at least the floor
    over its GPU count (its reserved bytes on the busiest stage, the runtime aside): what skipping a count below
    `fewest_gpus` relies on. Each stack shards its states its own way; none keeps less."""
    name, training = CASES[case]
    nodes = 2 if "MoE" in case else 1
    req = PlanRequest(model=name, cluster={"num_nodes": nodes, "gpu": "H100-SXM"},
                      training={"global_batch_size": 64, **training})  # fmt: skip
    model, cluster, training_spec = req.model, req.cluster, req.training
    state = SearchState()  # unbounded: every fitting candidate is kept
    search_world(model, cluster, training_spec, cluster.world_size, state, Deadline.after(120), False)
    assert state.found, case
    floor = states_floor_bytes(model, training_spec)
    runtime = cluster.gpu.efficiency.runtime_overhead_bytes
    for f in state.found:
        peak, _stage, _cpu = peak_memory(model, cluster, training_spec, f.par)
        assert peak - runtime >= floor / f.par.world_size, (case, f.par)
    assert fewest_gpus(model, cluster, training_spec) <= cluster.world_size


def test_min_gpus_skips_the_counts_too_small_for_the_states_with_the_same_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Llama-2 70B on 64 A100-80GB, fewest GPUs: the states of 69B parameters need at least 13 GPUs, so the
    searches on 1-8 GPUs are skipped; the plans are those of the search that tries every count, found looking at
    fewer candidates."""
    request = {"model": "llama-2-70b", "cluster": {"num_nodes": 8, "gpu": "A100-80GB"},
               "training": {"global_batch_size": 256, "objective": "min_gpus"}}  # fmt: skip
    req = PlanRequest(**request)
    assert 8 < fewest_gpus(req.model, req.cluster, req.training) < 16
    skipping = plan(PlanRequest(**request))
    monkeypatch.setattr(api, "fewest_gpus", lambda *args: 0.0)
    every = plan(PlanRequest(**request))
    assert skipping.plans and [p.parallel for p in skipping.plans] == [p.parallel for p in every.plans]
    assert skipping.plans[0].layout.world_size == 16
    # the idle GPUs are the objective's doing, not a faster layout's
    idle = next(line for line in skipping.plans[0].why if "stay idle" in line)
    assert (
        idle == "uses 16 of the 64 GPUs (48 stay idle): the objective is the fewest GPUs, and no plan without ZeRO "
        "offload fits on fewer"
    )
    assert skipping.stats.candidates < every.stats.candidates


def test_a_count_below_the_floor_is_settled_without_a_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The node-count hint asks whether a count fits; below the floor the answer (no, and known) needs no search,
    with offload (states on the host) the floor does not apply."""
    req = PlanRequest(
        model="llama-3-405b", cluster={"num_nodes": 1, "gpu": "H100-SXM"}, training={"global_batch_size": 512}
    )
    searched: list[int] = []

    def counting(model, cluster, training, world, state, deadline, offload):  # type: ignore[no-untyped-def]
        searched.append(world)

    monkeypatch.setattr(suggest, "search_world", counting)
    deadline = time.perf_counter() + 60
    assert suggest._fits_on(req.model, req.cluster, req.training, 4, False, deadline) == (None, True)
    assert searched == []
    suggest._fits_on(req.model, req.cluster, req.training, 4, True, deadline)
    assert searched == [32]
