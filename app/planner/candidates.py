"""A placement's candidates, evaluated: the placement rules once, then per micro-batch size and sharding the cheapest
recomputation that fits (bisection over the levels), each plan found recorded and, in a bounded search, timed
against the bar (`SearchState`). Rejected candidates keep their reason and the numbers of the closest miss.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import overload

from app.planner import rules, space
from app.planner.estimate import step_lower_bound, time_estimate
from app.planner.memory import peak_memory
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
            r = self.rejected
            r.counts["out_of_memory"] = r.counts.get("out_of_memory", 0) + count
            if "out_of_memory" not in r.messages:  # the smaller candidates that decided it broke a rule instead
                r.messages["out_of_memory"] = "runs out of memory where a smaller micro-batch or less recomputation did"
                r.scores["out_of_memory"] = float("inf")  # any evaluated miss is a closer one
                r.examples.setdefault("out_of_memory", [])

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


@dataclass
class Work:
    """One placement's candidates: its shardings, recomputation levels, micro-batch sizes (and their bounds)."""

    pl: Placement
    shardings: list[dict[str, object]]
    levels: list[space.Recompute]
    sizes: list[int]
    offloads: list[space.Recompute] = field(default_factory=list)  # activation offload, a chain of its own
    bounds: dict[int, float] = field(default_factory=dict)
    # what memory decided for this placement's candidates, shared with the placements that differ from it only in
    # the CP communication type (no memory term and no candidate rule reads it): `Outcome` by candidate set
    twins: dict[tuple[object, ...], Outcome] | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `_try_recompute` found for one set of candidates: the level index (or -1 / None), the peak bytes of the
    level that fits, the rejections it counted, and the order the levels were tried in where that decided which
    level it is (`_order_decides`)."""

    found: int | None
    peak: float
    rejected: dict[str, int]
    order: tuple[space.Recompute, ...] = ()


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
) -> tuple[int | None, Found | None]:
    """The fastest recomputation that fits; the slower ones are dominated and not timed. Levels run from the fastest
    to the slowest (search._levels_by_cost), so the first that fits is wanted, and every level before it is known to
    run out of memory. Memory is not monotone along them (a selective module on every layer against one fully
    recomputed layer), but it is along the chain of full (or offloaded) levels, each keeping less than the one
    before: the first of the chain that fits is found by bisection, then the other levels before it are tried in
    order. Returns its index and the plan; (-1, None) when none fits in GPU memory, (None, None) when a rule or host
    memory rejects the candidate."""
    configs: dict[space.Recompute, ParallelConfig | None] = {}
    results: dict[space.Recompute, Found | bool | None] = {}

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

    state.candidates += len(levels)
    given = levels.given if isinstance(levels, Levels) else list(levels)
    try:
        config(given[0], first=True)  # a rule the level does not decide rejects them all
    except _Rejected as exc:
        state.rejected.add(exc.violation.code, exc.violation.message, exc.par, count=len(levels))
        return None, None
    in_chain = [level for level in given if _chained(level)]
    if isinstance(levels, Levels) and not levels.first_known and in_chain:
        # the fastest level is not known without the order: first rule out that nothing fits
        settled = _settled(fits(in_chain[-1]), in_chain[-1])
        if settled:
            return settled
    cheapest = fits(levels[0])
    if cheapest is None:
        return None, None  # out of host memory
    if isinstance(cheapest, Found):
        return 0, cheapest
    chain = [i for i in range(1, len(levels)) if _chained(levels[i])]
    found: tuple[int, Found] | None = None
    if chain:
        most = fits(levels[chain[-1]])
        settled = _settled(most, levels[chain[-1]])
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
        if i in members:
            continue
        result = fits(levels[i])
        if isinstance(result, Found):
            return i, result
    return found if found else (-1, None)


def _chained(level: space.Recompute) -> bool:
    """Full recomputation or activation offload: along these levels, in their order, each keeps less memory."""
    return level.recompute == "full" or bool(level.offload)


def _settled(most: Found | bool | None, level: space.Recompute) -> tuple[int | None, None] | None:
    """What a miss of the chain's most memory-saving `level` settles at once: host memory out (None, None), or,
    where it recomputes every layer, nothing fits (-1, None); None where the other levels still need trying."""
    if most is None:
        return None, None
    if not most and _keeps_least(level):
        return -1, None  # every layer recomputed keeps the least: nothing else can fit
    return None


def _order_decides(levels: Sequence[space.Recompute], found: int | None) -> bool:
    """Whether the order the levels were tried in decided the level found: not where none fits or a rule rejected
    them, nor where the first fits and was known without the order (no recomputation, the fastest of all)."""
    if found is None or found < 0:
        return False
    return found > 0 or (isinstance(levels, Levels) and not levels.first_known)


def _keeps_least(level: space.Recompute) -> bool:
    """Full recomputation of every layer (uniform, one layer per checkpoint, or Megatron's default): no level keeps
    less activation memory."""
    return level.recompute == "full" and level.method in (None, "uniform") and not level.offload


def shared(
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
    which: tuple[object, ...],
) -> int | None:
    """`_try_recompute` of the placement's candidates at `mbs` under `sharding` (`which` names the level list and
    its slice), recording the plan found. A placement differing only in its CP communication type gets the same
    memory (and candidate-rule) verdict, so its twin's outcome is replayed: the same level, peak and rejection
    counts, without evaluating memory again."""
    pl = work.pl
    key = (mbs, id(sharding), *which)  # the sharding dicts live in the model's memo, shared by the twins
    known = work.twins.get(key) if work.twins is not None else None
    if known is not None and known.order and tuple(levels) != known.order:
        known = None  # the twin tried the levels in another order (its CP traffic differs): its verdict may not hold
    if known is not None:
        state.candidates += len(levels)
        for code, n in known.rejected.items():
            state.rejected.counts[code] = state.rejected.counts.get(code, 0) + n
        if known.found is not None and known.found >= 0:  # the same level: the same order, or the first known
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
        order = tuple(levels) if _order_decides(levels, found) else ()
        work.twins[key] = Outcome(found, plan.peak_bytes if plan is not None else 0.0, rejected, order)
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
    state.rejected.add(
        "out_of_memory",
        f"needs {peak / 2**30:.1f} GiB per GPU on stage {stage} (up to {upper / 2**30:.1f} GiB at the upper end of "
        f"its interval) > usable {budget.usable / 2**30:.1f} GiB",
        par,
        score=peak,
    )
    return False
