"""The search: flat candidate generators, named pruning rules, ranking by the objective.

Candidates are the product of small generators (TP that divides the heads and stays in the NVLink domain,
CP for long sequences, PP that divides the layers, DP that follows, EP that divides the experts, VPP that divides
the stage, micro-batch sizes that divide the per-replica batch, the sharding options of the framework). Each is
checked against the rules (rules.py) and against memory; for every placement only the cheapest recomputation that
fits is timed, since more recomputation only adds work. Rejected candidates keep their reason.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.planner import rules
from app.planner.memory import peak_memory
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec

MAX_MICRO_BATCH = 32
MAX_MICROBATCH_TOKENS = 262_144  # no micro-batch larger than this many tokens per GPU is worth timing
RECOMPUTE_ORDER = ("none", "selective", "full")


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def tp_options(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> list[int]:
    pinned = training.pinned.tp
    if pinned:
        return [pinned]
    if training.framework == "deepspeed":
        return [1]
    domain = min(cluster.gpus_per_node, cluster.nvlink_domain)
    limit = 2 * cluster.gpus_per_node if training.allow_tp_across_nodes else domain
    return [t for t in divisors(limit) if model.num_attention_heads % t == 0]


def cp_options(model: ModelSpec, training: TrainingSpec, rest: int) -> list[int]:
    """Context parallelism only pays for long sequences (Megatron only); powers of two."""
    if training.pinned.cp:
        return [training.pinned.cp]
    if training.framework != "megatron" or model.seq_length < 16384 or not training.flash_attention:
        return [1]
    return [c for c in (1, 2, 4, 8, 16, 32) if rest % c == 0 and model.seq_length % (2 * c) == 0]


def pp_options(model: ModelSpec, training: TrainingSpec, rest: int) -> list[int]:
    """Any PP up to the layer count: Megatron splits unevenly with first/last-stage layer counts
    (stage_split_options), DeepSpeed's PipelineModule balances layers itself."""
    if training.pinned.pp:
        return [training.pinned.pp]
    if training.framework == "deepspeed":
        return [1]  # the plain engine runs no pipeline (rules.model_fits_framework)
    return [p for p in divisors(rest) if p <= model.num_layers]


def stage_split_options(
    model: ModelSpec, training: TrainingSpec, pp: int, vpp: int
) -> list[tuple[int | None, int | None]]:
    """Layer split over the stages: even, and for Megatron (without interleaving) first/last stages with fewer
    layers (--decoder-first/last-pipeline-num-layers), which balances the first stage's extra in-flight
    activations and embedding and the last stage's output layer and logits."""
    L = model.num_layers
    even: list[tuple[int | None, int | None]] = [(None, None)] if L % pp == 0 else []
    if pp == 1 or vpp > 1 or training.framework != "megatron":
        return even
    base = L // pp
    out = list(even)
    for first in range(max(1, base - 2), base + 1):
        for last in range(max(1, base - 3), base + 1):
            rest = L - first - last
            ok = rest == 0 if pp == 2 else rest > 0 and rest % (pp - 2) == 0 and rest // (pp - 2) >= max(first, last)
            if ok and not (first == last == base and L % pp == 0):
                out.append((first, last))
    return out


def etp_options(model: ModelSpec, training: TrainingSpec, tp: int) -> list[int | None]:
    """Expert tensor parallelism: Megatron's default (= TP) or none (ETP 1), the common MoE choice."""
    if not model.is_moe or tp == 1 or training.framework != "megatron":
        return [None]
    return [None, 1]


def vpp_options(model: ModelSpec, training: TrainingSpec, pp: int) -> list[int]:
    if training.pinned.vpp:
        return [training.pinned.vpp]
    if pp == 1 or training.framework != "megatron":
        return [1]
    per_stage = model.num_layers // pp
    interleaved = [v for v in (2, 3, 4, 6, 8) if v <= per_stage and per_stage % v == 0]
    return [1, *interleaved[:2], *interleaved[-1:]] if len(interleaved) > 3 else [1, *interleaved]


def ep_options(model: ModelSpec, training: TrainingSpec, plane: int) -> list[int]:
    if training.pinned.ep:
        return [training.pinned.ep]
    if not model.is_moe or training.framework != "megatron":
        return [1]
    experts = model.num_experts or 1
    return [e for e in divisors(experts) if plane % e == 0 and e <= 64]


def mbs_options(model: ModelSpec, training: TrainingSpec, per_replica: int, cp: int) -> list[int]:
    if training.pinned.micro_batch_size:
        return [training.pinned.micro_batch_size]
    cap = max(1, MAX_MICROBATCH_TOKENS * cp // model.seq_length)
    return [b for b in divisors(per_replica) if b <= min(MAX_MICRO_BATCH, cap)]


def sharding_options(training: TrainingSpec, dp: int, cp: int, pp: int, offload: bool) -> list[dict[str, object]]:
    """Optimizer sharding (and offload) choices the framework offers for this placement."""
    pins = training.pinned
    if training.framework == "megatron":
        # The distributed optimizer shards optimizer state over DP x CP at the same communication volume as the
        # all-reduce it replaces (reduce-scatter + all-gather): with DP x CP > 1 it is always taken.
        options = [dp * cp > 1]
        if pins.distributed_optimizer is not None:
            options = [pins.distributed_optimizer]
        return [{"distributed_optimizer": d} for d in options]
    stages = [1] if pp > 1 else [1, 2, 3]
    if pins.zero_stage is not None:
        stages = [pins.zero_stage]
    out: list[dict[str, object]] = []
    for stage in stages:
        offloads = [("none", "none")]
        if offload and stage >= 1:
            offloads.append(("cpu", "none"))
        if offload and stage == 3:
            offloads += [("cpu", "cpu"), ("nvme", "nvme")]
        for opt, param in offloads:
            if pins.offload_optimizer not in (None, opt) or pins.offload_param not in (None, param):
                continue
            out.append({"zero_stage": stage, "offload_optimizer": opt, "offload_param": param})
    return out


def recompute_options(training: TrainingSpec) -> tuple[str, ...]:
    if training.pinned.recompute:
        return (training.pinned.recompute,)
    # With flash attention there are no s x s scores: selective recomputation saves nothing.
    return ("none", "full") if training.flash_attention else RECOMPUTE_ORDER


@dataclass
class Placement:
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    vpp: int
    etp: int | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None


def placements(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, world: int) -> Iterator[Placement]:
    for tp in tp_options(model, cluster, training):
        if world % tp:
            continue
        for cp in cp_options(model, training, world // tp):
            for pp in pp_options(model, training, world // (tp * cp)):
                if (world // (tp * cp)) % pp:
                    continue
                dp = world // (tp * cp * pp)
                if training.pinned.dp and dp != training.pinned.dp:
                    continue
                for ep, vpp, etp in itertools.product(
                    ep_options(model, training, tp * cp * dp),
                    vpp_options(model, training, pp),
                    etp_options(model, training, tp),
                ):
                    for first, last in stage_split_options(model, training, pp, vpp):
                        yield Placement(tp, cp, pp, dp, ep, vpp, etp, first, last)


@dataclass
class Rejections:
    """Rejected candidates by reason; each reason keeps the message of its closest miss (smallest `score`)."""

    counts: dict[str, int] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    examples: dict[str, list[ParallelConfig]] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)

    def add(self, code: str, message: str, par: ParallelConfig, score: float = 0.0) -> None:
        self.counts[code] = self.counts.get(code, 0) + 1
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


@dataclass
class SearchState:
    rejected: Rejections = field(default_factory=Rejections)
    found: list[Found] = field(default_factory=list)
    candidates: int = 0
    evaluated: int = 0
    truncated: bool = False


def _config(
    pl: Placement, mbs: int, recompute: str, sharding: dict[str, object], training: TrainingSpec
) -> ParallelConfig:
    sp = pl.tp > 1 and training.framework != "deepspeed"
    if training.pinned.sequence_parallel is not None:
        sp = training.pinned.sequence_parallel
    fields = dict(
        tp=pl.tp,
        pp=pl.pp,
        vpp=pl.vpp,
        dp=pl.dp,
        cp=pl.cp,
        ep=pl.ep,
        etp=pl.etp,
        micro_batch_size=mbs,
        recompute=recompute,
        sequence_parallel=sp,
        first_stage_layers=pl.first_stage_layers,
        last_stage_layers=pl.last_stage_layers,
        **sharding,
    )
    return ParallelConfig(**fields)  # type: ignore[arg-type]


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
    usable = cluster.gpu.memory_bytes * (1 - training.memory_headroom)
    host = cluster.cpu_memory_GiB * 2**30 * 0.9
    for pl in placements(model, cluster, training, world):
        per_replica = training.global_batch_size // pl.dp
        shardings = sharding_options(training, pl.dp, pl.cp, pl.pp, offload)
        if not shardings or not _placement_ok(model, cluster, training, world, pl, shardings, per_replica, state):
            continue
        for sharding in shardings:
            sizes = mbs_options(model, training, max(per_replica, 1), pl.cp)
            for i, mbs in enumerate(sizes):
                if time.perf_counter() > deadline:
                    state.truncated = True
                    return
                if _try_recompute_levels(model, cluster, training, world, pl, mbs, sharding, state, usable, host):
                    # Activation memory never shrinks with a larger micro-batch (in-flight micro-batches x size
                    # only grows), so every larger one runs out of memory too.
                    larger = (len(sizes) - i - 1) * len(recompute_options(training))
                    state.candidates += larger
                    state.rejected.counts["out_of_memory"] += larger
                    break


def _placement_ok(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    pl: Placement,
    shardings: list[dict[str, object]],
    per_replica: int,
    state: SearchState,
) -> bool:
    """Check the placement-only rules once; a violation rejects every candidate of the placement."""
    probe = _config(pl, 1, "none", shardings[0], training)
    violations = rules.check(model, cluster, training, probe, world, only=rules.PLACEMENT_RULES)
    if not violations:
        return True
    count = (
        len(shardings)
        * len(mbs_options(model, training, max(per_replica, 1), pl.cp))
        * len(recompute_options(training))
    )
    state.candidates += count
    state.rejected.add(violations[0].code, violations[0].message, probe)
    state.rejected.counts[violations[0].code] += count - 1
    return False


def _try_recompute_levels(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    world: int,
    pl: Placement,
    mbs: int,
    sharding: dict[str, object],
    state: SearchState,
    usable: float,
    host: float,
) -> bool:
    """The cheapest recomputation that fits; the more expensive ones are dominated and not timed.
    True when even the most recomputation runs out of GPU memory."""
    levels = recompute_options(training)
    first = _config(pl, mbs, levels[0], sharding, training)
    violations = rules.check(model, cluster, training, first, world, only=rules.CANDIDATE_RULES)
    if violations:  # the rules do not read the recomputation: one check covers every level
        state.candidates += 1
        state.rejected.add(violations[0].code, violations[0].message, first)
        return False
    for recompute in levels:
        state.candidates += 1
        par = first if recompute == levels[0] else _config(pl, mbs, recompute, sharding, training)
        state.evaluated += 1
        peak, stage, cpu = peak_memory(model, cluster, training, par)
        if cpu > host:
            state.rejected.add(
                "cpu_out_of_memory",
                f"offloaded states need {cpu / 2**30:.0f} GiB of host memory "
                f"per node > 90% of {cluster.cpu_memory_GiB:.0f} GiB",
                par,
                score=cpu,
            )
            return False
        if peak <= usable:
            state.found.append(Found(par, world, peak))
            return False
        state.rejected.add(
            "out_of_memory",
            f"needs {peak / 2**30:.1f} GiB per GPU on stage {stage} > usable {usable / 2**30:.1f} GiB",
            par,
            score=peak,
        )
    return True
