"""The search: flat candidate generators (space.py), named pruning rules (rules.py), ranking by the objective.

Candidates are the product of small generators over placements (TP, CP and its communication type, PP, VPP, the
layer split, EP, expert TP), the sharding options of the stack, and micro-batch sizes. Each is checked against the
rules and against memory; for every placement and micro-batch size only the cheapest recomputation that fits is
kept, since more recomputation only adds work. Rejected candidates keep their reason.

For the throughput objective the search is a branch and bound: every placement gets a lower bound on its step
(the pipeline time of its layers' compute alone, at each micro-batch size), placements are explored from the
smallest bound up, each plan found is timed, and the search stops once the next bound exceeds the `max_plans`-th
best step found: nothing left could enter the ranking. Those placements are counted as skipped, not rejected.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace
from functools import partial

from app.planner import rules, space
from app.planner.estimate import (
    lower_bounds,
    placement_lower_bound,
    sharding_ceiling,
    step_lower_bound,
    time_estimate,
)
from app.planner.layout import num_microbatches
from app.planner.memory import peak_memory, static_bytes
from app.planner.pipeline import pipeline_time
from app.planner.results import TimeEstimate
from app.planner.specs import PARALLEL_DEFAULTS, ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.traffic import moves_per_microbatch


@dataclass
class Placement:
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    vpp: int
    etp: int | None = None
    split: space.Split = field(default_factory=space.Split)
    cp_comm: tuple[str, tuple[int, int] | None] = ("p2p", None)
    _fields: dict[str, dict[str, object]] = field(default_factory=dict, repr=False, compare=False)
    # configs made for this placement, by (micro-batch, recomputation, id of the sharding dict): the bounds, the
    # rule checks and the memory evaluation ask for the same ones (the sharding dicts live in the model's memo)
    _configs: dict[tuple[object, ...], ParallelConfig] = field(default_factory=dict, repr=False, compare=False)
    # every field's value but the micro-batch and recomputation ones, and the names set, per (recompute, sharding)
    _bases: dict[tuple[str, int], tuple[dict[str, object], frozenset[str]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def fields(
        self, model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, recompute: str
    ) -> dict[str, object]:
        """The ParallelConfig fields the placement fixes, with its overlaps (which depend on full recompute)."""
        cached = self._fields.get(recompute)
        if cached is not None:
            return cached
        sp = self.tp > 1 and training.software.can.sequence_parallel
        if training.pinned.sequence_parallel is not None:
            sp = training.pinned.sequence_parallel
        overlap = space.overlap_options(model, training, cluster, self.tp, self.ep, self.pp, self.vpp, recompute)
        if not sp:
            overlap["tp_comm_overlap"] = False
        out: dict[str, object] = dict(
            tp=self.tp,
            pp=self.pp,
            vpp=self.vpp,
            dp=self.dp,
            cp=self.cp,
            ep=self.ep,
            etp=self.etp,
            sequence_parallel=sp,
            first_stage_layers=self.split.first,
            last_stage_layers=self.split.last,
            account_for_embedding_in_pipeline_split=self.split.account,
            account_for_loss_in_pipeline_split=self.split.account,
            pipeline_layout=self.split.layout,
            partition_method=self.split.partition,
            cp_comm_type=self.cp_comm[0],
            hierarchical_cp_sizes=self.cp_comm[1],
            schedule="interleaved" if self.vpp > 1 else "1f1b",
            **overlap,
        )
        self._fields[recompute] = out
        return out


def placements(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, world: int) -> Iterator[Placement]:
    for tp in space.tp_options(model, cluster, training):
        if world % tp:
            continue
        for cp in space.cp_options(model, training, world // tp):
            for pp in space.pp_options(model, training, world // (tp * cp)):
                if (world // (tp * cp)) % pp:
                    continue
                dp = world // (tp * cp * pp)
                if training.pinned.dp and dp != training.pinned.dp:
                    continue
                yield from _inner(model, cluster, training, tp, cp, pp, dp)


def _inner(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, tp: int, cp: int, pp: int, dp: int
) -> Iterator[Placement]:
    microbatches = max(1, training.global_batch_size // dp)  # at micro-batch 1: the most the bubble can shrink
    for ep, vpp, etp, cp_comm in itertools.product(
        space.ep_options(model, training, tp * cp * dp),
        space.vpp_options(model, training, pp, microbatches),
        space.etp_options(model, training, tp),
        space.cp_comm_options(model, cluster, training, tp, cp),
    ):
        splits = model.memo(("splits", pp, vpp), partial(space.split_options, model, training, pp, vpp), training)
        for split in splits:
            yield Placement(tp, cp, pp, dp, ep, vpp, etp, split, cp_comm)


@dataclass
class Rejections:
    """Rejected candidates by reason; each reason keeps the message of its closest miss (smallest `score`)."""

    counts: dict[str, int] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    examples: dict[str, list[ParallelConfig]] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)

    def add(self, code: str, message: str, par: ParallelConfig, score: float = 0.0, count: int = 1) -> None:
        self.counts[code] = self.counts.get(code, 0) + count
        examples = self.examples.setdefault(code, [])
        if code not in self.scores or score < self.scores[code]:
            self.scores[code], self.messages[code] = score, message
            examples.insert(0, par)
            del examples[3:]
        elif len(examples) < 3:
            examples.append(par)


@dataclass
class Found:
    par: ParallelConfig
    world: int
    peak_bytes: float
    time: TimeEstimate | None = None  # timed during a bounded search


@dataclass
class SearchState:
    rejected: Rejections = field(default_factory=Rejections)
    found: list[Found] = field(default_factory=list)
    candidates: int = 0
    evaluated: int = 0
    skipped: int = 0  # candidates a bounded search never needed to look at
    truncated: bool = False
    keep: int = 0  # bounded search: how many best steps to keep (0: not bounded)
    first_fit: bool = False  # unbounded: a yes/no question (does anything fit?), stop at the first placement with one
    best: list[float] = field(default_factory=list)  # max-heap (negated) of the `keep` shortest steps found

    def copy(self, keep: int, first_fit: bool) -> SearchState:
        """A state that searches on from this one, with its own settings, without changing it."""
        r = self.rejected
        rejected = Rejections(
            dict(r.counts), dict(r.messages), {k: list(v) for k, v in r.examples.items()}, dict(r.scores)
        )
        return replace(self, rejected=rejected, found=list(self.found), best=list(self.best), keep=keep,
                       first_fit=first_fit)  # fmt: skip

    def adopt(self, other: SearchState) -> None:
        """Take what `other` (a `copy` of this state) found and counted since; this state keeps its settings."""
        for name in _RESULTS:
            setattr(self, name, getattr(other, name))

    def bar(self) -> float:
        """The step a placement's lower bound must beat to matter (infinite until `keep` plans are timed)."""
        return -self.best[0] if self.keep and len(self.best) >= self.keep else float("inf")

    def known_out_of_memory(self, count: int) -> None:
        """`count` candidates that run out of memory by monotonicity alone (memory never shrinks with a larger
        micro-batch or less recomputation): counted and rejected without an evaluation."""
        if count:
            self.candidates += count
            self.rejected.counts["out_of_memory"] = self.rejected.counts.get("out_of_memory", 0) + count

    def add(self, found: Found, model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> None:
        if self.keep:
            if step_lower_bound(model, cluster, training, found.par, recompute=True) > self.bar():
                self.skipped += 1  # its recomputation alone puts it behind the ranked plans
                return
            found.time = time_estimate(model, cluster, training, found.par)
            heapq.heappush(self.best, -found.time.step_s)
            if len(self.best) > self.keep:
                heapq.heappop(self.best)
        self.found.append(found)


# what a search found and counted, as against its settings (`keep`, `first_fit`)
_RESULTS = tuple(f.name for f in fields(SearchState) if f.name not in ("keep", "first_fit"))


def make_config(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    pl: Placement,
    mbs: int,
    rc: space.Recompute,
    sharding: dict[str, object],
) -> ParallelConfig:
    key = (mbs, rc.recompute, rc.modules, rc.method, rc.layers, rc.offload, id(sharding))  # flat: no Python __hash__
    made = pl._configs.get(key)
    if made is not None:
        return made
    base_key = (rc.recompute, id(sharding))
    base = pl._bases.get(base_key)
    if base is None:
        dist = bool(sharding.get("distributed_optimizer", False))
        fixed = pl.fields(model, cluster, training, rc.recompute)
        values = {**PARALLEL_DEFAULTS, **fixed, "fp8_param_gather": space.fp8_param_gather(training, dist), **sharding}
        base = pl._bases[base_key] = (values, frozenset(fixed) | frozenset(sharding) | _PER_CANDIDATE)
    values, names = base
    # the generators produce only valid values: skip pydantic's validation (a third of the search's time)
    made = pl._configs[key] = ParallelConfig.from_values(
        {
            **values,
            "micro_batch_size": mbs,
            "recompute": rc.recompute,
            "recompute_modules": rc.modules,
            "recompute_method": rc.method,
            "recompute_num_layers": rc.layers,
            "cpu_offloading_num_layers": rc.offload,
        },
        set(names),
    )
    return made


_PER_CANDIDATE = frozenset(
    {
        "micro_batch_size",
        "recompute",
        "recompute_modules",
        "recompute_method",
        "recompute_num_layers",
        "cpu_offloading_num_layers",
        "fp8_param_gather",
    }
)


def search_world(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    state: SearchState,
    deadline: float,
    offload: bool,
) -> None:
    """Every candidate on `world` GPUs: record the feasible ones and why the others fail."""
    budget = _Budget(
        usable=cluster.gpu.memory_bytes * (1 - training.memory_headroom),
        host=cluster.cpu_memory_GiB * 2**30 * 0.9,
        limit=_upper_factor(cluster, training),
        runtime=cluster.gpu.efficiency.runtime_overhead_bytes,
    )
    bounded = bool(state.keep)
    queue: list[tuple[float, int, _Work]] = []
    twins: dict[tuple[object, ...], dict[tuple[object, ...], _Outcome]] = {}
    for pl in placements(model, cluster, training, world):
        if time.perf_counter() > deadline:
            state.truncated = True
            break  # explore what has been bounded so far (the queue is checked against the deadline too)
        per_replica = max(training.global_batch_size // pl.dp, 1)
        # the option lists depend on a few numbers of the placement, shared by many: made once (and never mutated)
        per_chunk = _layers_per_chunk(model, pl)
        key = (pl.dp, pl.cp, pl.pp, offload)
        shardings = model.memo(("shardings", *key), partial(space.sharding_options, training, *key), training)
        levels = model.memo(
            ("levels", per_chunk), partial(space.recompute_options, model, training, per_chunk), training
        )
        sizes = model.memo(
            ("sizes", per_replica, pl.cp), partial(space.mbs_options, model, training, per_replica, pl.cp), training
        )
        if not shardings or not _placement_ok(model, cluster, training, world, pl, shardings, sizes, levels, state):
            continue
        offload_levels = partial(space.offload_options, model, cluster, training, per_chunk)
        offloads = model.memo(("offloads", per_chunk), offload_levels, cluster, training)
        work = _Work(pl, shardings, levels, sizes, offloads)
        if pl.cp > 1:
            work.twins = twins.setdefault((pl.tp, pl.cp, pl.pp, pl.dp, pl.ep, pl.vpp, pl.etp, pl.split), {})
        if not bounded:
            if not _explore(model, cluster, training, world, work, state, budget, deadline):
                return
            if state.first_fit and state.found:
                return
            continue
        bound = 0.0
        if sizes:  # one evaluation per placement orders the queue; the exact bounds wait until it is popped
            probe = make_config(model, cluster, training, pl, max(sizes), levels[0], shardings[0])
            bound = placement_lower_bound(model, cluster, training, probe, min(sizes))
        queue.append((bound, len(queue), work))
    queue.sort(key=lambda item: item[:2])
    for k, (bound, _seq, work) in enumerate(queue):
        if bound > state.bar():
            state.skipped += sum(len(w.shardings) * len(w.sizes) * len(w.levels) for _b, _s, w in queue[k:])
            return
        if state.bar() == float("inf") and _no_states_fit(model, cluster, training, work, budget):
            # no bar yet, so no bound could skip the placement: `_explore` rejects every sharding on its model
            # states alone (as where nothing fits on the cluster) and needs no bounds for it
            if not _explore(model, cluster, training, world, work, state, budget, deadline):
                return
            continue
        probes = [make_config(model, cluster, training, work.pl, mbs, work.levels[0], work.shardings[0])
                  for mbs in work.sizes]  # fmt: skip
        work.bounds = dict(zip(work.sizes, lower_bounds(model, cluster, training, probes), strict=True))
        if min(work.bounds.values(), default=0.0) > state.bar():
            state.skipped += len(work.shardings) * len(work.sizes) * len(work.levels)
            continue
        if not _explore(model, cluster, training, world, work, state, budget, deadline):
            return


@dataclass
class _Work:
    """One placement's candidates: its shardings, recomputation levels, micro-batch sizes (and their bounds)."""

    pl: Placement
    shardings: list[dict[str, object]]
    levels: list[space.Recompute]
    sizes: list[int]
    offloads: list[space.Recompute] = field(default_factory=list)  # activation offload, a chain of its own
    bounds: dict[int, float] = field(default_factory=dict)
    # what memory decided for this placement's candidates, shared with the placements that differ from it only in
    # the CP communication type (no memory term and no candidate rule reads it): `_Outcome` by candidate set
    twins: dict[tuple[object, ...], _Outcome] | None = None


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What `_try_recompute` found for one set of candidates: the level index (or -1 / None), the peak bytes of the
    level that fits, and the rejections it counted."""

    found: int | None
    peak: float
    rejected: dict[str, int]


def _explore(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    work: _Work,
    state: SearchState,
    budget: _Budget,
    deadline: float,
) -> bool:
    """Every sharding, micro-batch size and (by bisection) recomputation of one placement; False when the time
    cap stopped it."""
    pl, levels, sizes = work.pl, work.levels, work.sizes
    # shardings run from the least to the most memory-saving, each slower at the same micro-batch and
    # recomputation: a later one is tried only where it can fit with less recomputation than the earlier needed
    needed: dict[int, int] = {}
    for sharding in work.shardings:
        if sizes and not _states_fit(model, cluster, training, pl, sizes, levels, sharding, state, budget):
            continue
        # the most a sharding's per-micro-batch traffic can add to a stage's micro-batch (0: it moves none), worked
        # out when a micro-batch size first gets past the placement's bounds
        traffic: float | None = None if work.bounds else 0.0
        # memory never shrinks with a larger micro-batch, so a larger one needs at least the recomputation level
        # the smaller one needed under the same sharding: the levels below it run out of memory unevaluated
        floor = 0
        for i, mbs in enumerate(sizes):
            if time.perf_counter() > deadline:
                state.truncated = True
                return False
            end = needed.get(mbs, len(levels))
            cheaper = levels[floor:end]
            if not cheaper:
                continue
            bound = work.bounds.get(mbs, 0.0)
            if bound <= state.bar() and traffic is None:
                traffic = _traffic_ceiling(model, cluster, training, work, sharding)
            if bound > state.bar() or (
                # the traffic bound is worked out only where the traffic could lift the bound past the bar
                bound + _pipeline_slots(model, cluster, training, work, mbs) * (traffic or 0.0) > state.bar()
                and _traffic_bound(model, cluster, training, work, mbs, sharding) > state.bar()
            ):
                state.skipped += len(cheaper)
                continue
            state.known_out_of_memory(floor)
            found = _shared(
                model, cluster, training, world, work, mbs, sharding, cheaper, state, budget, ("levels", floor, end)
            )
            offloaded = None
            recomputes = found is not None and found >= 0 and cheaper[found].recompute == "full"
            if work.offloads and (recomputes or found == -1):
                # full recomputation was needed, or nothing fit: offloading may fit for less
                offloaded = _shared(
                    model, cluster, training, world, work, mbs, sharding, work.offloads, state, budget, ("offloads",)
                )
            if found is not None and found >= 0:
                found += floor
                floor = found
                needed[mbs] = min(needed.get(mbs, len(levels)), found)
            if found == -1 and mbs not in needed and not (offloaded is not None and offloaded >= 0):
                # activation memory never shrinks with a larger micro-batch: every larger one runs out too
                state.known_out_of_memory((len(sizes) - i - 1) * len(levels))
                break
    return True


def _traffic_ceiling(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, work: _Work, sharding: dict[str, object]
) -> float:
    """The most the sharding's per-micro-batch traffic (ZeRO-2/3, FSDP) can add to one micro-batch of a stage: all
    of it exposed (`sharding_ceiling`); 0 for shardings that move nothing per micro-batch."""
    probe = make_config(model, cluster, training, work.pl, work.sizes[0], work.levels[0], sharding)
    return sharding_ceiling(model, cluster, training, probe) if moves_per_microbatch(training, probe) else 0.0


def _pipeline_slots(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, work: _Work, mbs: int) -> float:
    """How many stage micro-batch times a step's pipeline time adds up at `mbs` (`pipeline_time` of stages of 1 s)."""
    par = make_config(model, cluster, training, work.pl, mbs, work.levels[0], work.shardings[0])
    return pipeline_time([(1.0, par.pp)], par, max(1, num_microbatches(training, par))).total_s


def _traffic_bound(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    work: _Work,
    mbs: int,
    sharding: dict[str, object],
) -> float:
    """A bound below the step of every recomputation at `mbs` under a sharding that moves parameters or gradients
    in every micro-batch, with what that traffic adds (`step_lower_bound` of the layout without recomputation);
    the placement's bounds leave it out. Computed only where those bounds do not rule the micro-batch size out, from
    the layer costs of the placement's probe at that size (the same layout under its first sharding)."""
    base = make_config(model, cluster, training, work.pl, mbs, work.levels[0], work.shardings[0])
    par = make_config(model, cluster, training, work.pl, mbs, work.levels[0], sharding)
    return step_lower_bound(model, cluster, training, base, sharded=par)


def _states_fit(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    pl: Placement,
    sizes: list[int],
    levels: list[space.Recompute],
    sharding: dict[str, object],
    state: SearchState | None,
    budget: _Budget,
) -> bool:
    """Model states alone (weights, gradients, optimizer, buckets) must fit before any activation does: one check
    per placement and sharding rejects every micro-batch size and recomputation of a placement that cannot (recorded
    in `state`; None: only asked)."""
    par = make_config(model, cluster, training, pl, sizes[0], levels[-1], sharding)
    worst = max(static_bytes(model, training, par, stage) for stage in range(par.pp) if stage in (0, par.pp - 1))
    upper = worst * budget.limit + budget.runtime
    if upper <= budget.usable:
        return True
    if state is None:
        return False
    count = len(sizes) * len(levels)
    state.candidates += count
    state.rejected.add(
        "out_of_memory",
        f"model states alone need {worst / 2**30:.1f} GiB per GPU (up to {upper / 2**30:.1f} GiB at the upper end of "
        f"its interval, before any activation) > usable {budget.usable / 2**30:.1f} GiB",
        par,
        score=worst,
        count=count,
    )
    return False


def _no_states_fit(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, work: _Work, budget: _Budget
) -> bool:
    """True when the model states of every sharding of the placement overflow the GPU: `_explore` would reject
    them all before timing anything, so the placement's bounds need not be worked out."""
    pl, sizes, levels = work.pl, work.sizes, work.levels
    return bool(sizes) and not any(
        _states_fit(model, cluster, training, pl, sizes, levels, s, None, budget) for s in work.shardings
    )


def _upper_factor(cluster: ClusterSpec, training: TrainingSpec) -> float:
    from app.planner import uncertainty

    s = training.software
    return uncertainty.upper_factor(uncertainty.spread(s.name, cluster.gpu.generation, "memory", s.label))


def _layers_per_chunk(model: ModelSpec, pl: Placement) -> int:
    return max(1, model.num_layers // (pl.pp * pl.vpp))


def _placement_ok(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    pl: Placement,
    shardings: list[dict[str, object]],
    sizes: list[int],
    levels: list[space.Recompute],
    state: SearchState,
) -> bool:
    """Check the placement-only rules once; a violation rejects every candidate of the placement."""
    # any candidate of the placement says what its placement rules see: the one its bound is worked out on
    probe = make_config(model, cluster, training, pl, max(sizes, default=1), levels[0], shardings[0])
    violations = rules.check(model, cluster, training, probe, world, only=rules.PLACEMENT_RULES)
    if not violations:
        return True
    count = len(shardings) * max(1, len(sizes)) * len(levels)
    state.candidates += count
    state.rejected.add(violations[0].code, violations[0].message, probe, count=count)
    return False


@dataclass(frozen=True)
class _Budget:
    usable: float  # GPU bytes a plan may need at the upper end of its memory interval
    host: float  # host bytes per node for offloaded states
    limit: float  # predicted -> upper end of the interval
    runtime: float  # CUDA context and workspaces (outside the allocator, not scaled)


def _try_recompute(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    pl: Placement,
    mbs: int,
    sharding: dict[str, object],
    levels: list[space.Recompute],
    state: SearchState,
    budget: _Budget,
) -> tuple[int | None, Found | None]:
    """The cheapest recomputation that fits; the costlier ones are dominated and not timed. Levels run from the
    least to the most memory-saving, so the first that fits is found by bisection. Returns its index and the plan;
    (-1, None) when even the most recomputation runs out of GPU memory, (None, None) when a rule or host memory
    rejects the candidate."""
    configs: dict[int, ParallelConfig | None] = {}

    def config(i: int) -> ParallelConfig | None:
        if i not in configs:
            par = make_config(model, cluster, training, pl, mbs, levels[i], sharding)
            bad = rules.check(model, cluster, training, par, world, only=rules.CANDIDATE_RULES)
            configs[i] = None if bad else par
            if bad and i == 0 and bad[0].code not in ("recompute", "moe_ep_overlap"):
                raise _Rejected(bad[0], par)
        return configs[i]

    state.candidates += len(levels)
    try:
        config(0)
    except _Rejected as exc:
        state.rejected.add(exc.violation.code, exc.violation.message, exc.par, count=len(levels))
        return None, None
    cheapest = _fits(model, cluster, training, config(0), state, budget)
    if cheapest is None:
        return None, None  # out of host memory
    if isinstance(cheapest, Found):
        return 0, cheapest
    last = len(levels) - 1
    most = _fits(model, cluster, training, config(last), state, budget) if last else False
    if most is None:
        return None, None
    if not most:
        return -1, None
    lo, hi = 0, last  # levels[lo] does not fit, levels[hi] does
    best = most
    while hi - lo > 1:
        mid = (lo + hi) // 2
        result = _fits(model, cluster, training, config(mid), state, budget)
        if isinstance(result, Found):
            hi, best = mid, result
        else:
            lo = mid
    assert isinstance(best, Found)
    return hi, best


def _shared(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    work: _Work,
    mbs: int,
    sharding: dict[str, object],
    levels: list[space.Recompute],
    state: SearchState,
    budget: _Budget,
    which: tuple[object, ...],
) -> int | None:
    """`_try_recompute` of the placement's candidates at `mbs` under `sharding` (`which` names the level list and
    its slice), recording the plan found. A placement differing only in its CP communication type gets the same
    memory (and candidate-rule) verdict, so its twin's outcome is replayed: the same level, peak and rejection
    counts, without evaluating memory again."""
    pl = work.pl
    key = (mbs, id(sharding), *which)  # the sharding dicts live in the model's memo, shared by the twins
    known = work.twins.get(key) if work.twins is not None else None
    if known is not None:
        state.candidates += len(levels)
        for code, n in known.rejected.items():
            state.rejected.counts[code] = state.rejected.counts.get(code, 0) + n
        if known.found is not None and known.found >= 0:
            par = make_config(model, cluster, training, pl, mbs, levels[known.found], sharding)
            state.add(Found(par, par.world_size, known.peak), model, cluster, training)
        return known.found
    before = dict(state.rejected.counts) if work.twins is not None else {}
    found, plan = _try_recompute(model, cluster, training, world, pl, mbs, sharding, levels, state, budget)
    if plan is not None:
        state.add(plan, model, cluster, training)
    if work.twins is not None:
        counts = state.rejected.counts
        rejected = {code: n - before.get(code, 0) for code, n in counts.items() if n != before.get(code, 0)}
        work.twins[key] = _Outcome(found, plan.peak_bytes if plan is not None else 0.0, rejected)
    return found


class _Rejected(Exception):
    def __init__(self, violation: rules.Violation, par: ParallelConfig) -> None:
        self.violation, self.par = violation, par


def _fits(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig | None,
    state: SearchState,
    budget: _Budget,
) -> Found | bool | None:
    """The candidate when it fits, False when it runs out of GPU memory (or breaks a rule), None when the
    offloaded states overflow host memory."""
    if par is None:
        return False
    state.evaluated += 1
    peak, stage, cpu = peak_memory(model, cluster, training, par)
    if cpu > budget.host:
        state.rejected.add(
            "cpu_out_of_memory",
            f"offloaded states need {cpu / 2**30:.0f} GiB of host memory per node > 90% of "
            f"{cluster.cpu_memory_GiB:.0f} GiB",
            par,
            score=cpu,
        )
        return None
    upper = (peak - budget.runtime) * budget.limit + budget.runtime
    if upper <= budget.usable:
        return Found(par, par.world_size, peak)
    state.rejected.add(
        "out_of_memory",
        f"needs {peak / 2**30:.1f} GiB per GPU on stage {stage} (up to {upper / 2**30:.1f} GiB at the upper end of "
        f"its interval) > usable {budget.usable / 2**30:.1f} GiB",
        par,
        score=peak,
    )
    return False
