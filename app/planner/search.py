"""The search: flat candidate generators (space.py), named pruning rules (rules/), ranking by the objective.

Candidates are the product of small generators over placements (TP, CP and its communication type, PP, VPP, the
layer split, EP, expert TP), the sharding options of the stack, and micro-batch sizes. Each is checked against the
rules and against memory; for every placement, sharding and micro-batch size only the fastest recomputation level
that fits is kept (the levels tried from the fastest: `_levels_by_cost`, candidates._try_recompute). Rejected
candidates keep their reason.

For the throughput objective the search is a branch and bound: every placement gets a lower bound on its step
(the pipeline time of its layers' compute alone, at each micro-batch size), placements are explored from the
smallest bound up, each plan found is timed, and the search stops once the next bound exceeds the `max_plans`-th
best step found: nothing left could enter the ranking. Those placements are counted as skipped, not rejected.
"""

from __future__ import annotations

import heapq
from functools import partial

from app.planner import space
from app.planner.candidates import (
    Budget,
    Levels,
    SearchState,
    Work,
    placement_ok,
    recompute_and_record,
    sharding_ok,
)
from app.planner.clock import Deadline
from app.planner.estimate import (
    off_pipeline_floor,
    placement_lower_bound,
    sharding_ceiling,
    stage_floors,
    stage_param_pairs,
    step_lower_bound,
)
from app.planner.layout import alike_stages, num_microbatches
from app.planner.memory import over, static_bytes
from app.planner.pipeline import pipeline_time
from app.planner.placement import Placement, make_config, placements
from app.planner.specs import ClusterSpec, ModelSpec, TrainingSpec
from app.planner.states import states_floor_bytes
from app.planner.step import layer_cost_line
from app.planner.traffic import moves_per_microbatch, recomputed_share


def search_world(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    state: SearchState,
    deadline: Deadline,
    offload: bool,
) -> None:
    """Every candidate on `world` GPUs: record the feasible ones and why the others fail."""
    budget = memory_budget(cluster, training)
    queue: list[tuple[float, int, Work]] = []
    for pl in placements(model, cluster, training, world):
        if deadline.passed():
            state.truncated = True
            break  # explore what has been bounded so far (the queue is checked against the deadline too)
        work = _work(model, cluster, training, world, pl, state, offload)
        if work is None:
            continue
        if not state.keep:  # unbounded: every placement is explored as it comes
            if not _explore(model, cluster, training, world, work, state, budget, deadline):
                return
            if state.first_fit and state.found:
                return
            continue
        bound = 0.0
        if work.sizes:  # one evaluation per placement orders the queue; the exact bounds wait until it is popped
            probe = make_config(model, cluster, training, pl, max(work.sizes), work.levels[0], work.shardings[0])
            bound = placement_lower_bound(model, cluster, training, probe, min(work.sizes))
        queue.append((bound, len(queue), work))
    queue.sort(key=lambda item: item[:2])
    _explore_queue(model, cluster, training, world, queue, state, budget, deadline)


def _work(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    pl: Placement,
    state: SearchState,
    offload: bool,
) -> Work | None:
    """The placement's candidate lists, or None when it offers no sharding or breaks a placement rule (recorded)."""
    per_replica = max(training.global_batch_size // pl.dp, 1)
    # the option lists depend on a few numbers of the placement, shared by many: made once (and never mutated)
    per_chunk = _layers_per_chunk(model, pl)
    key = (pl.dp, pl.cp, pl.pp, offload)
    shardings = model.memo(("shardings", *key), partial(space.sharding_options, training, *key), training)
    levels = model.memo(("levels", per_chunk), partial(space.recompute_options, model, training, per_chunk), training)
    sizes = model.memo(
        ("sizes", per_replica, pl.cp), partial(space.mbs_options, model, training, per_replica, pl.cp), training
    )
    if not shardings or not placement_ok(model, cluster, training, world, pl, shardings, sizes, levels, state):
        return None
    offload_levels = partial(space.offload_options, model, cluster, training, per_chunk)
    offloads = model.memo(("offloads", per_chunk), offload_levels, cluster, training)
    return Work(pl, shardings, levels, sizes, offloads)


def _levels_by_cost(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    pl: Placement,
    levels: list[space.Recompute],
    mbs: int,
    sharding: dict[str, object],
) -> list[space.Recompute]:
    """The recomputation levels from the fastest to the slowest on this placement at `mbs`: by the busiest stage's
    layer time at the share of its layers each level recomputes (the longer of device and host time,
    `layer_cost_line`), so that the first level that fits is the fastest that fits (candidates._try_recompute).
    Cached per layer configuration and stage shapes; each level's line per layer configuration."""
    probe = make_config(model, cluster, training, pl, mbs, levels[0], sharding)
    stages = tuple((shape, dense, moe) for _first, shape, dense, moe, _n in alike_stages(model, training, probe))

    def line(level: space.Recompute, moe: bool) -> tuple[tuple[float, float], tuple[float, float]]:
        return model.memo(
            # a layer's cost reads the level's kind and modules, not how many layers it recomputes or offloads
            ("level_line", probe.layer_key, level.recompute, level.modules, moe),
            lambda: layer_cost_line(model, cluster, training, make_config(model, cluster, training, pl, mbs, level,
                                                                          sharding), moe),
            cluster,
            training,
        )  # fmt: skip

    def cost(level: space.Recompute) -> float:
        busiest = 0.0
        for shape, dense, moe in stages:
            share = recomputed_share(level.recompute, level.method, level.layers, shape.chunks)
            t = 0.0
            for n, is_moe in ((dense, False), (moe, True)):
                if n:
                    (d0, d1), (h0, h1) = line(level, is_moe)
                    t += n * max(d0 + (d1 - d0) * share, h0 + (h1 - h0) * share)
            busiest = max(busiest, t)
        return busiest

    return model.memo(
        ("level_order", id(levels), probe.layer_key, stages),
        lambda: sorted(levels, key=cost),  # stable: equal costs keep the generator's order
        cluster,
        training,
    )


def _explore_queue(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    queue: list[tuple[float, int, Work]],
    state: SearchState,
    budget: Budget,
    deadline: Deadline,
) -> None:
    """The branch and bound over placements, best first: a placement comes off the queue by its one-evaluation
    bound and goes back on by its exact bounds per micro-batch size; when it comes off by those, it goes back on
    by what its shardings spend after the pipeline at the least added (worked out only then), and once more by what
    the traffic of shardings that move parameters or gradients in every micro-batch adds (`_moving_bound`); it is
    explored when it comes off by that. Placements are so explored in the order of their tightest bounds and the
    bar falls as early as it can. The rest are skipped once the smallest bound on the queue exceeds the bar."""
    # (bound, queue position, stage: 0 the one-evaluation bound, 1 the exact bounds, 2 and the slacks, 3 and the
    # per-micro-batch traffic, placement)
    heap: list[tuple[float, int, int, Work]] = [(bound, seq, 0, work) for bound, seq, work in queue]
    heapq.heapify(heap)
    while heap:
        bound, seq, stage, work = heapq.heappop(heap)
        if bound > state.bar():
            heap.append((bound, seq, stage, work))
            state.skipped += sum(len(w.shardings) * len(w.sizes) * len(w.levels) for *_rest, w in heap)
            return
        if stage == 2:
            moving = _moving_bound(model, cluster, training, work, budget)
            # its shardings' per-micro-batch traffic puts it later: back on by that; where no sharding's model states
            # fit, `_explore` rejects each on them now (cheaply, before any candidate) rather than skip them
            if bound < moving < float("inf"):
                heapq.heappush(heap, (moving, seq, 3, work))
                continue
        if stage >= 2:
            if not _explore(model, cluster, training, world, work, state, budget, deadline):
                return
            continue
        if stage == 1:  # what each sharding spends after the pipeline, at the least
            work.slacks = {id(sh): _slack(model, cluster, training, work, sh) for sh in work.shardings}
            heapq.heappush(heap, (bound + min(work.slacks.values(), default=0.0), seq, 2, work))
            continue
        if state.bar() == float("inf") and _no_states_fit(model, cluster, training, work, budget):
            # no bar yet, so no bound could skip the placement: `_explore` rejects every sharding on its model
            # states alone (as where nothing fits on the cluster) and needs no bounds for it
            if not _explore(model, cluster, training, world, work, state, budget, deadline):
                return
            continue
        probes = [make_config(model, cluster, training, work.pl, mbs, work.levels[0], work.shardings[0])
                  for mbs in work.sizes]  # fmt: skip
        floors = stage_floors(model, cluster, training, probes)
        work.floors = dict(zip(work.sizes, floors, strict=True))
        work.bounds = {mbs: f.total(par) for mbs, f, par in zip(work.sizes, floors, probes, strict=True)}
        least = min(work.bounds.values(), default=0.0)
        if least > state.bar() or not work.sizes:
            state.skipped += len(work.shardings) * len(work.sizes) * len(work.levels)
            continue
        heapq.heappush(heap, (least, seq, 1, work))


def _explore(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    work: Work,
    state: SearchState,
    budget: Budget,
    deadline: Deadline,
) -> bool:
    """Every sharding, micro-batch size and recomputation of one placement (the fastest level that fits, found with
    as few memory evaluations as the levels' order allows: candidates._try_recompute); False when the time cap
    stopped it."""
    levels, sizes = work.levels, work.sizes
    # Every sharding gets every level: none is known to be no faster than another at the same micro-batch and
    # recomputation (ZeRO-2 overlaps the reduce-scatter that ZeRO-1, as rendered, runs in blocking hooks; Megatron-FSDP
    # optim_grads reduce-scatters in every backward what the distributed optimizer reduces at the end of the step;
    # the offload options interleave with the stages)
    for sharding in work.shardings:
        if not sharding_ok(model, cluster, training, world, work, sharding, state):
            continue
        if sizes and not _states_fit(model, cluster, training, work, sharding, state, budget):
            continue
        # the most a sharding's per-micro-batch traffic can add to a stage's micro-batch (0: it moves none), worked
        # out when a micro-batch size first gets past the placement's bounds
        traffic: float | None = None if work.bounds else 0.0
        # memory never shrinks with a larger micro-batch: a level that ran out of memory at a smaller one under the
        # same sharding runs out again, unevaluated
        failed: set[space.Recompute] = set()
        for i, mbs in enumerate(sizes):
            if deadline.passed():
                state.truncated = True
                return False
            given = [level for level in levels if level not in failed] if failed else list(levels)  # (no hashing)
            if not given:
                continue
            cheaper = Levels(given, partial(_untried, model, cluster, training, work, mbs, frozenset(failed)))
            bound = work.bounds.get(mbs, 0.0)
            bar = state.bar() - work.slacks.get(id(sharding), 0.0)  # what the pipeline must beat
            if bound <= bar and traffic is None:
                traffic = _traffic_ceiling(model, cluster, training, work, sharding)
            if bound > bar or (
                # the traffic bound is worked out only where the traffic could lift the bound past the bar
                bound + _pipeline_slots(model, cluster, training, work, mbs) * (traffic or 0.0) > bar
                and _traffic_bound(model, cluster, training, work, mbs, sharding) > bar
            ):
                state.skipped += len(cheaper)
                continue
            state.known_out_of_memory(len(levels) - len(cheaper))
            tried = recompute_and_record(model, cluster, training, world, work, mbs, sharding, cheaper, state, budget)
            offloaded = None
            found = tried.found
            recomputes = found is not None and found >= 0 and cheaper[found].recompute != "none"
            if work.offloads and (recomputes or found == -1):
                # recomputation was needed, or nothing fit: offloading may fit for less
                offloaded = recompute_and_record(
                    model, cluster, training, world, work, mbs, sharding, work.offloads, state, budget
                ).found
            failed.update(tried.out_of_memory)
            if found == -1 and not tried.behind and not (offloaded is not None and offloaded >= 0):
                # activation memory never shrinks with a larger micro-batch: every larger one runs out too
                state.known_out_of_memory((len(sizes) - i - 1) * len(levels))
                break
    return True


def _untried(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    work: Work,
    mbs: int,
    failed: frozenset[space.Recompute],
) -> list[space.Recompute]:
    """The placement's levels at `mbs` from the fastest, less those known to run out of memory."""
    order = _levels_by_cost(model, cluster, training, work.pl, work.levels, mbs, work.shardings[0])
    return [level for level in order if level not in failed]


def _slack(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, work: Work, sharding: dict[str, object]
) -> float:
    """What the placement's steps under `sharding` spend after the pipeline at the least (`off_pipeline_floor`):
    the same at every micro-batch size and recomputation."""
    probe = make_config(model, cluster, training, work.pl, work.sizes[0], work.levels[0], sharding)
    if not work.stage_params:  # the same under every sharding
        work.stage_params = stage_param_pairs(model, training, probe)
    return off_pipeline_floor(model, cluster, training, probe, work.stage_params)


def _traffic_ceiling(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, work: Work, sharding: dict[str, object]
) -> float:
    """The most the sharding's per-micro-batch traffic (ZeRO-2/3, FSDP) can add to one micro-batch of a stage: all
    of it exposed (`sharding_ceiling`); 0 for shardings that move nothing per micro-batch."""
    probe = make_config(model, cluster, training, work.pl, work.sizes[0], work.levels[0], sharding)
    return sharding_ceiling(model, cluster, training, probe) if moves_per_microbatch(training, probe) else 0.0


def _pipeline_slots(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, work: Work, mbs: int) -> float:
    """How many stage micro-batch times a step's pipeline time adds up at `mbs` (`pipeline_time` of stages of 1 s)."""
    par = make_config(model, cluster, training, work.pl, mbs, work.levels[0], work.shardings[0])
    return pipeline_time([(1.0, par.pp)], par, max(1, num_microbatches(training, par))).total_s


def _moving_bound(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, work: Work, budget: Budget) -> float:
    """The placement's least `_candidate_bound` over the shardings whose model states fit (`_states_fit`; `_explore`
    rejects the others before any candidate) and its micro-batch sizes: a placement whose model states fit only
    under a sharding that moves parameters or gradients in every micro-batch (70B on TP1 x PP1 x DP256: Megatron-FSDP)
    is explored after the placements that could beat it, when the bar has fallen. Sizes by their bounds, so a
    sharding stops at the first size that cannot improve on the least found. Infinite where no sharding's states
    fit (the placement is then explored at once, and rejected on them)."""
    least = float("inf")
    sizes = sorted(work.sizes, key=work.bounds.__getitem__)
    for sharding in work.shardings:
        if not _states_fit(model, cluster, training, work, sharding, None, budget):
            continue
        slack = work.slacks.get(id(sharding), 0.0)
        for mbs in sizes:
            if work.bounds[mbs] + slack >= least:
                break
            least = min(least, _candidate_bound(model, cluster, training, work, mbs, sharding))
    return least


def _candidate_bound(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, work: Work, mbs: int, sharding: dict[str, object]
) -> float:
    """A bound below the step of every candidate of the placement at `mbs` under `sharding`: the placement's exact
    bound at that size (or, for a sharding that moves parameters or gradients in every micro-batch, the bound with
    that traffic, `_traffic_bound`) plus what the sharding spends after the pipeline at the least (its slack)."""
    slack = work.slacks.get(id(sharding), 0.0)
    bound = work.bounds[mbs]
    probe = make_config(model, cluster, training, work.pl, work.sizes[0], work.levels[0], sharding)
    if moves_per_microbatch(training, probe):
        bound = max(bound, _traffic_bound(model, cluster, training, work, mbs, sharding))
    return bound + slack


def _traffic_bound(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    work: Work,
    mbs: int,
    sharding: dict[str, object],
) -> float:
    """A bound below the step of every recomputation at `mbs` under a sharding that moves parameters or gradients
    in every micro-batch, with what that traffic adds (`step_lower_bound` of the layout without recomputation);
    the placement's bounds leave it out. Computed only where those bounds do not rule the micro-batch size out, from
    the layer costs of the placement's probe at that size (the same layout under its first sharding)."""
    key = (mbs, id(sharding))
    value = work.traffic_bounds.get(key)
    if value is None:
        base = make_config(model, cluster, training, work.pl, mbs, work.levels[0], work.shardings[0])
        par = make_config(model, cluster, training, work.pl, mbs, work.levels[0], sharding)
        value = work.traffic_bounds[key] = step_lower_bound(model, cluster, training, base, sharded=par)
    return value


def _states_fit(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    work: Work,
    sharding: dict[str, object],
    state: SearchState | None,
    budget: Budget,
) -> bool:
    """Model states alone (weights, gradients, optimizer, buckets) must fit before any activation does: one check
    per placement and sharding rejects every micro-batch size and recomputation of a placement that cannot (recorded
    in `state`; None: only asked). The heaviest stage is worked out once per placement and sharding."""
    sizes, levels = work.sizes, work.levels
    par = make_config(model, cluster, training, work.pl, sizes[0], levels[-1], sharding)
    heaviest = work.states.get(id(sharding))
    if heaviest is None:
        # every stage shape: a middle stage of an uneven split holds more layers than the first and the last (the
        # message said 129.0 GiB for a stage of 9 layers where those of 18 needed 240.5, QA 2026-12-07)
        heaviest = work.states[id(sharding)] = max(
            (static_bytes(model, training, par, first), first) for first, *_ in alike_stages(model, training, par)
        )
    worst, stage = heaviest
    upper = worst * budget.limit + budget.runtime
    if upper <= budget.usable:
        return True
    if state is None:
        return False
    count = len(sizes) * len(levels)
    state.candidates += count
    needed, usable = over(upper, budget.usable)
    state.rejected.add(
        "out_of_memory",
        f"model states alone need {worst / 2**30:.1f} GiB per GPU{f' on stage {stage}' if par.pp > 1 else ''} "
        "before any activation; at the upper end of its "
        f"80% interval {needed} GiB > usable {usable} GiB",
        par,
        score=worst,
        count=count,
    )
    return False


def _no_states_fit(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, work: Work, budget: Budget) -> bool:
    """True when the model states of every sharding of the placement overflow the GPU: `_explore` would reject
    them all before timing anything, so the placement's bounds need not be worked out."""
    return bool(work.sizes) and not any(
        _states_fit(model, cluster, training, work, s, None, budget) for s in work.shardings
    )


def fewest_gpus(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> float:
    """The fewest GPUs of the cluster's kind whose memory could hold the model states of a plan without offload
    (`states_floor_bytes` over the GPU count, at the upper end of the memory interval, with the runtime beside it):
    on fewer, every candidate runs out of memory, so a search there can be skipped (the `min_gpus` objective and the
    node-count hint try many counts). A bound, not a count that fits: divisibility and activations decide that."""
    budget = memory_budget(cluster, training)
    room = budget.usable - budget.runtime
    if room <= 0:
        return float("inf")
    return states_floor_bytes(model, training) * budget.limit / room


def memory_budget(cluster: ClusterSpec, training: TrainingSpec) -> Budget:
    """The memory a plan may use on one of the cluster's GPUs (and its host), as the search and the input checks
    read it."""
    return Budget(
        usable=cluster.gpu.memory_bytes * (1 - training.memory_headroom),
        host=cluster.cpu_memory_GiB * 2**30 * 0.9,
        limit=_upper_factor(cluster, training),
        runtime=cluster.gpu.efficiency.runtime_overhead_bytes,
    )


def _upper_factor(cluster: ClusterSpec, training: TrainingSpec) -> float:
    from app.planner import uncertainty

    s = training.software
    return uncertainty.upper_factor(uncertainty.spread(s.name, cluster.gpu.generation, "memory", s.label))


def _layers_per_chunk(model: ModelSpec, pl: Placement) -> int:
    return max(1, model.num_layers // (pl.pp * pl.vpp))
