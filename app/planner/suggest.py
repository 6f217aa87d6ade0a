"""When nothing fits: what would (more nodes, ZeRO offload, a shorter sequence), each checked by a search."""

from __future__ import annotations

import time

from app.planner.estimate import time_estimate
from app.planner.explain import describe
from app.planner.search import Found, SearchState, search_world
from app.planner.specs import ClusterSpec, ModelSpec, PlanRequest, TrainingSpec

GiB = 2**30
SUB_SEARCH_S = 2.0


def _best(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, world: int, offload: bool) -> Found | None:
    state = SearchState()
    search_world(model, cluster, training, world, state, time.perf_counter() + SUB_SEARCH_S, offload)
    if not state.found:
        return None
    return max(state.found, key=lambda f: time_estimate(model, cluster, training, f.par).tokens_per_s)


def _closest(state: SearchState) -> str | None:
    oom = state.rejected.examples.get("out_of_memory")
    if not oom:
        return None
    return f"{state.rejected.counts['out_of_memory']} candidates run out of memory, e.g. {describe(oom[0])}: " \
           f"{state.rejected.messages['out_of_memory']}"


def more_nodes(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> str | None:
    offload = training.framework != "megatron"
    lo = cluster.num_nodes
    for factor in (2, 4, 8, 16, 32, 64, 128):
        hi = cluster.num_nodes * factor
        bigger = cluster.model_copy(update={"num_nodes": hi, "hosts": ()})
        if _best(model, bigger, training, bigger.world_size, offload) is None:
            lo = hi
            continue
        step = max(1, (hi - lo) // 16)
        for nodes in range(lo + step, hi + 1, step):
            trial = cluster.model_copy(update={"num_nodes": nodes, "hosts": ()})
            found = _best(model, trial, training, trial.world_size, offload)
            if found is not None:
                return (f"{nodes} nodes ({nodes * cluster.gpus_per_node} x {cluster.gpu.name}) would fit: "
                        f"{describe(found.par)}, {found.peak_bytes / GiB:.1f} GiB per GPU")
        return None
    return None


def offload(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> str | None:
    for framework in ("megatron-deepspeed", "deepspeed"):
        trial = training.model_copy(update={"framework": framework, "pinned": training.pinned.model_copy(
            update={"tp": None, "pp": None, "zero_stage": None, "offload_optimizer": None, "offload_param": None,
                    "distributed_optimizer": None})})
        found = _best(model, cluster, trial, cluster.world_size, offload=True)
        if found is not None:
            return (f"framework {framework} with ZeRO offload would fit on this cluster: {describe(found.par)}, "
                    f"{found.peak_bytes / GiB:.1f} GiB per GPU (slower: the optimizer runs on the CPU)")
    return None


def shorter_sequence(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> str | None:
    seq = model.seq_length
    while seq > 512:
        seq //= 2
        shorter = model.model_copy(update={"seq_length": seq})
        found = _best(shorter, cluster, training, cluster.world_size, training.framework != "megatron")
        if found is not None:
            return f"seq_length {seq} (instead of {model.seq_length}) would fit: {describe(found.par)}"
    return None


def suggestions(request: PlanRequest, state: SearchState) -> list[str]:
    model, cluster, training = request.model, request.cluster, request.training
    out = [f"no plan fits {model.name} ({model.num_parameters / 1e9:.1f}B parameters) on "
           f"{cluster.world_size} x {cluster.gpu.name} with {100 * training.memory_headroom:.0f}% memory headroom"]
    closest = _closest(state)
    if closest:
        out.append(closest)
    for finder in (more_nodes, offload, shorter_sequence):
        hint = finder(model, cluster, training)
        if hint:
            out.append(hint)
    return out
