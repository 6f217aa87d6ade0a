"""Pipeline schedules: micro-batches in flight per stage, the step's pipeline time and its bubble.

One module for every consumer (memory, step time, the renderer's notes, the web schedule chart); the schedule is
`ParallelConfig.schedule` (1f1b, interleaved; room for zero-bubble and DualPipe schedules as further values).

- 1F1B (Narayanan et al. 2021, sec. 2.2.1): stage r holds `min(p - r, m)` micro-batches of activations at its peak;
  a step takes `m x t_max + (p - 1) x t_avg` (fill and drain of the slowest-first pipeline).
- Interleaved 1F1B (sec. 2.2.2): each rank runs v model chunks of 1/v of its layers; Megatron's warm-up is
  `(p - r - 1) x 2 + (v - 1) x p` chunk forwards plus the one in flight (schedules.py get_pp_rank_microbatches),
  so rank 0 holds `1 + (p - 1)/(p v)` times the 1F1B activations; the bubble shrinks to `(p - 1) x t_avg / v`.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.specs import ParallelConfig


def in_flight(par: ParallelConfig, stage: int, microbatches: int) -> float:
    """Micro-batches of activations stage `stage` holds at its peak, in units of the stage's full layer set."""
    p, v, m = par.pp, par.vpp, microbatches
    if p == 1:
        return 1.0
    if par.schedule == "1f1b":
        return float(min(p - stage, m))
    chunks = min((p - stage - 1) * 2 + (v - 1) * p + 1, m * v)
    return chunks / v


@dataclass(frozen=True, slots=True)
class PipelineTime:
    total_s: float  # the pipeline part of a step: all micro-batches through all stages
    bubble_s: float  # fill and drain on top of the busiest stage's work
    busiest: int  # index (in the caller's list) of the stage group that sets the pace


def pipeline_time(stage_s: list[tuple[float, int]], par: ParallelConfig, microbatches: int) -> PipelineTime:
    """From (one micro-batch's forward + backward seconds on a stage, number of such stages): the busiest stage
    runs `m` micro-batches back to back; fill and drain add `(p - 1) x t_avg / v`."""
    busiest = max(range(len(stage_s)), key=lambda i: stage_s[i][0])
    t_max = stage_s[busiest][0]
    if par.pp == 1:
        return PipelineTime(microbatches * t_max, 0.0, busiest)
    t_avg = sum(t * n for t, n in stage_s) / par.pp
    bubble = (par.pp - 1) * t_avg / par.vpp
    return PipelineTime(microbatches * t_max + bubble, bubble, busiest)


def bubble_fraction(par: ParallelConfig, microbatches: int) -> float:
    """The ideal bubble of equal stages, `(p - 1) / (v m)` of the useful time (Narayanan et al. eq. 1 and 2)."""
    return (par.pp - 1) / (par.vpp * microbatches) if par.pp > 1 else 0.0


def schedule_slots(par: ParallelConfig, microbatches: int) -> list[list[tuple[str, int, int]]]:
    """Per rank, the order of (F|B, micro-batch, chunk) the schedule runs: warm-up forwards, steady 1F1B pairs,
    cool-down backwards (Megatron's forward_backward_pipelining_with/without_interleaving). For charts."""
    p, v, m = par.pp, par.vpp, microbatches
    out: list[list[tuple[str, int, int]]] = []
    total = m * v
    for rank in range(p):
        warm = min(total, (p - rank - 1) * 2 + (v - 1) * p) if v > 1 else min(m, p - rank - 1)
        fwd = [_chunk_of(k, p, v) for k in range(total)]
        bwd = [_chunk_of(k, p, v, backward=True) for k in range(total)]
        order: list[tuple[str, int, int]] = [("F", *fwd[k]) for k in range(warm)]
        f, b = warm, 0
        while b < total:
            if f < total:
                order.append(("F", *fwd[f]))
                f += 1
            order.append(("B", *bwd[b]))
            b += 1
        out.append(order)
    return out


def _chunk_of(k: int, p: int, v: int, backward: bool = False) -> tuple[int, int]:
    """The (micro-batch, chunk) of the k-th forward (or backward) on a rank: micro-batches go through the chunks
    in groups of p (Megatron's microbatch_group_size_per_vp_stage = p)."""
    if v == 1:
        return k, 0
    group, within = divmod(k, p * v)
    chunk = within // p
    return group * p + within % p, (v - 1 - chunk) if backward else chunk
