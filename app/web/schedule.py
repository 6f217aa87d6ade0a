"""A plan's pipeline schedule, op by op, for the chart: the order of each rank's forward (F) and backward (B) passes
is the planner's own (app/planner/pipeline.py schedule_slots, Megatron's 1F1B and interleaved 1F1B), and each stage
takes its own time (app/planner/step.py stage_time over the plan's stage shapes), so uneven stages are drawn uneven.

An op starts when its GPU is free and its input has arrived (F of the previous virtual stage, B of the next one);
idle time between ops is the pipeline bubble.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.layout import stage_layer_kinds, stage_shapes
from app.planner.pipeline import alone_passes, in_flight, schedule_slots
from app.planner.results import Plan
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.step import stage_time, unpaired_ep


@dataclass(frozen=True)
class Op:
    stage: int  # pipeline rank (GPU row)
    kind: str  # "F" or "B"
    microbatch: int
    chunk: int  # model chunk on this rank (interleaving), 0 without
    start: float
    end: float


@dataclass(frozen=True)
class StageTiming:
    """One micro-batch on one pipeline rank: forward and backward seconds, split over its model chunks by their
    layers, and the micro-batches of activations it holds at its peak."""

    forward_s: float
    backward_s: float
    chunk_share: tuple[float, ...]  # fraction of the rank's time in each chunk (sums to 1)
    in_flight: float
    layers: int
    # what a forward and a backward of one micro-batch take longer when combined 1F1B runs them alone: their EP
    # all-to-all exposed (the warm-up forwards and as many cool-down backwards, pipeline.alone_passes)
    alone_s: tuple[float, float] = (0.0, 0.0)


def stage_timing(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, plan: Plan) -> list[StageTiming]:
    """Each rank's own times from the planner's cost model (the same stage_time the step estimate sums)."""
    par = plan.parallel
    shapes = stage_shapes(model, training, par)
    kinds = stage_layer_kinds(model, training, par)
    out = []
    for rank, (shape, (dense, moe)) in enumerate(zip(shapes, kinds, strict=True)):
        t = stage_time(model, cluster, training, par, shape, dense, moe)  # every pass paired
        alone = unpaired_ep(model, cluster, training, par, moe, 1.0)  # the all-to-all paired passes hide
        split = t.fwd + t.bwd
        forward = t.total * t.fwd / split if split > 0 else t.total / 3
        layers = max(1, shape.layers)
        share = (
            tuple(c / layers for c in shape.chunks)
            if shape.layers
            else tuple(1 / len(shape.chunks) for _ in shape.chunks)
        )
        m = plan.layout.num_microbatches
        out.append(
            StageTiming(
                forward, t.total - forward, share, in_flight(par, rank, m), shape.layers, (alone / 2, alone / 2)
            )
        )
    return out


def simulate(par: ParallelConfig, microbatches: int, timing: list[StageTiming]) -> list[Op]:
    """Every op of one step of `microbatches` micro-batches. Interleaving needs microbatches % pp == 0."""
    pp, vpp = par.pp, par.vpp
    if vpp > 1 and microbatches % pp:
        raise ValueError(f"interleaved schedule needs num_microbatches({microbatches}) % pp({pp}) == 0")
    if len(timing) != pp:
        raise ValueError(f"{len(timing)} stage timings for pp({pp}) stages")
    orders = schedule_slots(par, microbatches)
    alone = [alone_passes(pp, vpp, s, microbatches) if par.moe_ep_overlap else 0 for s in range(pp)]
    runs = [{"F": 0, "B": 0} for _ in range(pp)]  # forwards and backwards each rank has run
    pos, free = [0] * pp, [0.0] * pp
    done: dict[tuple[str, int, int], float] = {}  # (kind, virtual stage, microbatch) -> end time
    last_v = pp * vpp - 1
    ops: list[Op] = []
    while any(pos[s] < len(orders[s]) for s in range(pp)):
        progressed = False
        for s in range(pp):
            while pos[s] < len(orders[s]):  # run this rank as far as its inputs allow (times do not depend on when)
                kind, mb, chunk = orders[s][pos[s]]
                v = chunk * pp + s
                dep = ("F", v - 1, mb) if kind == "F" else (("B", v + 1, mb) if v < last_v else ("F", v, mb))
                ready = 0.0 if kind == "F" and v == 0 else done.get(dep)
                if ready is None:
                    break
                start = max(free[s], ready)
                t = timing[s]
                share = t.chunk_share[chunk] if chunk < len(t.chunk_share) else 1 / vpp
                seconds = t.forward_s if kind == "F" else t.backward_s
                n = runs[s][kind]
                warm_up, cool_down = kind == "F" and n < alone[s], kind == "B" and n >= microbatches * vpp - alone[s]
                if warm_up or cool_down:  # combined 1F1B runs it alone: its all-to-all is exposed
                    seconds += t.alone_s[0 if warm_up else 1]
                runs[s][kind] = n + 1
                end = start + seconds * share
                done[(kind, v, mb)] = end
                free[s] = end
                ops.append(Op(s, kind, mb, chunk, start, end))
                pos[s] += 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"schedule deadlock: pp={pp} vpp={vpp} m={microbatches}")
    return ops


def idle_fraction(ops: list[Op], pp: int) -> float:
    """Share of GPU time spent waiting, over all stages (the drawn bubble)."""
    makespan = max(op.end for op in ops)
    busy = sum(op.end - op.start for op in ops)
    return 1 - busy / (pp * makespan)
