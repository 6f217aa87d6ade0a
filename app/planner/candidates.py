"""A placement's candidates, evaluated: the placement rules once, then per micro-batch size and sharding the cheapest
recomputation that fits (bisection over the levels), each plan found recorded and, in a bounded search, timed
against the bar (`SearchState`). Rejected candidates keep their reason and the numbers of the closest miss.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import overload

from app.planner import rules, space
from app.planner.estimate import StageFloors, step_lower_bound, time_estimate
from app.planner.memory import over, peak_memory
from app.planner.placement import Placement, make_config
from app.planner.results import TimeEstimate
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


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
    """A candidate that fits: its configuration, world size and peak bytes (and its time, once timed)."""

    par: ParallelConfig
    world: int
    peak_bytes: float
    time: TimeEstimate | None = None  # timed during a bounded search


@dataclass
class SearchState:
    """What a search has found and counted so far, with its settings (`keep`, `first_fit`)."""

    rejected: Rejections = field(default_factory=Rejections)
    found: list[Found] = field(default_factory=list)
    candidates: int = 0
    evaluated: int = 0
    skipped: int = 0  # candidates a bounded search never needed to look at
    truncated: bool = False
    keep: int = 0  # bounded search: how many best steps to keep (0: not bounded)
    within: float = 0.0  # bounded search: the bar is the `keep`-th best step x (1 + within) (headroom: 0.10)
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
        """The step a placement's lower bound must beat to matter (infinite until `keep` plans are timed): the
        `keep`-th best step, or for the headroom objective (`within`) the step within which plans are ranked."""
        return -self.best[0] * (1 + self.within) if self.keep and len(self.best) >= self.keep else float("inf")

    def known_out_of_memory(self, count: int) -> None:
        """`count` candidates that run out of memory by monotonicity alone (memory never shrinks with a larger
        micro-batch or less recomputation): counted and rejected without an evaluation."""
        if count:
            self.candidates += count
            r = self.rejected
            r.counts["out_of_memory"] = r.counts.get("out_of_memory", 0) + count
            if "out_of_memory" not in r.messages:  # the smaller candidates that decided it broke a rule instead
                r.messages["out_of_memory"] = "runs out of memory where a smaller micro-batch or less recomputation did"
                r.scores["out_of_memory"] = float("inf")  # any evaluated miss is a closer one
                r.examples.setdefault("out_of_memory", [])

    def add(
        self, found: Found, model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, slack: float = 0.0
    ) -> None:
        """Record a plan that fits (timed against the bar in a bounded search, unless its bound plus `slack`, the
        least its step spends after the pipeline, `off_pipeline_floor`, already puts it behind the ranked plans)."""
        if self.keep:
            if step_lower_bound(model, cluster, training, found.par, recompute=True) + slack > self.bar():
                self.skipped += 1  # its recomputation alone puts it behind the ranked plans
                return
            found.time = time_estimate(model, cluster, training, found.par)
            heapq.heappush(self.best, -found.time.step_s)
            if len(self.best) > self.keep:
                heapq.heappop(self.best)
        self.found.append(found)


# what a search found and counted, as against its settings (`keep`, `first_fit`)
_RESULTS = tuple(f.name for f in fields(SearchState) if f.name not in ("keep", "first_fit", "within"))


@dataclass
class Work:
    """One placement's candidates: its shardings, recomputation levels, micro-batch sizes (and their bounds)."""

    pl: Placement
    shardings: list[dict[str, object]]
    levels: list[space.Recompute]
    sizes: list[int]
    offloads: list[space.Recompute] = field(default_factory=list)  # activation offload, a chain of its own
    bounds: dict[int, float] = field(default_factory=dict)
    floors: dict[int, StageFloors] = field(default_factory=dict)  # what the bounds are made of, per micro-batch size
    slacks: dict[int, float] = field(default_factory=dict)  # per sharding (by id): `off_pipeline_floor`
    stage_params: list[tuple[int, int]] = field(default_factory=list)  # `stage_param_pairs`, for the slacks
    level_bounds: dict[tuple[int, space.Recompute], float] = field(default_factory=dict)  # `_level_bound`
    traffic_bounds: dict[tuple[int, int], float] = field(default_factory=dict)  # (mbs, sharding id): search's
    states: dict[int, tuple[float, int]] = field(default_factory=dict)  # sharding id: heaviest stage's states, stage


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `_try_recompute` found for one set of candidates: the index of the level kept (-1: none fits, None: a
    rule or host memory rejects them) and its plan, the levels known to run out of memory, and how many levels it
    left unevaluated because their recomputation alone puts them behind the ranked plans (`behind`)."""

    found: int | None
    plan: Found | None = None
    out_of_memory: frozenset[space.Recompute] = frozenset()
    behind: int = 0


class Levels(Sequence[space.Recompute]):
    """Recomputation levels in the order the search tries them, fastest first (search._levels_by_cost), put in that
    order only when a level past the first is asked for: no recomputation is the fastest of all, so where it comes
    first and fits (most candidates), no order is worked out."""

    def __init__(self, given: list[space.Recompute], order: Callable[[], list[space.Recompute]]) -> None:
        self._given, self._order = given, order
        self._sorted: list[space.Recompute] | None = None

    @property
    def first_known(self) -> bool:
        """The first level is known without the order: no recomputation, the fastest of all, is still in the set."""
        return bool(self._given) and self._given[0].recompute == "none" and not self._given[0].offload

    @property
    def given(self) -> list[space.Recompute]:
        """The levels in the order they were given (the generator's), none of them known to run out of memory."""
        return self._given

    def _all(self) -> list[space.Recompute]:
        if self._sorted is None:
            self._sorted = self._order()
        return self._sorted

    def __len__(self) -> int:
        return len(self._given)

    @overload
    def __getitem__(self, i: int) -> space.Recompute: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[space.Recompute]: ...
    def __getitem__(self, i: int | slice) -> space.Recompute | Sequence[space.Recompute]:
        if isinstance(i, int) and i == 0 and self.first_known:
            return self._given[0]
        return self._all()[i]


def placement_ok(
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


def sharding_ok(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    work: Work,
    sharding: dict[str, object],
    state: SearchState,
) -> bool:
    """The sharding rule (`sharding_supported`, which reads the sharding, the stack and the placement only) once per
    placement and sharding: where it fails, every candidate of that sharding is rejected before its model states
    are weighed, each by the first rule it breaks in the candidate rules' order (those before the sharding rule
    read the micro-batch size, not the recomputation: one check per size). A pinned ZeRO stage on Megatron was
    16,416 candidates "out of memory", 36,870 "framework_support" (QA 2026-12-07)."""
    probe = make_config(model, cluster, training, work.pl, max(work.sizes, default=1), work.levels[0], sharding)
    if not rules.check(model, cluster, training, probe, world, only=SHARDING_RULES):
        return True
    for mbs in work.sizes or [1]:
        par = make_config(model, cluster, training, work.pl, mbs, work.levels[0], sharding)
        first = rules.check(model, cluster, training, par, world, only=UP_TO_SHARDING)[0]
        state.candidates += len(work.levels)
        state.rejected.add(first.code, first.message, par, count=len(work.levels))
    return False


SHARDING_RULES = (rules.sharding_supported,)
UP_TO_SHARDING = rules.CANDIDATE_RULES[: rules.CANDIDATE_RULES.index(rules.sharding_supported) + 1]


@dataclass(frozen=True)
class Budget:
    """The memory a candidate may use on this cluster."""

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
    levels: Sequence[space.Recompute],
    state: SearchState,
    budget: Budget,
    bound: Callable[[space.Recompute], float] | None = None,
    slack: float = 0.0,
) -> Outcome:
    """The fastest recomputation that fits; the slower ones are dominated and not timed. Levels run from the fastest
    to the slowest (search._levels_by_cost), so the first that fits is wanted, and every level before it is known to
    run out of memory. Memory is not monotone along them (a selective module on every layer against one fully
    recomputed layer), but it is along the chain of full (or offloaded) levels, each keeping less than the one
    before: the first of the chain that fits is found by bisection, then the other levels before it are tried in
    order. In a bounded search, given the `bound` of a level's step (the placement's stage floors at `mbs` plus the
    level's recomputation, `StageFloors.bound`), a level whose recomputation alone puts its step behind the ranked
    plans is not evaluated: along the chain that bound only grows, so the chain is cut where it first passes the bar
    (less `slack`, the least the step spends after its pipeline); where every level recomputes and every one is
    behind, not even the rules are read. The outcome's `found` is the kept level's index; -1 when none fits in GPU
    memory (or none within the bar does, with `behind` > 0); None when a rule or host memory rejects the
    candidates."""
    configs: dict[space.Recompute, ParallelConfig | None] = {}
    results: dict[space.Recompute, Found | bool | None] = {}
    bar = state.bar() - slack

    def config(level: space.Recompute, first: bool = False) -> ParallelConfig | None:
        if level not in configs:
            par = make_config(model, cluster, training, pl, mbs, level, sharding)
            bad = rules.check(model, cluster, training, par, world, only=rules.CANDIDATE_RULES)
            configs[level] = None if bad else par
            if bad and first and bad[0].code not in ("recompute", "moe_ep_overlap"):
                raise _Rejected(bad[0], par)
        return configs[level]

    def fits(level: space.Recompute) -> Found | bool | None:
        if level not in results:
            results[level] = _fits(model, cluster, training, config(level), state, budget)
        return results[level]

    beyond: set[space.Recompute] = set()  # levels left unevaluated: their recomputation puts them behind the bar

    def behind(level: space.Recompute) -> bool:
        """Its recomputation alone puts the candidate behind the ranked plans (the caller bounded the rest)."""
        if beyond and level in beyond:  # (a level's hash is a Python call: not asked of the empty set)
            return True
        if level.recompute == "none" or bound is None or bar == float("inf"):
            return False
        if bound(level) <= bar:
            return False
        beyond.add(level)
        return True

    def outcome(found: int, plan: Found | None = None) -> Outcome:
        out = {level for level, result in results.items() if result is False}
        out.update(levels[i] for i in range(found) if levels[i] not in beyond)  # before the kept level: none fit
        if found < 0:
            out = set(given) - beyond  # every level within the bar evaluated, or known from the chain: none fits
        return Outcome(found, plan, frozenset(out), len(beyond))

    def all_behind() -> bool:
        """Every recomputing level is behind the bar (along the chain its lightest level decides)."""
        full = [level for level in recomputing if _chained(level)]
        if full and not behind(full[0]):
            return False
        beyond.update(full)
        return all(behind(level) for level in recomputing if not _chained(level))

    state.candidates += len(levels)
    given = levels.given if isinstance(levels, Levels) else list(levels)
    recomputing = [level for level in given if level.recompute != "none"]
    if len(recomputing) == len(given) and all_behind():
        return outcome(-1)  # every level recomputes, and every one is behind the bar: no rule or memory is read
    try:
        config(given[0], first=True)  # a rule the level does not decide rejects them all
    except _Rejected as exc:
        state.rejected.add(exc.violation.code, exc.violation.message, exc.par, count=len(levels))
        return Outcome(None)
    if all(level.offload for level in given):
        # activation offload (search.Work.offloads, fewest layers first): GPU memory falls along the chain and host
        # memory grows (memory.offloaded_activations), so the fastest that fits is the first that fits the GPU if
        # the host holds it, and past a host overflow none does. Bisected like full recomputation, an overflow of
        # the most offloaded level rejected every level (70B on 64 GB200: 79 of 80 layers need 1,068 GiB a node;
        # 40 fit, QA 2026-12-07)
        for i, level in enumerate(given):
            if behind(level):
                break
            result = fits(level)
            if isinstance(result, Found):
                return outcome(i, result)
            if result is None:
                break
        return outcome(-1)
    if given[0] == _NONE and len(recomputing) + 1 == len(given):
        # no recomputation, the fastest of all, tried first; where it does not fit and every recomputing level is
        # behind the bar, nothing is left, and the levels' order is not needed
        cheapest = fits(given[0])
        if cheapest is None:
            return Outcome(None)  # out of host memory
        if isinstance(cheapest, Found):
            return outcome(0, cheapest)
        if all_behind():
            return outcome(-1)
    in_chain = [level for level in given if _chained(level)]
    if isinstance(levels, Levels) and not levels.first_known and in_chain:
        # the fastest level is not known without the order: first rule out that nothing fits
        settled = _settled(fits(in_chain[-1]), in_chain[-1], levels)
        if settled:
            return settled
    if not behind(levels[0]):
        cheapest = fits(levels[0])
        if cheapest is None:
            return Outcome(None)  # out of host memory
        if isinstance(cheapest, Found):
            return outcome(0, cheapest)
    chain = [i for i in range(1, len(levels)) if _chained(levels[i])]
    # the chain's levels within the bar: its bound only grows along it (more layers recomputed), so they are a
    # prefix, found by bisection; the rest are behind
    within, past = -1, len(chain)  # chain[within] is within the bar (-1: none checked), chain[past] behind
    while past - within > 1:
        mid = (within + past) // 2
        if behind(levels[chain[mid]]):
            past = mid
        else:
            within = mid
    beyond.update(levels[i] for i in chain[past:])
    chain = chain[:past]
    found: tuple[int, Found] | None = None
    if chain:
        most = fits(levels[chain[-1]])
        settled = _settled(most, levels[chain[-1]], levels)
        if settled:
            return settled
        if isinstance(most, Found):
            lo, hi, best = -1, len(chain) - 1, most  # chain[lo] does not fit (-1: none tried), chain[hi] does
            while hi - lo > 1:
                mid = (lo + hi) // 2
                result = fits(levels[chain[mid]])
                if isinstance(result, Found):
                    hi, best = mid, result
                else:
                    lo = mid
            found = chain[hi], best
    members = set(chain)
    for i in range(1, found[0] if found else len(levels)):  # faster than the chain's: the first that fits
        if i in members or behind(levels[i]):
            continue
        result = fits(levels[i])
        if isinstance(result, Found):
            return outcome(i, result)
    return outcome(*found) if found else outcome(-1)


_NONE = space.Recompute("none")


def _chained(level: space.Recompute) -> bool:
    """Full recomputation or activation offload: along these levels, in their order, each keeps less memory."""
    return level.recompute == "full" or bool(level.offload)


def _settled(most: Found | bool | None, level: space.Recompute, levels: Sequence[space.Recompute]) -> Outcome | None:
    """What a miss of the chain's most memory-saving `level` settles at once: host memory out (None), or, where it
    recomputes every layer, nothing fits (-1); None where the other levels still need trying."""
    if most is None:
        return Outcome(None)
    if not most and _keeps_least(level):
        return Outcome(-1, out_of_memory=frozenset(levels))  # every layer recomputed keeps the least
    return None


def _keeps_least(level: space.Recompute) -> bool:
    """Full recomputation of every layer (uniform, one layer per checkpoint, or Megatron's default): no level keeps
    less activation memory."""
    return level.recompute == "full" and level.method in (None, "uniform") and not level.offload


def recompute_and_record(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    work: Work,
    mbs: int,
    sharding: dict[str, object],
    levels: Sequence[space.Recompute],
    state: SearchState,
    budget: Budget,
) -> Outcome:
    """`_try_recompute` of the placement's candidates at `mbs` under `sharding`, recording the plan found; the
    levels it left behind the bar are counted as skipped."""
    slack = work.slacks.get(id(sharding), 0.0)
    floors = work.floors.get(mbs)
    bound = partial(_level_bound, model, cluster, training, work, mbs, floors) if floors is not None else None
    outcome = _try_recompute(model, cluster, training, world, work.pl, mbs, sharding, levels, state, budget, bound,
                             slack)  # fmt: skip
    state.candidates -= outcome.behind
    state.skipped += outcome.behind
    if outcome.plan is not None:
        state.add(outcome.plan, model, cluster, training, slack)
    return outcome


def _level_bound(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    work: Work,
    mbs: int,
    floors: StageFloors,
    level: space.Recompute,
) -> float:
    """The placement's stage floors at `mbs` plus `level`'s recomputation (`StageFloors.bound`), kept on the
    placement: the same under every sharding (a layer's compute does not read it), so worked out once on the
    first sharding's config."""
    key = (mbs, level)
    value = work.level_bounds.get(key)
    if value is None:
        par = make_config(model, cluster, training, work.pl, mbs, level, work.shardings[0])
        value = work.level_bounds[key] = floors.bound(model, cluster, training, par)
    return value


class _Rejected(Exception):
    def __init__(self, violation: rules.Violation, par: ParallelConfig) -> None:
        self.violation, self.par = violation, par


def _fits(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    par: ParallelConfig | None,
    state: SearchState,
    budget: Budget,
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
    needed, usable = over(upper, budget.usable)
    state.rejected.add(
        "out_of_memory",
        f"needs {peak / 2**30:.1f} GiB per GPU on stage {stage}; at the upper end of its 80% interval "
        f"{needed} GiB > usable {usable} GiB",
        par,
        score=peak,
    )
    return False
