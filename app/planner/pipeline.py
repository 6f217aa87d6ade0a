"""Pipeline schedules: micro-batches in flight per stage, the step's pipeline time and its bubble.

One module for every consumer (memory, step time, the renderer's notes, the web schedule chart); the schedule is
`ParallelConfig.schedule` (1f1b, interleaved; room for zero-bubble and DualPipe schedules as further values).

- 1F1B (Narayanan et al. 2021, sec. 2.2.1): stage r holds `min(p - r, m)` micro-batches of activations at its peak;
  a step takes `m x t_max + (p - 1) x t_avg` (fill and drain of the slowest-first pipeline).
- Interleaved 1F1B (sec. 2.2.2): each rank runs v model chunks of 1/v of its layers; Megatron's warm-up is
  `(p - r - 1) x 2 + (v - 1) x p` chunk forwards plus the one in flight (schedules.py get_pp_rank_microbatches),
  so rank 0 holds `1 + (p - 1)/(p v)` times the 1F1B activations; the bubble shrinks to `(p - 1) x t_avg / v`.
  With `--overlap-moe-expert-parallel-comm` the warm-up runs one forward more (the same function).
- Which chunks those in-flight forwards belong to matters when a rank's chunks are not alike (the embedding or the
  loss counted as a pipeline unit, a layout string): `live_chunks` replays Megatron's order (forwards through
  `get_schedule_table`, backwards through the same table with the chunks reversed, one backward after each
  steady-state forward) and returns the live forwards per chunk at every point where the peak can fall.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from app.planner.specs import ParallelConfig


def in_flight(par: ParallelConfig, stage: int, microbatches: int) -> float:
    """Micro-batches of activations stage `stage` holds at its peak, in units of the stage's full layer set (exact
    when the rank's chunks are alike; `live_chunks` says which chunks they are)."""
    p, v, m = par.pp, par.vpp, microbatches
    if p == 1:
        return 1.0
    if par.schedule == "1f1b":
        return float(min(p - stage, m))
    return min(warmup_forwards(par, stage, m) + 1, m * v) / v


def warmup_forwards(par: ParallelConfig, stage: int, microbatches: int) -> int:
    """Chunk forwards rank `stage` runs before its first backward (megatron/core/pipeline_parallel/schedules.py
    get_pp_rank_microbatches); all of them when that is every forward of the step."""
    p, v, m = par.pp, par.vpp, microbatches
    if v == 1:
        return min(m, p - stage - 1)
    warm = (p - stage - 1) * 2 + (v - 1) * p + (1 if par.moe_ep_overlap else 0)
    return min(warm, m * v)


def unpaired_share(par: ParallelConfig, stage: int, microbatches: int) -> float:
    """Of rank `stage`'s forward (and, alike, backward) chunk passes, the share that combined 1F1B
    (`--overlap-moe-expert-parallel-comm`) cannot pair with another micro-batch's opposite pass: the warm-up forwards
    and as many cool-down backwards (megatron/core/pipeline_parallel/combined_1f1b.py: without a pipeline the
    first forward and the last backward run alone, "no a2a overlapping"). Their EP all-to-all is exposed
    (step.stage_time)."""
    if not par.moe_ep_overlap:
        return 0.0
    return alone_passes(par.pp, par.vpp, stage, microbatches) / (microbatches * par.vpp)


def alone_passes(p: int, v: int, stage: int, microbatches: int) -> int:
    """Chunk forwards that combined 1F1B runs alone on rank `stage` (`unpaired_share`): its warm-up, which holds one
    forward more than the plain schedule's (`warmup_forwards`), all of them when that is every forward of the step."""
    m = microbatches
    warm = (p - stage - 1) * 2 + (v - 1) * p if v > 1 else min(m, p - stage - 1)
    return min(warm + 1, m * v)


def pairs_none(p: int, v: int, microbatches: int) -> bool:
    """Combined 1F1B would pair none of the first rank's chunk passes: its warm-up holds every forward of the step
    (`alone_passes`), so the overlap could only keep one more micro-batch's activations."""
    return alone_passes(p, v, 0, microbatches) >= microbatches * v


def live_chunks(par: ParallelConfig, stage: int, microbatches: int) -> tuple[tuple[int, ...], ...]:
    """Live forwards per chunk on rank `stage` at each point where its activations can peak (right after a
    forward), keeping only the points no other point exceeds in every chunk. One chunk: `(in_flight,)`."""
    p, v, m = par.pp, par.vpp, microbatches
    if p == 1 or v == 1 or par.schedule == "1f1b":
        return ((round(in_flight(par, stage, m)),),)
    return _live_chunks(v, m, p, warmup_forwards(par, stage, m))


@functools.lru_cache(maxsize=4096)
def _live_chunks(v: int, m: int, group: int, warm: int) -> tuple[tuple[int, ...], ...]:
    live, points, forwards = [0] * v, set(), 0
    for kind, _, chunk in _order(m, v, group, warm):
        if kind == "B":
            live[chunk] -= 1
            continue
        live[chunk] += 1
        forwards += 1
        if forwards > warm or forwards == m * v:  # the peak falls right after a forward past the warm-up
            points.add(tuple(live))
    return _maximal(points)


def _maximal(points: set[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
    """The points no other point exceeds or equals in every coordinate, sorted."""
    return tuple(sorted(a for a in points if not any(b != a and _covers(b, a) for b in points)))


def _covers(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """`a` holds at least as many forwards as `b` in every chunk."""
    return all(x >= y for x, y in zip(a, b, strict=True))


def _order(m: int, v: int, group: int, warm: int) -> Iterator[tuple[str, int, int]]:
    """(F|B, micro-batch, chunk) in the order one rank runs them: `warm` forwards, then a forward and a backward at a
    time, then the remaining backwards."""
    table = schedule_table(m, v, group)
    yield from (("F", *table[k]) for k in range(warm))
    for b, (mb, chunk) in enumerate(table):
        if warm + b < len(table):
            yield ("F", *table[warm + b])
        yield ("B", mb, v - 1 - chunk)


@functools.lru_cache(maxsize=1024)
def schedule_table(microbatches: int, chunks: int, group: int) -> tuple[tuple[int, int], ...]:
    """The (micro-batch, chunk) of each forward in the order a rank runs them: micro-batches through the chunks
    in groups of `group` (microbatch_group_size_per_vp_stage, default p), the last group taking what is left
    (schedules.py get_schedule_table); the k-th backward runs entry k with chunk `chunks - 1 - chunk`."""
    out: list[tuple[int, int]] = []
    for first in range(0, microbatches, group):
        last = microbatches if first + group >= microbatches else first + group
        out.extend((mb, chunk) for chunk in range(chunks) for mb in range(first, last))
    return tuple(out)


def peak_live(par: ParallelConfig, stage: int, microbatches: int, chunk_bytes: list[float]) -> float:
    """The most bytes rank `stage` holds in in-flight forwards, given what one forward of each of its chunks keeps.
    Chunks that keep alike are counted together, so alike chunks cost one multiplication (the search asks this for
    every candidate's every distinct stage)."""
    p, v, m = par.pp, par.vpp, microbatches
    if p == 1 or v == 1 or par.schedule == "1f1b" or len(chunk_bytes) != v:
        return in_flight(par, stage, m) * sum(chunk_bytes)  # one chunk
    values: dict[float, int] = {}
    groups = tuple(values.setdefault(b, len(values)) for b in chunk_bytes)
    if len(values) == 1:
        return in_flight(par, stage, m) * sum(chunk_bytes)  # all alike
    weights = list(values)
    return max(
        sum(n * w for n, w in zip(point, weights, strict=True))
        for point in _grouped_points(v, m, p, warmup_forwards(par, stage, m), groups)
    )


@functools.lru_cache(maxsize=4096)
def _grouped_points(v: int, m: int, group: int, warm: int, groups: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """`_live_chunks` summed over the chunks of each group, keeping the points no other exceeds in every group."""
    sums = {
        tuple(sum(n for n, g in zip(point, groups, strict=True) if g == k) for k in range(max(groups) + 1))
        for point in _live_chunks(v, m, group, warm)
    }
    return _maximal(sums)


class PipelineTime(NamedTuple):
    """A named tuple, not a frozen dataclass: the search makes thousands per request, and a tuple is made at a
    fraction of the cost."""

    total_s: float  # the pipeline part of a step: all micro-batches through all stages
    bubble_s: float  # fill and drain on top of the busiest stage's work
    busiest: int  # index (in the caller's list) of the stage group that sets the pace


def pipeline_time(stage_s: Sequence[tuple[float, int]], par: ParallelConfig, microbatches: int) -> PipelineTime:
    """From (one micro-batch's forward + backward seconds on a stage, number of such stages): the busiest stage
    runs `m` micro-batches back to back; fill and drain add `(p - 1) x t_avg / v`."""
    busiest, t_max = 0, stage_s[0][0]
    for i in range(1, len(stage_s)):  # the first of the slowest, as max() would pick
        if stage_s[i][0] > t_max:
            busiest, t_max = i, stage_s[i][0]
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
    return [list(_order(m, v, p, warmup_forwards(par, rank, m))) for rank in range(p)]
