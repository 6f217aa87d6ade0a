"""Pipeline schedules to draw: Megatron-LM's 1F1B and interleaved 1F1B, simulated op by op.

Each GPU runs its forward (F) and backward (B) passes in the order Megatron's schedules give them
(megatron/core/pipeline_parallel/schedules.py: forward_backward_pipelining_without_interleaving and
..._with_interleaving); an op starts when its GPU is free and its input has arrived (F of the previous virtual
stage, B of the next one). Idle time between ops is the pipeline bubble.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Op:
    stage: int  # pipeline rank (GPU row)
    kind: str  # "F" or "B"
    microbatch: int
    chunk: int  # model chunk on this rank (interleaving), 0 without
    start: float
    end: float


def _order(stage: int, pp: int, vpp: int, m: int) -> list[tuple[str, int, int]]:
    """(kind, microbatch, chunk) in the order stage `stage` runs them."""
    total = m * vpp

    def fwd(k: int) -> tuple[str, int, int]:
        return "F", (k // (pp * vpp)) * pp + k % pp, (k // pp) % vpp

    def bwd(k: int) -> tuple[str, int, int]:
        return "B", (k // (pp * vpp)) * pp + k % pp, vpp - 1 - (k // pp) % vpp

    # warm-up forwards before the first backward (schedules.py: num_warmup_microbatches)
    warmup = min(pp - stage - 1, m) if vpp == 1 else min((pp - stage - 1) * 2 + (vpp - 1) * pp, total)
    order = [fwd(k) for k in range(warmup)]
    for i in range(total - warmup):
        order += [fwd(warmup + i), bwd(i)]
    order += [bwd(k) for k in range(total - warmup, total)]
    return order


def simulate(pp: int, vpp: int, m: int, f: float = 1.0, b: float = 2.0) -> list[Op]:
    """Every op of one step. `f`, `b`: forward and backward time of one micro-batch through a whole stage
    (a chunk takes 1/vpp of it). Interleaving needs m % pp == 0, as in Megatron."""
    if vpp > 1 and m % pp:
        raise ValueError(f"interleaved schedule needs num_microbatches({m}) % pp({pp}) == 0")
    orders = [_order(s, pp, vpp, m) for s in range(pp)]
    pos, free = [0] * pp, [0.0] * pp
    done: dict[tuple[str, int, int], float] = {}  # (kind, virtual stage, microbatch) -> end time
    last_v = pp * vpp - 1
    ops: list[Op] = []
    while any(pos[s] < len(orders[s]) for s in range(pp)):
        progressed = False
        for s in range(pp):
            if pos[s] == len(orders[s]):
                continue
            kind, mb, chunk = orders[s][pos[s]]
            v = chunk * pp + s
            dep = ("F", v - 1, mb) if kind == "F" else (("B", v + 1, mb) if v < last_v else ("F", v, mb))
            if kind == "F" and v == 0:
                ready: float | None = 0.0
            else:
                ready = done.get(dep)
            if ready is None:
                continue
            start = max(free[s], ready)
            end = start + (f if kind == "F" else b) / vpp
            done[(kind, v, mb)] = end
            free[s] = end
            ops.append(Op(s, kind, mb, chunk, start, end))
            pos[s] += 1
            progressed = True
        if not progressed:
            raise RuntimeError(f"schedule deadlock: pp={pp} vpp={vpp} m={m}")
    return ops


def idle_fraction(ops: list[Op], pp: int) -> float:
    """Share of GPU time spent waiting, over all stages (the drawn bubble)."""
    makespan = max(op.end for op in ops)
    busy = sum(op.end - op.start for op in ops)
    return 1 - busy / (pp * makespan)
