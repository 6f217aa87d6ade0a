"""How the layers go onto the pipeline stages, as each stack runs them.

Even where the count divides; Megatron's first/last-stage layer counts (with or without interleaving, each divisible
by VPP); the embedding and the loss counted as stage work (`--account-for-embedding/loss-in-pipeline-split`) when
that makes the count divide; otherwise a `--pipeline-model-parallel-layout` string with lighter first and last
virtual stages. DeepSpeed's PipelineModule balances any count itself (partition_method), and where the stack lets
it count the embedding specs too (`type:transformer|embedding`), with lighter first and last stages.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.specs import ModelSpec, TrainingSpec


@dataclass(frozen=True, slots=True)
class Split:
    """How the layers go onto the stages (the ParallelConfig fields that say it)."""

    first: int | None = None
    last: int | None = None
    account: bool = False
    layout: str | None = None
    partition: str | None = None  # DeepSpeed PipelineModule partition_method (None: the stack's default)


def split_options(model: ModelSpec, training: TrainingSpec, pp: int, vpp: int) -> list[Split]:
    """Layer splits over pp x vpp virtual stages, as the stack runs them."""
    L = model.num_layers
    S = pp * vpp
    can = training.software.can
    even = L % S == 0
    if pp == 1:
        return [Split()]
    if can.pipeline == "deepspeed":  # PipelineModule balances any count itself
        out = [Split()]
        # counting the two embedding specs as stage work lightens the first and last stages (BLOOM's split)
        if "type:transformer|embedding" in can.partition_methods and _embedding_split_differs(L, pp):
            out.append(Split(partition="type:transformer|embedding"))
        return out
    out = [Split()] if even else []
    if not can.uneven_stages:
        return out
    if (L + 2) % S == 0 and not even:
        out.append(Split(account=True))
    out += _first_last(L, pp, vpp)
    if not out:
        layout = _layout(L, pp, vpp)
        if layout:
            out.append(Split(layout=layout))
    if vpp > 1:
        known = {o.layout for o in out}
        if even:
            known.add(layout_string([L // S] * S))
        if (L + 2) % S == 0 and not even:
            n = (L + 2) // S
            known.add(layout_string([n - 1] + [n] * (S - 2) + [n - 1]))
        out += [Split(layout=x) for x in _lighter_ends(L, pp, vpp, model.mtp_num_layers) if x not in known]
    if model.mtp_num_layers:  # Megatron wants every MTP layer in the layout: with the loss, on the last stage
        mtp = "m" * model.mtp_num_layers
        out = [Split(o.first, o.last, o.account, o.layout[:-1] + mtp + "L") if o.layout else o for o in out]
    return out


def _embedding_split_differs(L: int, pp: int) -> bool:
    """Whether `type:transformer|embedding` puts other layer counts on the stages than `type:transformer`, every
    stage keeping a layer (DeepSpeed's PipelineEngine fails on a stage without one)."""
    base, rem = divmod(L + 2, pp)
    with_embedding = [base + (1 if i < rem else 0) for i in range(pp)]
    with_embedding[0] -= 1
    with_embedding[-1] -= 1
    base, rem = divmod(L, pp)
    return min(with_embedding) > 0 and with_embedding != [base + (1 if i < rem else 0) for i in range(pp)]


def _first_last(L: int, pp: int, vpp: int) -> list[Split]:
    """Megatron's first/last-stage counts: lighter ends (the first stage holds the embedding and the most in-flight
    micro-batches, the last the logits), each and every middle stage a multiple of vpp."""
    out = []
    base = L // pp
    for first in range(max(vpp, base - 2 * vpp), base + 1, vpp):
        for last in range(max(vpp, base - 3 * vpp), base + 1, vpp):
            rest = L - first - last
            middle = pp - 2
            if middle == 0:
                ok = rest == 0
            else:
                ok = (
                    rest > 0
                    and rest % middle == 0
                    and (rest // middle) % vpp == 0
                    and rest // middle >= max(first, last)
                )
            if ok and not (first == last == base and L % pp == 0):
                out.append(Split(first=first, last=last))
    return out[:4]


def _layout(L: int, pp: int, vpp: int) -> str | None:
    """A layout string for counts nothing else splits: the first virtual stage holds the embedding and `a`
    layers, the last `b` layers and the loss, the S - 2 between `n` each (pipeline_parallel_layer_layout.py)."""
    S = pp * vpp
    if S < 3:
        return None
    for n in range(max(1, L // (S - 2)), 0, -1):
        rest = L - n * (S - 2)
        for a in range(min(n, rest), -1, -1):
            b = rest - a
            if 0 <= b <= n:
                middle = f"(t*{n}|)*{S - 2}" if n > 1 else f"(t|)*{S - 2}"
                first = "E" + (f"t*{a}" if a > 1 else "t" * a)
                last = (f"t*{b}" if b > 1 else "t" * b) + "L"
                return f"{first}|{middle}{last}"
    return None


def _lighter_ends(L: int, pp: int, vpp: int, mtp: int = 0) -> list[str]:
    """Layout strings with interleaving whose first virtual stage (with the embedding) and last (with the loss)
    hold `k_E` and `k_L` layers fewer than the others, the difference spread one layer each over middle ranks,
    evenly spaced, in their last chunk: NVIDIA's hand-written layouts (Llama-3 70B PP8 x VP5: `Et*2|...,t*3|...
    tL`; Kimi-K2 and DeepSeek-V3 PP16 x VP2 and PP8 x VP4: `Et|(tt|)*30L`). With `mtp` MTP layers beside the
    loss, the last virtual stage also gives up one or two layers per MTP layer (a transformer layer and its own
    logits: DeepSeek-V3 on B200/GB200, `Et*4|(t*4|)*14,tmL`)."""
    S = pp * vpp
    options = []
    ends = [(0, 1), (1, 1), (1, 2)]
    ends += [(k_e, 1 + n * mtp) for n in (1, 2) for k_e in (0, 1)] if mtp else []
    for c in sorted({L // S, -(-L // S)}):
        for k_e, k_l in ends:
            rest = L - (c * S - k_e - k_l)
            if c >= max(k_e, k_l, 1) and abs(rest) <= pp - 2:
                options.append((abs(rest), c, k_e, k_l, rest))
    out: list[str] = []
    fewest = min((o[0] for o in options), default=0)
    for _moved, c, k_e, k_l, rest in options:
        if _moved == fewest:  # the most balanced: the fewest layers moved onto middle ranks
            counts = [c] * S
            counts[0] -= k_e
            counts[-1] -= k_l
            for i in range(abs(rest)):
                rank = min(max((i + 1) * pp // (abs(rest) + 1) - 1, 1), pp - 2)
                counts[(vpp - 1) * pp + rank] += 1 if rest > 0 else -1
            text = layout_string(counts)
            if min(counts[1:-1]) >= 1 and sum(counts) == L and text not in out:
                out.append(text)
    return out


def layout_string(counts: list[int]) -> str:
    """Megatron's --pipeline-model-parallel-layout for per-virtual-stage layer counts: E first, L last, runs of
    equal stages folded (`(t*2|)*34`)."""

    def chunk(n: int) -> str:
        return f"t*{n}" if n > 1 else "t" * n

    middle = [chunk(n) for n in counts[1:-1]]
    parts: list[str] = []
    i = 0
    while i < len(middle):
        j = i
        while j < len(middle) and middle[j] == middle[i]:
            j += 1
        parts.append(f"({middle[i]}|)*{j - i}" if j - i > 1 else f"{middle[i]}|")
        i = j
    return f"E{chunk(counts[0])}|{''.join(parts)}{chunk(counts[-1])}L"
