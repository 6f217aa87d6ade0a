"""Where things land: layers per pipeline stage, micro-batches, which groups cross nodes.

Rank order is Megatron's default `tp-cp-ep-dp-pp` (megatron/core/parallel_state.py): TP ranks are adjacent,
then CP, then DP (EP is carved out of CP x DP), and pipeline stages are outermost.

Layer split over the stages, as the stacks do it:
- even (`num_layers / pp`), or Megatron's uneven `--decoder-first/last-pipeline-num-layers` with the rest even over the
  middle stages (each divisible by VPP), or `--account-for-embedding/loss-in-pipeline-split` (the embedding and the
  loss each count as one layer of the first / last virtual stage), or a `--pipeline-model-parallel-layout` string
  (megatron/core/transformer/pipeline_parallel_layer_layout.py: stages split by `|`, `E` embedding, `t` layer,
  `m` MTP, `L` loss, `x*n` and `(...)*n` repeat, commas cosmetic; virtual stage i is pp rank i % p, chunk i // p);
- DeepSpeed's PipelineModule `partition_method`: `type:transformer` balances the transformer layers,
  `type:transformer|embedding` also counts the two EmbeddingPipe specs (BigScience's `--pp-partition-method`, as
  BLOOM ran: lighter first and last stages), `uniform`
  the number of layer specs, `parameters` the parameter counts, where the embedding and the tied output weight
  weigh as much as their `V x h` parameters (deepspeed/runtime/pipe/module.py `_partition_layers`,
  deepspeed/runtime/utils.py `partition_balanced`).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from app.planner import comm
from app.planner.results import Layout
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


@dataclass(frozen=True, slots=True)
class StageShape:
    """One pipeline rank: its transformer layers per virtual chunk, and the extras it holds."""

    chunks: tuple[int, ...]
    embedding: bool
    loss: bool
    mtp: int = 0

    @property
    def layers(self) -> int:
        return sum(self.chunks)


def parse_layout(layout: str, pp: int) -> list[StageShape]:
    """Megatron's layout string as per-rank stage shapes; raises ValueError naming what is wrong."""
    return list(_parse_layout(layout, pp))


# far past any model's layers and stages (num_layers <= 1,024 x VPP); a repeat count of 10^14 ran the CLI out of
# memory expanding it (QA 2026-12-07)
LAYOUT_MAX_CHARS = 1 << 20


@functools.lru_cache(maxsize=4096)
def parse_layout_text(layout: str) -> str:
    """The layout string with its repeats expanded and commas and spaces dropped (`|` between virtual stages)."""
    text = layout.replace(",", "").replace(" ", "")
    for pattern in (r"\(([^()]+)\)\*(\d+)", r"(.)\*(\d+)"):
        while re.search(pattern, text):
            # the length a pass makes, counted before it is made: one pass of 400 repeats below the cap each
            # reached 832 MB before the cap was checked (review 2026-12-07)
            grown = len(text) + sum(
                len(m.group(1)) * int(m.group(2)) - len(m.group(0)) for m in re.finditer(pattern, text)
            )
            if grown > LAYOUT_MAX_CHARS:
                shown = layout if len(layout) <= 80 else layout[:77] + "..."
                raise ValueError(f"pipeline_layout {shown!r} expands past {LAYOUT_MAX_CHARS:,} characters")
            text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    return text


@functools.lru_cache(maxsize=4096)
def _parse_layout(layout: str, pp: int) -> tuple[StageShape, ...]:
    text = parse_layout_text(layout)
    stages = text.split("|")
    bad = set(text) - set("EtmL|")
    if bad:
        raise ValueError(f"pipeline_layout {layout!r}: unknown layer characters {sorted(bad)} (E, t, m, L)")
    if len(stages) % pp:
        raise ValueError(f"pipeline_layout {layout!r} has {len(stages)} stages, not a multiple of pp({pp})")
    flat = "".join(stages)
    if flat.count("E") != 1 or flat.count("L") != 1 or not flat.startswith("E") or not flat.endswith("L"):
        raise ValueError(f"pipeline_layout {layout!r}: must start with E, end with L, each exactly once")
    v = len(stages) // pp
    out = []
    for rank in range(pp):
        mine = [stages[chunk * pp + rank] for chunk in range(v)]
        out.append(
            StageShape(
                chunks=tuple(s.count("t") for s in mine),
                embedding=any("E" in s for s in mine),
                loss=any("L" in s for s in mine),
                mtp=sum(s.count("m") for s in mine),
            )
        )
    return tuple(out)


def layout_vpp(layout: str, pp: int) -> int:
    return len(parse_layout(layout, pp)[0].chunks)


def _even_chunks(n: int, v: int) -> tuple[int, ...]:
    base, extra = divmod(n, v)
    return tuple(base + (1 if i < extra else 0) for i in range(v))


def _megatron_split(num_layers: int, par: ParallelConfig) -> list[StageShape]:
    p, v = par.pp, par.vpp
    first, last = par.first_stage_layers, par.last_stage_layers
    if first is not None or last is not None:
        fixed = [x for x in (first, last) if x is not None]
        middle = p - len(fixed)
        per_middle = (num_layers - sum(fixed)) // middle if middle else 0
        counts = [per_middle] * p
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
        return [StageShape(_even_chunks(n, v), i == 0, i == p - 1) for i, n in enumerate(counts)]
    extra_e = 1 if par.account_for_embedding_in_pipeline_split else 0
    extra_l = 1 if par.account_for_loss_in_pipeline_split else 0
    total = num_layers + extra_e + extra_l
    if not (extra_e or extra_l):
        base, rem = divmod(num_layers, p)
        counts = [base + (1 if i < rem else 0) for i in range(p)]
        return [StageShape(_even_chunks(n, v), i == 0, i == p - 1) for i, n in enumerate(counts)]
    per_chunk = total // (p * v)
    chunks = [[per_chunk] * v for _ in range(p)]
    chunks[0][0] -= extra_e
    chunks[-1][-1] -= extra_l
    return [StageShape(tuple(c), i == 0, i == p - 1) for i, c in enumerate(chunks)]


def _deepspeed_split(model: ModelSpec, par: ParallelConfig) -> list[StageShape]:
    """Megatron-DeepSpeed's GPTModelPipe specs: embedding, the transformer layers, final norm + head (tied to the
    embedding, so a second embedding spec on the last stage), partitioned by DeepSpeed's partition_method."""
    p, L = par.pp, model.num_layers
    method = par.partition_method or "type:transformer"
    if method.startswith("type:"):
        # binary weights: 1 for each spec whose class name matches the regex. DeepSpeed's partition_balanced
        # (the linear-partition DP of deepspeed/runtime/utils.py) spreads n weighted specs as divmod(n, p) with the
        # larger parts first; checked against it in tests/planner/test_layout_deepspeed.py
        embeddings = 2 if "embedding" in method else 0  # EmbeddingPipe first and its tied twin before the loss
        base, rem = divmod(L + embeddings, p)
        counts = [base + (1 if i < rem else 0) for i in range(p)]
        if embeddings:
            counts[0] -= 1
            counts[-1] -= 1
        return [StageShape((n,), i == 0, i == p - 1) for i, n in enumerate(counts)]
    layer_w = float(model.num_parameters - 2 * model.vocab_size * model.hidden_size) / L
    embed_w = float(model.vocab_size * model.hidden_size)
    weights = [embed_w, *([layer_w] * L), embed_w] if method == "parameters" else [1.0] * (L + 2)
    bounds = _balanced_bounds(weights, p)
    counts = [sum(1 for i in range(bounds[s], bounds[s + 1]) if 0 < i <= L) for s in range(p)]
    return [StageShape((n,), i == 0, i == p - 1) for i, n in enumerate(counts)]


def _balanced_bounds(weights: list[float], parts: int) -> list[int]:
    """Contiguous split of `weights` into `parts` minimising the heaviest part (binary search on the bound, as
    DeepSpeed's partition_balanced does), each part non-empty."""
    lo, hi = max(weights), sum(weights)
    for _ in range(60):
        mid = (lo + hi) / 2
        if _count_parts(weights, mid) <= parts:
            hi = mid
        else:
            lo = mid
    bounds, acc = [0], 0.0
    for i, w in enumerate(weights):
        remaining_parts = parts - len(bounds)
        if ((acc + w > hi and acc > 0) or len(weights) - i <= remaining_parts) and len(bounds) < parts:
            bounds.append(i)
            acc = 0.0
        acc += w
    bounds += [len(weights)] * (parts + 1 - len(bounds))
    return bounds


def _count_parts(weights: list[float], bound: float) -> int:
    parts, acc = 1, 0.0
    for w in weights:
        if acc + w > bound and acc > 0:
            parts, acc = parts + 1, 0.0
        acc += w
    return parts


def stage_shapes(model: ModelSpec, training: TrainingSpec, par: ParallelConfig) -> tuple[StageShape, ...]:
    return _stages_of(model, training, par)[0]


def _stages_of(
    model: ModelSpec, training: TrainingSpec, par: ParallelConfig
) -> tuple[tuple[StageShape, ...], tuple[tuple[int, int], ...], tuple[tuple[int, StageShape, int, int, int], ...]]:
    """(stage shapes, (dense, MoE) layers per stage, `alike_stages`) of `par`, kept on the config for the model and
    training it was last asked for (the search asks for them thousands of times per request, a few configs at a
    time)."""
    private = par.__pydantic_private__  # a dict: private attributes without pydantic's __getattr__
    cached = private.get("_stages")  # type: ignore[union-attr]
    if cached is not None and cached[0] is model and cached[1] is training:
        return cached[2]  # type: ignore[no-any-return]
    shapes = _shapes_memo(model, training, par)
    kinds, alike = model.memo("stage_layer_kinds", lambda: _kinds_and_alike(model, shapes), shapes)
    private["_stages"] = (model, training, (shapes, kinds, alike))  # type: ignore[index]
    return shapes, kinds, alike


def _kinds_and_alike(
    model: ModelSpec, shapes: tuple[StageShape, ...]
) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, StageShape, int, int, int], ...]]:
    kinds = _stage_layer_kinds(model, shapes)
    runs: dict[tuple[StageShape, int, int], list[int]] = {}  # kind -> [first stage, count]
    for i, (shape, (dense, moe)) in enumerate(zip(shapes, kinds, strict=True)):
        run = runs.setdefault((shape, dense, moe), [i, 0])
        run[1] += 1
    return kinds, tuple((first, shape, dense, moe, n) for (shape, dense, moe), (first, n) in runs.items())


def alike_stages(
    model: ModelSpec, training: TrainingSpec, par: ParallelConfig
) -> tuple[tuple[int, StageShape, int, int, int], ...]:
    """(first stage, shape, dense layers, MoE layers, how many stages) for each distinct stage, in first-seen order:
    stages shaped alike cost alike, so per-stage work is done once per kind."""
    return _stages_of(model, training, par)[2]


def _shapes_memo(model: ModelSpec, training: TrainingSpec, par: ParallelConfig) -> tuple[StageShape, ...]:
    key = (
        "stage_shapes",
        par.pp,
        par.vpp,
        par.first_stage_layers,
        par.last_stage_layers,
        par.pipeline_layout,
        par.account_for_embedding_in_pipeline_split,
        par.account_for_loss_in_pipeline_split,
        par.partition_method,
        training.software.can.pipeline,
    )
    return model.memo(key, lambda: tuple(_stage_shapes(model, training, par)))


def _stage_shapes(model: ModelSpec, training: TrainingSpec, par: ParallelConfig) -> list[StageShape]:
    if par.pipeline_layout is not None:
        return parse_layout(par.pipeline_layout, par.pp)
    if par.pp == 1:
        shapes = [StageShape(_even_chunks(model.num_layers, par.vpp), True, True)]
    elif training.software.can.pipeline == "deepspeed":
        shapes = _deepspeed_split(model, par)
    else:
        shapes = _megatron_split(model.num_layers, par)
    if model.mtp_num_layers:  # without a layout string Megatron builds every MTP layer on the last stage
        last = shapes[-1]
        shapes[-1] = StageShape(last.chunks, last.embedding, last.loss, model.mtp_num_layers)
    return shapes


def stage_layers(model: ModelSpec, training: TrainingSpec, par: ParallelConfig) -> list[int]:
    """Transformer layers on each pipeline stage."""
    return [s.layers for s in stage_shapes(model, training, par)]


def stage_layer_kinds(model: ModelSpec, training: TrainingSpec, par: ParallelConfig) -> tuple[tuple[int, int], ...]:
    """(dense layers, MoE layers) on each stage, in Megatron's layer order (chunk by chunk across the ranks);
    the first `moe_first_dense_layers` layers are dense."""
    return _stages_of(model, training, par)[1]


def _stage_layer_kinds(model: ModelSpec, shapes: tuple[StageShape, ...]) -> tuple[tuple[int, int], ...]:
    dense_total = model.num_layers - model.num_moe_layers
    out = [[0, 0] for _ in shapes]
    start = 0
    for chunk in range(max(len(s.chunks) for s in shapes)):
        for rank, shape in enumerate(shapes):
            n = shape.chunks[chunk] if chunk < len(shape.chunks) else 0
            dense = max(0, min(start + n, dense_total) - start)
            out[rank][0] += dense
            out[rank][1] += n - dense
            start += n
    for rank, shape in enumerate(shapes):  # an MTP layer is a layer of the last layer's kind
        out[rank][1 if model.mtp_is_moe else 0] += shape.mtp
    return tuple((d, m) for d, m in out)


def num_microbatches(training: TrainingSpec, par: ParallelConfig) -> int:
    return training.global_batch_size // (par.micro_batch_size * par.dp)


def tp_group(par: ParallelConfig, cluster: ClusterSpec) -> comm.Group:
    return comm.group(par.tp, 1, cluster, par.world_size)


def cp_group(par: ParallelConfig, cluster: ClusterSpec) -> comm.Group:
    return comm.group(par.cp, par.tp, cluster, par.world_size)


def dp_group(par: ParallelConfig, cluster: ClusterSpec) -> comm.Group:
    return comm.group(par.dp, par.tp * par.cp, cluster, par.world_size)


def dp_cp_group(par: ParallelConfig, cluster: ClusterSpec) -> comm.Group:
    """The group the distributed optimizer (and Megatron-FSDP) shards over: DP x CP, CP ranks adjacent."""
    return comm.group(par.dp * par.cp, par.tp, cluster, par.world_size)


def ep_group(par: ParallelConfig, cluster: ClusterSpec) -> comm.Group:
    return expert_group(par.ep, par.expert_tp, cluster, par.world_size)


def expert_group(ep: int, expert_tp: int, cluster: ClusterSpec, world: int | None = None) -> comm.Group:
    """EP groups take consecutive expert-TP blocks inside the TP x CP x DP plane (Megatron's expert grid)."""
    return comm.group(ep, expert_tp, cluster, world)


def expert_dp_group(par: ParallelConfig, cluster: ClusterSpec) -> comm.Group:
    size = max(1, par.tp * par.cp * par.dp // (par.expert_tp * par.ep))
    return comm.group(size, par.expert_tp * par.ep, cluster, par.world_size)


def pp_group(par: ParallelConfig, cluster: ClusterSpec) -> comm.Group:
    return comm.group(par.pp, par.tp * par.cp * par.dp, cluster, par.world_size)


def tp_crosses_nodes(par: ParallelConfig, cluster: ClusterSpec) -> bool:
    return tp_group(par, cluster).crosses


def cp_crosses_nodes(par: ParallelConfig, cluster: ClusterSpec) -> bool:
    return cp_group(par, cluster).crosses


def dp_crosses_nodes(par: ParallelConfig, cluster: ClusterSpec) -> bool:
    return dp_group(par, cluster).crosses


def ep_crosses_nodes(par: ParallelConfig, cluster: ClusterSpec) -> bool:
    return ep_group(par, cluster).crosses


def pp_crosses_nodes(par: ParallelConfig, cluster: ClusterSpec) -> bool:
    return pp_group(par, cluster).crosses


def nodes_used(par: ParallelConfig, cluster: ClusterSpec) -> int:
    return math.ceil(par.world_size / cluster.gpus_per_node)


def make_layout(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, par: ParallelConfig) -> Layout:
    """The numbers every artifact reads (derived once: habit 6 of docs/conventions.md)."""
    return Layout(
        world_size=par.world_size,
        num_nodes=nodes_used(par, cluster),
        gpus_per_node=min(cluster.gpus_per_node, par.world_size),
        num_microbatches=num_microbatches(training, par),
        global_batch_size=training.global_batch_size,
        stage_layers=stage_layers(model, training, par),
    )
