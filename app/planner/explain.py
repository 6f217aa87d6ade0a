"""Short reasons for a plan's rank, and what would fit when nothing does."""

from __future__ import annotations

from app.planner.results import Estimate
from app.planner.specs import ParallelConfig

GiB = 2**30


def describe(par: ParallelConfig) -> str:
    parts = [f"TP{par.tp}", f"PP{par.pp}"]
    if par.vpp > 1:
        parts.append(f"VPP{par.vpp}")
    if par.first_stage_layers is not None or par.last_stage_layers is not None:
        parts.append(f"layers {par.first_stage_layers or '='}/../{par.last_stage_layers or '='}")
    parts.append(f"DP{par.dp}")
    if par.cp > 1:
        parts.append(f"CP{par.cp}")
    if par.ep > 1:
        parts.append(f"EP{par.ep}")
    if par.zero_stage:
        parts.append(f"ZeRO-{par.zero_stage}")
    if par.distributed_optimizer:
        parts.append("dist-opt")
    if par.offload_optimizer != "none":
        parts.append(f"opt->{par.offload_optimizer}")
    if par.offload_param != "none":
        parts.append(f"param->{par.offload_param}")
    if par.sequence_parallel:
        parts.append("SP")
    parts.append(f"mbs{par.micro_batch_size}")
    if par.recompute != "none":
        parts.append(f"recompute={par.recompute}")
    return " ".join(parts)


def why(par: ParallelConfig, est: Estimate, best: Estimate | None, feasible_count: int) -> list[str]:
    t, mem = est.time, est.memory
    b = t.breakdown
    step = t.step_s
    comm = {k[:-7].upper(): v for k, v in b.items() if k.endswith("_comm_s") and v > 0}
    exposed = sum(comm.values())
    lines = []
    if best is None:
        lines.append(
            f"fastest of {feasible_count} feasible plans: {t.tokens_per_s:,.0f} tokens/s, MFU {100 * t.mfu:.1f}%"
        )
    else:
        slower = 100 * (step / best.time.step_s - 1)
        lines.append(f"{slower:.1f}% slower than #1 ({t.tokens_per_s:,.0f} tokens/s, MFU {100 * t.mfu:.1f}%)")
    if par.pp > 1:
        lines.append(
            f"pipeline bubble {100 * t.bubble_fraction:.1f}% of the step (PP{par.pp}"
            f"{f' x VPP{par.vpp}' if par.vpp > 1 else ''})"
        )
    if exposed > 0:
        detail = ", ".join(f"{k} {100 * v / step:.1f}%" for k, v in sorted(comm.items(), key=lambda kv: -kv[1]))
        lines.append(f"exposed communication {100 * exposed / step:.1f}% ({detail})")
    if b.get("recompute_s", 0) > 0:
        lines.append(f"recomputation {100 * b['recompute_s'] / step:.1f}% of the step ({par.recompute})")
    if b.get("offload_s", 0) > 0:
        lines.append(f"offloaded optimizer step {100 * b['offload_s'] / step:.1f}% of the step")
    peak = mem.stages[mem.peak_stage]
    lines.append(
        f"memory {mem.peak_bytes / GiB:.1f} of {mem.capacity_bytes / GiB:.1f} GiB on stage {peak.stage} "
        f"(headroom {100 * mem.headroom_fraction:.0f}%)"
    )
    return lines
