"""When nothing fits: what would (bf16 optimizer states, more nodes, ZeRO offload, NVMe offload, a shorter sequence),
each checked by a search."""

from __future__ import annotations

import math
import time

from app.planner.candidates import Found, SearchState
from app.planner.clock import Deadline
from app.planner.explain import describe
from app.planner.search import fewest_gpus, search_world
from app.planner.specs import ClusterSpec, ModelSpec, ParallelPins, PlanRequest, TrainingSpec
from app.planner.worlds import world_sizes

GiB = 2**30
SUB_SEARCH_S = 1.0  # per trial search
BUDGET_S = 4.0  # for all suggestions of one request
RESERVE_S = 1.0  # of that, kept from the node count for the hints after it
FASTEST_S = 0.5  # of the node count's, for the fastest plan on the count it found (a bounded search finds it first)


def _best(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, world: int, offload: bool, deadline: float
) -> Found | None:
    if time.perf_counter() > deadline:
        return None
    state = SearchState(keep=1)  # branch and bound for the fastest: each found plan is timed once, as it is found
    cap = Deadline.at_wall(min(time.perf_counter() + SUB_SEARCH_S, deadline))
    search_world(model, cluster, training, world, state, cap, offload)
    return min((f for f in state.found if f.time is not None), key=_step, default=None)


def _step(found: Found) -> float:
    return found.time.step_s if found.time else float("inf")


def _shown(found: Found) -> str:
    """A found plan as the hints name it: its layout and its peak memory per GPU."""
    return f"{describe(found.par)}, {found.peak_bytes / GiB:.1f} GiB per GPU"


def _revalidated(training: TrainingSpec, **changes: object) -> TrainingSpec | None:
    """The training with `changes`, validated again, so that the spec's own checks say whether the changed setting
    runs (another framework's stack, bf16 optimizer states); None where they refuse it (e.g. a gradient-reduce dtype
    the other framework's stack does not run)."""
    try:
        return TrainingSpec.model_validate({**training.model_dump(), **changes})
    except ValueError:
        return None


def _closest(state: SearchState) -> str | None:
    oom = state.rejected.examples.get("out_of_memory")
    if not oom:
        return None
    return (
        f"{state.rejected.counts['out_of_memory']} candidates run out of memory, e.g. {describe(oom[0])}: "
        f"{state.rejected.messages['out_of_memory']}"
    )


def _on_nodes(cluster: ClusterSpec, nodes: int) -> ClusterSpec:
    """The cluster grown (or shrunk) to `nodes` nodes; its host names no longer apply."""
    return cluster.model_copy(update={"num_nodes": nodes, "hosts": ()})


def _fits_on(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, nodes: int, offload: bool, deadline: float
) -> tuple[Found | None, bool]:
    """A plan that fits on `nodes` nodes (the first the search meets: the question is only whether one does) and
    whether the answer is known: a search stopped by its time cap before it found a plan has not shown that none
    fits."""
    if time.perf_counter() > deadline:
        return None, False
    trial = _on_nodes(cluster, nodes)
    if not offload and trial.world_size < fewest_gpus(model, trial, training):
        return None, True  # the model states alone cannot fit in these GPUs' memory: known without a search
    state = SearchState(first_fit=True)
    cap = Deadline.at_wall(min(time.perf_counter() + SUB_SEARCH_S, deadline))
    search_world(model, trial, training, trial.world_size, state, cap, offload)
    return (state.found[0] if state.found else None), bool(state.found) or not state.truncated


def _fewest_nodes(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, offload: bool, deadline: float
) -> str | None:
    """Double the node count until a plan fits, then look for the fewest: bisect a wide range, then try the last
    16 counts one by one (divisibility makes fitting non-monotonic: 10 nodes may fit where 12 do not). Each count
    is a yes/no search; the plan shown is the fastest on the count found. Where the time ran out before a count
    was settled, the hint says that fewer nodes may fit too."""
    final, deadline = deadline, deadline - FASTEST_S  # the last FASTEST_S look for the fastest plan on the count
    lo, found, hi = cluster.num_nodes, None, 0
    for factor in (2, 4, 8, 16, 32, 64, 128):
        found, known = _fits_on(model, cluster, training, cluster.num_nodes * factor, offload, deadline)
        if found is not None:
            hi = cluster.num_nodes * factor
            break
        if not known:
            return None
        lo = cluster.num_nodes * factor
    if found is None:
        return None
    settled = True
    while settled and hi - lo > 16:  # bisect a wide range down to 16 counts ...
        mid = (lo + hi) // 2
        smaller, settled = _fits_on(model, cluster, training, mid, offload, deadline)
        if smaller is not None:
            hi, found = mid, smaller
        elif settled:
            lo = mid
    for nodes in range(lo + 1, hi) if settled else ():  # ... then take the first count that fits
        smaller, settled = _fits_on(model, cluster, training, nodes, offload, deadline)
        if smaller is not None:
            hi, found = nodes, smaller
            break
        if not settled:
            break
    trial = _on_nodes(cluster, hi)
    fastest = _best(model, trial, training, trial.world_size, offload, final)
    shown = fastest or found
    caveat = "" if settled else f" (fewer than {hi} may fit too: the time ran out before every count was checked)"
    return f"{hi} nodes ({hi * cluster.gpus_per_node} x {cluster.gpu.name}) would fit: {_shown(shown)}{caveat}"


def more_nodes(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, deadline: float) -> str | None:
    """The fewest nodes that fit without offload, and with ZeRO offload where the framework has it."""
    hints = [_fewest_nodes(model, cluster, training, False, deadline)]
    if training.software.can.offload:
        with_offload = _fewest_nodes(model, cluster, training, True, deadline)
        if with_offload and with_offload != hints[0]:
            hints.append(with_offload + " (with ZeRO offload)")
    return "; ".join(h for h in hints if h) or None


def offload(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, deadline: float) -> str | None:
    for framework in ("megatron-deepspeed", "deepspeed"):
        pins = training.pinned.model_copy(
            update={
                "tp": None,
                "pp": None,
                "zero_stage": None,
                "offload_optimizer": None,
                "offload_param": None,
                "distributed_optimizer": None,
            }
        )
        # the framework's own stack, not the one the request named for its framework
        trial = _revalidated(training, framework=framework, stack=None, pinned=pins.model_dump())
        if trial is None:
            continue
        found = _best(model, cluster, trial, cluster.world_size, True, deadline)
        if found is None:
            continue
        plan = _shown(found)
        if found.par.offload_optimizer == "none" and found.par.offload_param == "none":
            if framework == training.framework:  # what the request asked for already: no news
                continue
            return f"framework {framework} would fit on this cluster: {plan}"
        return (
            f"framework {framework} with ZeRO offload would fit on this cluster: {plan} "
            f"(slower: the optimizer runs on the CPU)"
        )
    return None


NVME_EXAMPLE = "/local_nvme"  # a mount point for the trial only; the hint asks for the cluster's own


def nvme(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, deadline: float) -> str | None:
    """ZeRO-Infinity: DeepSpeed ZeRO-3 with the optimizer and parameters on each node's NVMe, where neither the GPUs
    nor the host memory hold the states. Without cluster.nvme_path the search refuses those plans (nvme_needs_path)
    and no hint said so: 70B on 4 H100 with 512 GiB of host memory got only "8 nodes would fit" (practitioner
    review 2026-12-07)."""
    if cluster.nvme_path:
        return None
    trial = _revalidated(training, framework="deepspeed", stack=None)
    if trial is None:
        return None
    found = _best(model, cluster.model_copy(update={"nvme_path": NVME_EXAMPLE}), trial, cluster.world_size, True,
                  deadline)  # fmt: skip
    if found is None or "nvme" not in (found.par.offload_optimizer, found.par.offload_param):
        return None
    return (
        f"with cluster.nvme_path set to each node's local NVMe mount, framework deepspeed with ZeRO-Infinity would "
        f"fit on this cluster: {_shown(found)} (much slower: the states stream from NVMe at cluster.nvme_GBps, "
        f"{cluster.nvme_GBps:g} GB/s a node)"
    )


def bf16_optimizer_states(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, deadline: float
) -> str | None:
    """Adam's moments in bf16 with the fp32 master as remainders (Megatron's precision-aware optimizer): half the
    optimizer state, on the same cluster and without the CPU."""
    if training.optimizer_states != "fp32":
        return None
    trial = _revalidated(training, optimizer_states="bf16")  # the spec says where bf16 states run (stack, precision)
    if trial is None:
        return None
    found = _best(model, cluster, trial, cluster.world_size, False, deadline)
    if found is None:
        return None
    return (
        "optimizer_states bf16 (Adam's moments in bf16, --use-precision-aware-optimizer) would fit on this cluster: "
        f"{_shown(found)}"
    )


def shorter_sequence(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, deadline: float) -> str | None:
    seq = model.seq_length
    while seq > 512:
        seq //= 2
        shorter = model.model_copy(update={"seq_length": seq})
        found = _best(shorter, cluster, training, cluster.world_size, training.software.can.offload, deadline)
        if found is not None:
            return f"seq_length {seq} (instead of {model.seq_length}) would fit: {describe(found.par)}"
    return None


def without_pins(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, deadline: float
) -> tuple[str | None, bool]:
    """The hint for the pinned dimensions, and whether a plan fits on this cluster without them."""
    pins = training.pinned.model_dump(exclude_none=True)
    if not pins:
        return None, False
    free = training.model_copy(update={"pinned": ParallelPins()})
    # the GPU counts the unpinned search tries, idle nodes included
    offload = training.software.can.offload
    fits = (_best(model, cluster, free, world, offload, deadline) for world in world_sizes(cluster, free))
    found = min((f for f in fits if f is not None), key=_step, default=None)
    fixed = ", ".join(f"{k}={v}" for k, v in pins.items())
    if found is None:
        return f"even without your pinned {fixed}, nothing fits on this cluster", False
    nodes = found.world // cluster.gpus_per_node
    on = f" on {nodes} of the {cluster.num_nodes} nodes" if found.world < cluster.world_size else ""
    return (
        f"without your pinned {fixed}: {describe(found.par)} fits{on}, {found.peak_bytes / GiB:.1f} GiB per GPU",
        True,
    )


def suggestions(request: PlanRequest, state: SearchState, until: float | None = None) -> list[str]:
    """What would fit. Where a plan fits this cluster without the pinned dimensions, that is the one hint (a pin
    that breaks the batch's divisibility or the stack's support is no memory problem). Otherwise more nodes,
    offload and shorter sequences are tried without the pinned dimensions, for at most BUDGET_S and never past
    `until` (the request's own search time limit)."""
    model, cluster, training = request.model, request.cluster, request.training
    floor = fewest_gpus(model, cluster, training)
    states_too_big = cluster.world_size < floor and not training.software.can.offload
    if state.truncated and not states_too_big:  # the time ran out: nothing says the cluster is too small
        return [
            f"no plan was found before the search time cap ({training.search_time_limit_s:g} s) ran out "
            f"({state.candidates} candidates checked): raise training.search_time_limit_s"
        ]
    deadline = time.perf_counter() + BUDGET_S
    if until is not None:
        deadline = min(deadline, max(until, time.perf_counter() + 0.2))
    headroom = f" with {100 * training.memory_headroom:.0f}% memory headroom" if training.memory_headroom else ""
    causes = sorted(state.rejected.counts.items(), key=lambda kv: -kv[1])
    cause = f": {causes[0][1]} of {state.candidates} candidates fail {causes[0][0]}" if causes else ""
    if states_too_big:  # known without a search, however far the search got before its time cap
        cause = f": its model states alone need at least {math.ceil(floor)} of these GPUs"
    on = f"{cluster.world_size} x {cluster.gpu.name}"
    if training.pinned.num_nodes:
        on = f"{training.pinned.num_nodes * cluster.gpus_per_node} of the {on} (pinned num_nodes)"
    out = [f"no plan fits {model.name} ({model.num_parameters / 1e9:.1f}B parameters) on {on}{headroom}{cause}"]
    closest = _closest(state)
    if closest:
        out.append(closest)
    hint, pins_block = without_pins(model, cluster, training, deadline)
    if hint:
        out.append(hint)
    if pins_block:  # the cluster fits the model: more nodes, offload or a shorter sequence would not be the fix
        return out
    free = training.model_copy(update={"pinned": ParallelPins()})
    offloaded = False
    for finder in (bf16_optimizer_states, more_nodes, offload, nvme, shorter_sequence):
        if finder is nvme and offloaded and "nvme_needs_path" not in state.rejected.counts:
            continue  # host-memory offload fits already: NVMe is only the answer where the host is the limit
        # each node count ruled out is a whole search, so the node count could take all the time there is: it
        # leaves RESERVE_S for the offload and sequence hints
        until = deadline - RESERVE_S if finder is more_nodes else deadline
        hint = finder(model, cluster, free, max(until, time.perf_counter()))
        if hint:
            out.append(hint)
            offloaded = offloaded or finder is offload
    if time.perf_counter() > deadline:
        out.append(f"(stopped looking for alternatives after {BUDGET_S:.0f} s)")
    return out
