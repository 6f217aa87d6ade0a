"""The planner's two entry points: `plan(request) -> PlanResult` and `estimate(request) -> Estimate`."""

from __future__ import annotations

import heapq
import time

from app.planner import __version__, collector, rules, space, splits
from app.planner.calibration import apply_profile, constants
from app.planner.candidates import Found, SearchState
from app.planner.clock import Deadline, cap_words
from app.planner.decisions import decide
from app.planner.errors import InputError
from app.planner.estimate import evaluate, step_lower_bound, time_estimate
from app.planner.explain import (
    SIMPLER_WITHIN,
    cluster_notes,
    describe,
    fewer_words,
    mfu_words,
    model_notes,
    simpler_by,
    simplicity,
    why,
)
from app.planner.goodput import checkpoint_plan
from app.planner.interning import interned
from app.planner.layout import make_layout, stage_layer_kinds
from app.planner.results import Estimate, Plan, PlanResult, RejectedGroup, SearchStats, TimeEstimate
from app.planner.rules.shape import layout_violation, uneven_split_violation
from app.planner.rules.stack import fp8_recipe_runs, fp8_supported, recompute_modules_problem
from app.planner.search import fewest_gpus, memory_budget, search_world
from app.planner.specs import ClusterSpec, EstimateRequest, ModelSpec, ParallelConfig, PlanRequest, TrainingSpec
from app.planner.specs.common import HEADROOM_WITHIN
from app.planner.suggest import suggestions
from app.planner.worlds import world_sizes

GiB = 2**30


def estimate(request: EstimateRequest) -> Estimate:
    """Evaluate one fixed parallel configuration on the cluster (with its measured profile, if any)."""
    cluster, _notes = apply_profile(request.cluster, request.training)
    _check_fixed_layout(request.model, cluster, request.training, request.parallel)
    est = evaluate(request.model, cluster, request.training, request.parallel)
    return est.model_copy(update={"constants": constants(cluster, request.training)})


def _check_fixed_layout(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig) -> None:
    """What a fixed layout needs before its memory and time mean anything, as an input error naming the field: FP8
    on a GPU that has it, and a layout string or first/last stage layers that place the model's layers (other
    broken rules leave numbers to show, and are reported beside them)."""
    for violation in rules.check(model, cluster, training, par, only=(fp8_supported,)):
        raise InputError("training.precision", f"fp8: {violation.message} (use bf16)")
    _check_fp8_recipe(cluster, training)
    if par.pipeline_layout is not None and (bad := layout_violation(model, par)) is not None:
        raise InputError("parallel.pipeline_layout", bad.message.removeprefix("pipeline_layout "))
    uneven = par.first_stage_layers is not None or par.last_stage_layers is not None
    if uneven and par.pp > 1 and (bad := uneven_split_violation(model, par)) is not None:
        # the stages would hold other than the model's layers: its numbers were a 500 or an MFU of 252 % (QA)
        field = "first_stage_layers" if par.first_stage_layers is not None else "last_stage_layers"
        raise InputError(f"parallel.{field}", bad.message)
    accounted = par.account_for_embedding_in_pipeline_split or par.account_for_loss_in_pipeline_split
    placed = sum(dense + moe for dense, moe in stage_layer_kinds(model, training, par))
    if accounted and par.pp > 1 and par.pipeline_layout is None and placed != model.num_layers:
        # the even split of layers and accounted units left layers out: its numbers were another model's (QA)
        field = "account_for_" + ("embedding" if par.account_for_embedding_in_pipeline_split else "loss")
        units = model.num_layers + par.account_for_embedding_in_pipeline_split + par.account_for_loss_in_pipeline_split
        raise InputError(
            f"parallel.{field}_in_pipeline_split",
            f"num_layers({model.num_layers}) + the accounted embedding/loss = {units} units do not split evenly over "
            f"pp({par.pp}) x vpp({par.vpp}) chunks: the stages would hold {placed} of the {model.num_layers} layers "
            "(Megatron refuses it; give first_stage_layers/last_stage_layers or a pipeline_layout instead)",
        )


def _search(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    deadline: Deadline,
    offload: bool,
    state: SearchState,
) -> None:
    floor = 0.0 if offload else fewest_gpus(model, cluster, training)
    for world in world_sizes(cluster, training):
        if deadline.passed():
            state.truncated = True
            return
        if world < floor and world < cluster.world_size:
            continue  # too few GPUs for the model states alone: every candidate would run out of memory
        if training.objective == "min_gpus" and state.keep:
            # the first world with a plan is ranked by throughput, bounded; a world without one is searched whole
            # either way, where bounds prune nothing: a yes/no search first, which is all such a world gets
            probe = state.copy(keep=0, first_fit=True)
            search_world(model, cluster, training, world, probe, deadline, offload)
            if not probe.found:
                state.adopt(probe)
                continue
        search_world(model, cluster, training, world, state, deadline, offload)
        if state.found and training.objective == "min_gpus":
            return


def _rank_key(training: TrainingSpec, f: Found, t: TimeEstimate) -> tuple[float, ...]:
    if training.objective == "min_gpus":
        return (f.world, -t.tokens_per_s)
    if training.objective == "headroom":
        return (f.peak_bytes, -t.tokens_per_s)
    return (-t.tokens_per_s, f.peak_bytes)


def plan(request: PlanRequest) -> PlanResult:
    """Search every parallel layout for the request and return the ranked feasible plans."""
    with collector.paused():
        return _plan(request)


def _check_possible(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> None:
    """Settings every layout fails are an input error, not a search that stores a plan of nothing ("320 of 320
    candidates fail ep_needs_moe", QA 2026-12-07): expert parallelism without experts, FP8 without FP8 units."""
    ep = training.pinned.ep
    if ep is not None and ep > 1 and not model.is_moe:
        raise InputError(
            "training.pinned.ep", f"{ep} > 1 but {model.name} has no experts: expert parallelism needs an MoE model"
        )
    if training.precision == "fp8" and cluster.gpu.fp8_TFLOPs is None:
        raise InputError(
            "training.precision", f"fp8 needs FP8 tensor cores, which {cluster.gpu.name} has not: plan bf16"
        )
    _check_fp8_recipe(cluster, training)
    _check_room(cluster, training)
    _check_pinned_shape(model, training)
    _check_pinned_features(model, training)


def _check_room(cluster: ClusterSpec, training: TrainingSpec) -> None:
    """A GPU whose usable memory the CUDA context and workspaces already fill holds no model: every layout fails
    (a custom GPU of 1 GiB crashed the suggestions' GPU count, QA 2026-12-07)."""
    gpu, budget = cluster.gpu, memory_budget(cluster, training)
    usable, runtime = budget.usable, budget.runtime
    if usable <= runtime:  # `fewest_gpus` would be infinite
        headroom = f" ({usable / GiB:.2f} GiB usable with {100 * training.memory_headroom:.0f}% headroom)"
        raise InputError(
            "cluster.gpu.memory_bytes",
            f"{gpu.memory_bytes / GiB:.2f} GiB{headroom if training.memory_headroom else ''} leaves nothing for the "
            f"model: the CUDA context and workspaces take {runtime / GiB:.2f} GiB of every GPU",
        )


def _check_fp8_recipe(cluster: ClusterSpec, training: TrainingSpec) -> None:
    """MXFP8 scales per 32-element block in hardware Blackwell has: on another GPU every layout fails (the search
    rejected 36,169 candidates one by one, and a fixed layout's estimate said "feasible", QA 2026-12-07)."""
    gen = cluster.gpu.generation
    if training.precision == "fp8" and training.fp8_recipe == "mxfp8" and not fp8_recipe_runs("mxfp8", gen):
        raise InputError(
            "training.fp8_recipe",
            f"mxfp8 needs Blackwell's block-scaled FP8, which {cluster.gpu.name} ({cluster.gpu.generation}) has "
            "not: use tensorwise, blockwise or delayed",
        )
    if training.precision == "fp8" and training.fp8_recipe == "blockwise" and not fp8_recipe_runs("blockwise", gen):
        raise InputError(
            "training.fp8_recipe",
            f"blockwise needs Transformer Engine's block-scaled FP8 GEMM, on Hopper or later (SM90); "
            f"{cluster.gpu.name} ({cluster.gpu.generation}) has not: use tensorwise or delayed",
        )


def _no_candidate(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> None:
    """A search that generated no candidate at all: the pins exclude every layout (a plan of nothing was stored with
    "no plan fits" and no reason, QA 2026-12-07); name them."""
    pins = {k: v for k, v in training.pinned.model_dump().items() if v is not None}
    if pins:
        named = ", ".join(
            f"{k}({'/'.join(map(str, v)) if isinstance(v, tuple | list) else v})" for k, v in pins.items()
        )
        raise InputError(
            "training.pinned",
            f"no layout of {model.name} on {cluster.world_size} {cluster.gpu.name} GPUs has {named} "
            f"under {training.software.label}: unpin one of them",
        )


def _check_pinned_shape(model: ModelSpec, training: TrainingSpec) -> None:
    """Pinned pipeline sizes that cannot hold the model's layers (the search had no candidate and said nothing
    more than "no plan fits", QA 2026-12-07)."""
    p, L = training.pinned, model.num_layers
    if p.pp and p.pp > L:
        raise InputError("training.pinned.pp", f"{p.pp} > model.num_layers({L}): each stage needs a layer")
    if p.vpp and p.vpp > 1 and p.pp == 1:
        raise InputError("training.pinned.vpp", f"{p.vpp} needs pipeline parallelism; training.pinned.pp is 1")
    k = p.recompute_num_layers
    if k is not None and p.pp and k > L // p.pp:
        # every candidate breaks rules.stack.recompute_supported, and the search counted them as out of memory
        # ("140 of 168 candidates fail out_of_memory" for 50 on PP4 of 80 layers, practitioner review 2026-12-07)
        raise InputError(
            "training.pinned.recompute_num_layers",
            f"{k} > the {L // p.pp} layers of each pipeline stage (num_layers({L}) / pinned pp({p.pp})): full "
            f"recomputation counts layers per stage and model chunk",
        )
    if p.vpp and p.vpp > 1 and p.pp and not splits.split_options(model, training, p.pp, p.vpp):
        raise InputError(
            "training.pinned.vpp",
            f"{p.vpp} with pp({p.pp}): no split of num_layers({L}) gives each of the {p.pp * p.vpp} virtual stages "
            f"whole layers as {training.software.label} splits them",
        )


def _check_pinned_features(model: ModelSpec, training: TrainingSpec) -> None:
    """Pinned features the stack or the model cannot have: a 422 naming them, not a plan without them (they were
    dropped without a word, QA 2026-12-07)."""
    p, stack = training.pinned, training.software
    if p.tp_comm_overlap:
        if not stack.can.tp_comm_overlap:
            raise InputError(
                "training.pinned.tp_comm_overlap", f"the {stack.name} stack has no TP communication overlap"
            )
        if p.tp == 1:
            raise InputError("training.pinned.tp_comm_overlap", "TP communication overlap needs tp > 1; pinned tp is 1")
    if p.offload_param not in (None, "none") and p.zero_stage is not None and p.zero_stage < 3:
        raise InputError(
            "training.pinned.offload_param",
            f"{p.offload_param} needs ZeRO-3; training.pinned.zero_stage is {p.zero_stage}",
        )
    if p.cp_comm_type is not None and p.cp == 1:
        raise InputError("training.pinned.cp_comm_type", f"{p.cp_comm_type} needs context parallelism; pinned cp is 1")
    if p.cp_comm_type is not None and stack.can.context_parallel and p.cp_comm_type not in stack.can.context_parallel:
        can = ", ".join(stack.can.context_parallel)
        raise InputError("training.pinned.cp_comm_type", f"{p.cp_comm_type}: the {stack.name} stack runs CP with {can}")
    if p.cp_comm_type == "a2a+p2p" and p.cp and not any(1 < a < p.cp for a in space.divisors(p.cp)):
        raise InputError(
            "training.pinned.cp_comm_type",
            f"a2a+p2p splits CP into an a2a level and a ring level, both above 1; pinned cp {p.cp} has no such split "
            "(pin a2a or p2p, or a cp of 4 or more that is not prime)",
        )
    if p.cp_comm_type is not None and not p.cp and not space.cp_searched(model, training):
        if not stack.can.context_parallel:
            why = f"the {stack.name} stack has no context parallelism"
        elif not training.flash_attention:
            why = "context parallelism needs flash attention (training.flash_attention is false)"
        else:
            seq = model.seq_length
            why = f"CP is searched from {space.CP_MIN_SEQ:,} tokens (seq_length {seq:,}): pin training.pinned.cp"
        raise InputError("training.pinned.cp_comm_type", f"{p.cp_comm_type}: {why}")
    if p.recompute_num_layers and not stack.can.partial_recompute:
        raise InputError(
            "training.pinned.recompute_num_layers",
            f"{p.recompute_num_layers}: the {stack.name} stack recomputes every layer or none (no partial recompute)",
        )
    if p.cpu_offloading_num_layers and not stack.can.activation_offload:
        raise InputError(
            "training.pinned.cpu_offloading_num_layers", f"the {stack.name} stack has no activation offload"
        )
    if p.cpu_offloading_num_layers and (p.recompute not in (None, "none") or p.recompute_modules):
        asked = "recompute_modules" if p.recompute_modules else "recompute"
        raise InputError(
            f"training.pinned.{asked}",
            f"activation offload (cpu_offloading_num_layers {p.cpu_offloading_num_layers}) runs without "
            "recomputation (megatron-core TransformerConfig): unpin one of them",
        )
    if p.recompute_modules:
        if p.recompute not in (None, "selective"):
            raise InputError(
                "training.pinned.recompute_modules",
                f"modules are for selective recompute; pinned recompute is {p.recompute}",
            )
        recipe = training.fp8_recipe if training.precision == "fp8" else None
        bad = recompute_modules_problem(model, stack, p.recompute_modules, recipe)
        if bad is not None:
            raise InputError("training.pinned.recompute_modules", bad)


def _plan(request: PlanRequest) -> PlanResult:
    model, training = interned(request.model), interned(request.training)
    _check_possible(model, request.cluster, training)
    cluster, notes = apply_profile(request.cluster, training)
    cluster = interned(cluster)
    notes = [*notes, *cluster_notes(cluster), *model_notes(model, training)]
    start = time.perf_counter()
    deadline = Deadline.after(training.search_time_limit_s)
    # min_gpus ranks the plans of the smallest world that has any by throughput: bounded like throughput (a world
    # without a plan has no bar, so it is searched whole either way). Headroom ranks the plans within
    # HEADROOM_WITHIN of the fastest step: bounded by the fastest found so far times that (the bar only falls, so
    # nothing skipped could come within it; Kimi-K2-like on 2,048 H100 searched every candidate in 7 s)
    if training.objective == "headroom":
        state = SearchState(keep=1, within=HEADROOM_WITHIN)
    else:
        state = SearchState(keep=_ranked_pool(training))
    _search(model, cluster, training, deadline, offload=False, state=state)
    if not state.found and training.software.can.offload and not state.truncated:
        _search(model, cluster, training, deadline, offload=True, state=state)
    if not state.candidates and not state.truncated:
        _no_candidate(model, cluster, training)
    timed = _time_best(model, cluster, training, state.found)
    searched = {id(f) for f in state.found}  # and the headroom objective's other recomputation levels
    feasible = len(state.found) + sum(id(f) not in searched for f, _t in timed)
    plans = _plans(model, cluster, training, timed[: training.max_plans], feasible)
    if training.objective == "throughput":
        _say_simpler(plans, timed, feasible, training.precision)
    if plans and state.truncated:  # "fastest of N" is of what was searched; under a cap a faster plan may be unseen
        plans[0].why.insert(
            1,
            f"the search stopped at its time cap ({cap_words(deadline, training.search_time_limit_s)}) after "
            f"{state.candidates:,} candidates: a faster plan may exist; raise training.search_time_limit_s",
        )
    until = start + training.search_time_limit_s  # the suggestions' searches end within the request's cap
    hints = [] if plans else suggestions(request.model_copy(update={"cluster": cluster}), state, until)
    return PlanResult(
        planner_version=__version__,
        model=model,
        cluster=cluster,
        training=training,
        num_parameters=model.num_parameters,
        num_active_parameters=model.num_active_parameters,
        plans=plans,
        rejected=_rejected(state),
        suggestions=hints,
        constants=constants(cluster, training),
        notes=notes,
        stats=SearchStats(
            candidates=state.candidates,
            evaluated=state.evaluated,
            feasible=feasible,  # with the headroom pass's other recomputation levels, as the headline counts them
            skipped=state.skipped,
            seconds=time.perf_counter() - start,
            truncated=state.truncated,
        ),
    )


def feasible_layouts(request: PlanRequest) -> list[ParallelConfig]:
    """Every layout the search finds feasible for the request (its pins respected), unranked and untimed: for
    callers that choose among them by their own criteria (the expert-recipe benchmark fills in what a published
    recipe leaves unstated with the fastest layout that agrees with everything it does state)."""
    cluster, _notes = apply_profile(request.cluster, request.training)
    training = request.training
    state = SearchState()
    with collector.paused():
        _search(request.model, cluster, training, Deadline.after(training.search_time_limit_s), False, state)
    return [f.par for f in state.found]


def _time_best(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, found: list[Found]
) -> list[tuple[Found, TimeEstimate]]:
    """Time the feasible candidates and rank them. For throughput, candidates are timed in order of a lower
    bound on their step time and the rest skipped once that bound exceeds the `max_plans`-th best step. For
    headroom, the same with the fastest step plus HEADROOM_WITHIN as the bar, and only the plans under it ranked
    (the peak first)."""
    if training.objective == "min_gpus":
        every = [(f, f.time or time_estimate(model, cluster, training, f.par)) for f in found]
        return sorted(every, key=lambda ft: _rank_key(training, *ft))
    headroom = training.objective == "headroom"
    keep, slack = (1, 1 + HEADROOM_WITHIN) if headroom else (_ranked_pool(training), 1.0)
    bounded = sorted(((step_lower_bound(model, cluster, training, f.par), i, f) for i, f in enumerate(found)))
    timed: list[tuple[Found, TimeEstimate]] = []
    best: list[float] = []  # max-heap (negated) of the `keep` shortest steps so far
    for bound, _i, f in bounded:
        if len(best) >= keep and bound > -best[0] * slack:
            break
        t = f.time or time_estimate(model, cluster, training, f.par)
        timed.append((f, t))
        heapq.heappush(best, -t.step_s)
        if len(best) > keep:
            heapq.heappop(best)
    if headroom and timed:
        bar = min(t.step_s for _, t in timed) * slack
        timed = [(f, t) for f, t in timed if t.step_s <= bar]
        timed += _more_recompute(model, cluster, training, timed, bar)
    ranked = sorted(timed, key=lambda ft: _rank_key(training, *ft))
    return _simpler_first(ranked) if training.objective == "throughput" else ranked


def _say_simpler(plans: list[Plan], timed: list[tuple[Found, TimeEstimate]], feasible: int, precision: str) -> None:
    """The "why" of plans `_simpler_first` ordered: #1 against the fastest plan of the whole ranked pool (shown or
    not: with max_plans 1 #1 said "fastest" beside a faster plan it did not show), and each plan shown below #1 that
    is faster than it."""
    if not plans or not timed:
        return
    first = plans[0]
    step = first.estimate.time.step_s
    fastest, quickest = min(timed, key=lambda ft: ft[1].step_s)
    for p in plans[1:]:
        if p.estimate.time.step_s < step:
            gain = 100 * (step / p.estimate.time.step_s - 1)
            p.why[0] = (
                f"{gain:.1f}% faster than #1 by the model, ranked below it: within {100 * SIMPLER_WITHIN:.0f}% the "
                f"model cannot tell them apart, and this plan adds {simpler_by(first.parallel, p.parallel)}"
            )
    if quickest.step_s < step and fastest.par != first.parallel:
        shown = next((p.rank for p in plans if p.parallel == fastest.par), None)
        where = f"#{shown}" if shown else f"{describe(fastest.par)}, not shown"
        t = first.estimate.time
        first.why[0] = (
            f"within {100 * (step / quickest.step_s - 1):.1f}% of the fastest of {feasible} feasible plans ({where}, "
            f"which adds {simpler_by(first.parallel, fastest.par)}), with {fewer_words(first.parallel, fastest.par)}: "
            f"{t.tokens_per_s:,.0f} tokens/s, {mfu_words(t.mfu, precision)}"
        )


SIMPLER_POOL = 10  # the fastest plans `_simpler_first` orders, whatever max_plans asks for


def _ranked_pool(training: TrainingSpec) -> int:
    """How many of the fastest plans the search keeps: max_plans, and for throughput at least SIMPLER_POOL, so that
    #1 is the same whatever max_plans is (the deadline search asks for 1 and priced the fastest plan, while POST
    /plans of its request ranked a simpler one first)."""
    return max(training.max_plans, SIMPLER_POOL) if training.objective == "throughput" else training.max_plans


def _simpler_first(ranked: list[tuple[Found, TimeEstimate]]) -> list[tuple[Found, TimeEstimate]]:
    """Among the SIMPLER_POOL fastest, plans within SIMPLER_WITHIN of the fastest (so of every faster plan above
    them too) move above a faster plan when they are simpler (`explain.simplicity`: fewer moving parts, then fewer
    pipeline chunks): differences the model cannot resolve are left to simplicity."""
    out, rest = list(ranked[:SIMPLER_POOL]), ranked[SIMPLER_POOL:]
    near = min((t.step_s for _f, t in out), default=0.0) * (1 + SIMPLER_WITHIN)
    weight = [simplicity(f.par) for f, _t in out]
    moved = True
    while moved:
        moved = False
        for i in range(1, len(out)):
            if weight[i] < weight[i - 1] and out[i][1].step_s <= near:
                out[i - 1], out[i] = out[i], out[i - 1]
                weight[i - 1], weight[i] = weight[i], weight[i - 1]
                moved = True
    return out + rest


HEADROOM_RECOMPUTE_PLANS = 64  # the plans of most headroom whose other recomputation levels the objective tries


def _more_recompute(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    timed: list[tuple[Found, TimeEstimate]],
    bar: float,
) -> list[tuple[Found, TimeEstimate]]:
    """The same layouts under the other recomputation levels that keep less and still step within `bar`. The search
    keeps, per layout, only the fastest level that fits; for the most headroom within 10 % of the fastest, a level
    that recomputes the layer norms for 1 % more time may free gigabytes, and it was never ranked. Tried on the
    HEADROOM_RECOMPUTE_PLANS plans of most headroom only: a pass over the layouts found, not another search."""
    seen = {f.par for f, _t in timed}
    more: list[tuple[Found, TimeEstimate]] = []
    for f, _t in sorted(timed, key=lambda ft: ft[0].peak_bytes)[:HEADROOM_RECOMPUTE_PLANS]:
        par = f.par
        if par.cpu_offloading_num_layers:
            continue  # the offload chain trades copies, not recomputation
        per_chunk = max(1, model.num_layers // (par.pp * par.vpp))
        for level in space.recompute_options(model, training, per_chunk):
            other = space.with_level(par, level)
            if other in seen:
                continue
            seen.add(other)
            est = evaluate(model, cluster, training, other, world_size=f.world)
            if est.feasible and est.time.step_s <= bar and est.memory.peak_bytes < f.peak_bytes:
                more.append((Found(other, f.world, est.memory.peak_bytes, est.time), est.time))
    return more


def _plans(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    ranked: list[tuple[Found, TimeEstimate]],
    feasible: int,
) -> list[Plan]:
    plans: list[Plan] = []
    best: Estimate | None = None
    for rank, (found, timed) in enumerate(ranked, start=1):
        est = evaluate(model, cluster, training, found.par, world_size=found.world, time=timed)
        layout = make_layout(model, cluster, training, found.par)
        plans.append(
            Plan(
                rank=rank,
                parallel=found.par,
                layout=layout,
                estimate=est,
                why=why(
                    found.par,
                    est,
                    best,
                    feasible,
                    cluster.world_size,
                    training.objective,
                    layout.num_microbatches,
                    training.pinned.num_nodes,
                    training.precision,
                ),
                checkpoint=checkpoint_plan(model, cluster, found.world, est.time.step_s, training.optimizer_states),
                decisions=decide(model, cluster, training, found.par, est),
            )
        )
        best = best or est
    return plans


def _rejected(state: SearchState) -> list[RejectedGroup]:
    r = state.rejected
    groups = [
        RejectedGroup(reason=code, message=r.messages[code], count=n, examples=r.examples[code])
        for code, n in r.counts.items()
    ]
    return sorted(groups, key=lambda g: -g.count)


__all__ = ["estimate", "feasible_layouts", "plan"]
