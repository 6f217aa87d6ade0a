"""The search space: small, named generators of each dimension, read from the stack's capabilities.

- TP: divisors of the NVLink domain that divide the heads.
- CP: from 4K tokens up (where ring attention's exchange can hide behind attention), powers of two with
  `seq % 2cp == 0` and at least 2K tokens per rank (NVIDIA runs CP2 at 8K, CP8 at 64K, CP16 at 128K); the
  communication type by placement: p2p inside an NVLink domain, and across domains also
  hierarchical a2a+p2p (a2a over the ranks of a domain, the ring across) — megatron-core cp_comm_type.
- PP: any size up to the layer count; VPP: every factor that divides the layers per stage (no fixed list), up to
  the one that brings the ideal bubble under 0.5%.
- Layer split: splits.py.
- EP: divisors of the experts that fit the TP x CP x DP plane; expert TP: Megatron's default (= TP) or 1.
- Recomputation, cheapest first: none; selective modules (core_attn without fused attention, layernorm, moe_act,
  mla_up_proj, mlp / moe); full recomputation of 1..n layers per chunk (block method); full of every layer.
- Precision and overlap options that cost nothing are taken (TP communication overlap with SP, EP overlap where
  Megatron allows it, FP8 primary weights with the distributed optimizer); choices that change numerics (gradient
  reduce dtype, FP8 recipe) are the request's.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner import activations as act
from app.planner import dispatch, layout
from app.planner.attention import a2a_splits
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, ParallelPins, TrainingSpec

MAX_MICRO_BATCH = 32
MAX_MICROBATCH_TOKENS = 262_144  # no micro-batch larger than this many tokens per GPU is worth timing
CP_MIN_SEQ = 4096
CP_MIN_CHUNK = 2048  # tokens per CP rank below which ring attention's chunks are too short to hide the exchange
MAX_CP = 32
MAX_TP_IN_DOMAIN = 8  # NVIDIA's GB200 recipes run TP up to 8 across trays of one NVL72 domain (Nemotron-4 340B)


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def tp_options(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> list[int]:
    if training.pinned.tp:
        return [training.pinned.tp]
    if not training.software.can.tensor_parallel:
        return [1]
    # NVLink across trays (GB200 NVL72): TP up to 8 anywhere in the domain; a world whose segments are single trays
    # (a prime tray count) is refused TP across them by rule (rules.shape.tp_within_nvlink_domain)
    domain = cluster.gpu.nvlink_domain if cluster.gpu.nvlink_spans_nodes else cluster.nvlink_domain
    if domain > cluster.gpus_per_node:
        limit = min(domain, MAX_TP_IN_DOMAIN)
    else:
        limit = 2 * cluster.gpus_per_node if training.allow_tp_across_nodes else min(domain, cluster.gpus_per_node)
    low = 2 if training.pinned.tp_comm_overlap else 1  # the overlap pinned: layouts that have it (TP > 1)
    return [t for t in divisors(limit) if t >= low and model.num_attention_heads % t == 0]


def sequence_parallel_fits(model: ModelSpec, tp: int, cp: int) -> bool:
    """Sequence parallelism splits each CP rank's sequence over the TP ranks, which must divide it (megatron-core
    tensor_parallel/mappings.py `_split_along_first_dim`; torchtitan: seq_len divisible by TP x 2 CP)."""
    return not (model.seq_length // cp) % tp


def cp_searched(model: ModelSpec, training: TrainingSpec) -> bool:
    """Whether the search tries CP > 1 (when not pinned): a stack with CP, flash attention, sequences from 4K."""
    can = training.software.can.context_parallel
    return bool(can) and model.seq_length >= CP_MIN_SEQ and training.flash_attention


def cp_options(model: ModelSpec, training: TrainingSpec, rest: int) -> list[int]:
    if training.pinned.cp:
        return [training.pinned.cp]
    if not cp_searched(model, training):
        return [1]
    sizes = [1, 2, 4, 8, 16, 32]
    return [
        c
        for c in sizes
        if (c == 1 and training.pinned.cp_comm_type is None)  # a pinned CP comm type: layouts with CP
        # CP > 1 cuts the sequence into 2 x CP chunks (rules.context_parallel); CP 1 cuts nothing
        or (
            1 < c <= MAX_CP
            and rest % c == 0
            and model.seq_length % (2 * c) == 0
            and model.seq_length // c >= CP_MIN_CHUNK
        )
    ]


def cp_comm_options(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, tp: int, cp: int
) -> list[tuple[str, tuple[int, int] | None]]:
    """(cp_comm_type, hierarchical sizes): p2p; across NVLink domains also a2a inside and the ring across. With a
    sliding window, all_gather and a2a (what Transformer Engine runs windowed attention with)."""
    if cp == 1:
        return [("p2p", None)]
    can = training.software.can.context_parallel
    pinned = training.pinned.cp_comm_type
    if model.sliding_window is not None and not pinned:
        # Transformer Engine runs windowed attention under CP with all_gather or a2a only (rules cp_sliding_window)
        usable = ("all_gather", "a2a") if a2a_splits(model, tp, cp) else ("all_gather",)
        kinds: list[tuple[str, tuple[int, int] | None]] = [(kind, None) for kind in usable if kind in can]
        return kinds or ([(usable[0], None)] if training.pinned.cp else [])
    out: list[tuple[str, tuple[int, int] | None]] = [("p2p", None)] if "p2p" in can else []
    gqa = (model.num_query_groups or model.num_attention_heads) < model.num_attention_heads
    if gqa and "all_gather" in can:  # Llama 3's CP: with few K/V heads, gathering K and V is cheap
        out.append(("all_gather", None))
    inner = max(1, min(cp, cluster.nvlink_domain // tp))
    if pinned == "a2a" and a2a_splits(model, tp, cp):  # Ulysses: only when asked (NVIDIA's recipes run p2p / a2a+p2p)
        out.append(("a2a", None))
    if 1 < inner < cp and cp % inner == 0 and a2a_splits(model, tp, inner) and "a2a+p2p" in can:
        out.append(("a2a+p2p", (inner, cp // inner)))
    elif pinned == "a2a+p2p" and "a2a+p2p" in can:
        # asked for where the CP group fits one NVLink domain (or its split there does not divide): every split of
        # it into an a2a level and a ring level, both above 1 (Megatron needs --hierarchical-context-parallel-sizes)
        out += [("a2a+p2p", (a, cp // a)) for a in divisors(cp) if 1 < a < cp and a2a_splits(model, tp, a)]
    if pinned:
        out = [o for o in out if o[0] == pinned]
        if not out and pinned == "a2a+p2p":  # no layout without two levels (it failed to validate, then became p2p)
            return []
        out = out or [(pinned, None)]
    # a pinned CP the stack cannot run (Megatron-DeepSpeed, DeepSpeed): one option, which the rules refuse by name
    # rather than a search of no candidates and no reason
    return out or ([("p2p", None)] if training.pinned.cp else [])


def pp_options(model: ModelSpec, training: TrainingSpec, rest: int) -> list[int]:
    if training.pinned.pp:
        return [training.pinned.pp]
    if training.software.can.pipeline is None:
        return [1]
    return [p for p in divisors(rest) if p <= model.num_layers]


def vpp_options(model: ModelSpec, training: TrainingSpec, pp: int, microbatches: int) -> list[int]:
    """Every interleaving factor that divides the layers per stage, counting the embedding and the loss as layers
    too where that makes a count (NVIDIA runs 5, 7, 12, 14, 47). A larger factor shrinks the bubble and adds
    pipeline traffic and in-flight activations; the step model weighs both."""
    if training.pinned.vpp:
        return [training.pinned.vpp]
    if pp == 1 or not training.software.can.interleaving:
        return [1]
    L = model.num_layers
    per_stage = max(L // pp, 1)
    # uneven counts: the layers per stage rounded down and up, with and without the embedding and loss as layers
    counts = {L // pp, -(-L // pp), (L + 2) // pp, -(-(L + 2) // pp)} if L % pp else {per_stage}
    factors = {1}
    for n in counts:
        factors |= {v for v in divisors(n) if 1 < v <= n}
    return sorted(factors)


def etp_options(model: ModelSpec, training: TrainingSpec, tp: int) -> list[int | None]:
    """Expert tensor parallelism: Megatron's default (= TP) or none (ETP 1), the common MoE choice."""
    if not model.is_moe or tp == 1 or not training.software.can.expert_parallel:
        return [None]
    return [None, 1]


def ep_options(model: ModelSpec, training: TrainingSpec, plane: int) -> list[int]:
    if training.pinned.ep:
        return [training.pinned.ep]
    if not model.is_moe or not training.software.can.expert_parallel:
        return [1]
    experts = model.num_experts or 1
    # powers of two (the all-to-all's natural group sizes), and the expert count itself when it is small
    sizes = {e for e in divisors(experts) if e & (e - 1) == 0} | ({experts} if experts <= 64 else set())
    return sorted(e for e in sizes if plane % e == 0 and e <= 64)


def mbs_options(model: ModelSpec, training: TrainingSpec, per_replica: int, cp: int) -> list[int]:
    if training.pinned.micro_batch_size:
        return [training.pinned.micro_batch_size]
    cap = max(1, MAX_MICROBATCH_TOKENS * cp // model.seq_length)
    return [b for b in divisors(per_replica) if b <= min(MAX_MICRO_BATCH, cap)]


def sharding_options(training: TrainingSpec, dp: int, cp: int, pp: int, offload: bool) -> list[dict[str, object]]:
    """Optimizer sharding (and offload) the stack offers for this placement. Sharding over a single data-parallel
    rank cannot help (ZeRO-2/3 on DP 1 shard nothing and only add hooks): the simpler choice only."""
    pins = training.pinned
    can = training.software.can
    if "distributed_optimizer" in can.sharding:
        # a pinned ZeRO stage or ZeRO offload is not this stack's: carried into every option, so that the rules
        # refuse it by name ("shards with distributed_optimizer, not ZeRO stages") instead of the search dropping it
        foreign = _pinned(pins, ("zero_stage", "offload_optimizer", "offload_param"))
        # the distributed optimizer shards optimizer state over DP x CP at the communication volume of the
        # all-reduce it replaces (reduce-scatter + all-gather): with DP x CP > 1 it is always taken; Megatron-FSDP
        # also shards the gradients (optim_grads) and the weights (optim_grads_params, PP 1); its `optim` strategy
        # is the distributed optimizer's sharding and is not searched twice
        options = [dp * cp > 1] if pins.distributed_optimizer is None else [pins.distributed_optimizer]
        out: list[dict[str, object]] = [{"distributed_optimizer": d, **foreign} for d in options]
        if "megatron_fsdp" in can.sharding and dp * cp > 1 and pins.distributed_optimizer is not False:
            strategies = ["optim_grads"] + (["optim_grads_params"] if pp == 1 else [])
            if pins.megatron_fsdp:
                strategies, out = [pins.megatron_fsdp], []
            out += [{"distributed_optimizer": True, "megatron_fsdp": s, **foreign} for s in strategies]
        elif pins.megatron_fsdp:  # refused by rule (no Megatron-FSDP here, or nothing to shard it over)
            out = [{**option, "megatron_fsdp": pins.megatron_fsdp} for option in out]
        return out
    if "fsdp" in can.sharding:  # FSDP's full shard; a pinned ZeRO stage, offload or distributed optimizer: by rule
        return [_pinned(pins, ("zero_stage", "distributed_optimizer", "offload_optimizer", "offload_param"))]
    # Megatron's distributed optimizer or Megatron-FSDP pinned on a ZeRO stack: carried, so that the rules refuse it
    foreign = _pinned(pins, ("distributed_optimizer", "megatron_fsdp"))
    stages = [s for s in can.zero_stages if s <= 1] if pp > 1 else list(can.zero_stages)
    if dp == 1 and pins.zero_stage is None:
        stages = [min(s for s in stages if s >= 1)] if any(s >= 1 for s in stages) else stages
    if pins.zero_stage is not None:
        stages = [pins.zero_stage]
    out = []
    for stage in stages:
        offloads = [("none", "none")]
        if offload and stage >= 1 and can.offload:
            offloads.append(("cpu", "none"))
        if offload and stage == 3 and can.offload:
            # the optimizer alone on NVMe keeps the sharded 16-bit weights on the GPU: no drive read per pass
            offloads += [("cpu", "cpu"), ("nvme", "none"), ("nvme", "nvme")]
        for opt, param in offloads:
            if pins.offload_optimizer not in (None, opt) or pins.offload_param not in (None, param):
                continue
            out.append({"zero_stage": stage, "offload_optimizer": opt, "offload_param": param, **foreign})
    return out


def _pinned(pins: ParallelPins, names: tuple[str, ...]) -> dict[str, object]:
    """The pins among `names` set to something other than their "off" value (None, False, 0, "none")."""
    return {name: value for name in names if (value := getattr(pins, name)) not in (None, False, 0, "none")}


@dataclass(frozen=True, slots=True)
class Recompute:
    recompute: str
    modules: tuple[str, ...] | None = None
    method: str | None = None
    layers: int | None = None
    offload: int | None = None  # layers whose activations go to the host (no recomputation)


# Over PCIe (24-64 GB/s) a layer's activations (~30 B per token and hidden unit) take two to four times its
# forward to copy, so only a few offloaded layers can hide behind the others' compute: the search offers 1/16, 1/8
# and 1/4 of the layers there (NVIDIA's B200 Llama-3 70B recipe offloads 5 of 80), and up to all but one over a
# coherent CPU link (Grace's NVLink-C2C; the catalogue's GB200 has 100 GB/s per GPU; the GB200 recipe offloads 40).
FAST_HOST_LINK_BPS = 100e9


def offload_options(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, layers_per_chunk: int
) -> list[Recompute]:
    """Activation offload instead of recomputation, from the fewest layers offloaded to the most: a chain of its
    own (it is as fast as no recomputation while the copies hide, and keeps fewer layers than any full
    recomputation when most layers go), for one-stage layouts of a stack that has it (megatron-core: PP 1, no
    recomputation, fewer layers than the model). Empty when pinned (then it is the only level)."""
    pins, layers = training.pinned, model.num_layers
    if not training.software.can.activation_offload or layers_per_chunk != layers or layers < 2:
        return []
    pinned = pins.recompute not in (None, "none") or pins.recompute_num_layers or pins.recompute_modules
    if pins.cpu_offloading_num_layers or pinned:
        return []
    shares: tuple[int, ...]
    if cluster.h2d_bw >= FAST_HOST_LINK_BPS:
        shares = (layers // 4, layers // 2, 3 * layers // 4, layers - 1)
    else:
        shares = (layers // 16, layers // 8, layers // 4)
    counts = sorted({k for k in shares if 0 < k < layers})
    return [Recompute("none", offload=k) for k in counts]


# megatron-core 0.16.1 TransformerConfig.__post_init__: "Delayed scaling does not support moe_act and layernorm
# recompute for fp8"
DELAYED_FP8_NO_RECOMPUTE = ("layernorm", "moe_act")


def with_level(par: ParallelConfig, level: Recompute) -> ParallelConfig:
    """`par` recomputing as `level` (combined 1F1B dropped where the level stops it: full recomputation)."""
    return par.model_copy(
        update={
            "recompute": level.recompute,
            "recompute_modules": level.modules,
            "recompute_method": level.method,
            "recompute_num_layers": level.layers,
            "moe_ep_overlap": par.moe_ep_overlap and ep_overlap_runs(par.ep, level.recompute, par.pp, par.vpp),
        }
    )


def recompute_options(model: ModelSpec, training: TrainingSpec, layers_per_chunk: int) -> list[Recompute]:
    """Recomputation choices: none, the selective module sets, then full recomputation of more and more layers per
    chunk (block k, then every layer). Neither time nor memory is monotone along the whole list: a selective module
    on every layer can keep less and cost more than one fully recomputed layer. The search orders them by time
    (search._levels_by_cost); only the full levels form a chain, each keeping less and costing more than the one
    before."""
    pins = training.pinned
    if pins.cpu_offloading_num_layers:
        return [Recompute("none", offload=pins.cpu_offloading_num_layers)]
    if pins.recompute == "none":
        return [Recompute("none")]
    if pins.recompute == "full" or pins.recompute_num_layers:
        return _full(training, layers_per_chunk, pins.recompute_num_layers)
    out = [Recompute("none")] if pins.recompute is None else []
    can = set(training.software.can.recompute_modules)
    selective: list[tuple[str, ...]] = []
    if not training.flash_attention:
        selective.append(("core_attn",))
    if "layernorm" in can:
        selective.append(("layernorm",))
    if model.is_moe and "moe_act" in can:
        selective.append(("layernorm", "moe_act"))
    if model.multi_latent_attention and "mla_up_proj" in can:
        selective.append(("mla_up_proj",))
    if model.is_moe and model.multi_latent_attention and model.moe_first_dense_layers and "mlp" in can:
        selective.append(("mla_up_proj", "mlp"))  # DeepSeek-V3 / Kimi-K2 recipes: the leading dense layers' MLP
    if "mlp" in can:
        mlp = ("moe",) if model.is_moe else ("mlp",)
        selective.append(("mla_up_proj", *mlp) if model.multi_latent_attention else mlp)
    if training.precision == "fp8" and training.fp8_recipe == "delayed":  # megatron-core refuses them together
        selective = [m for m in selective if not set(m) & set(DELAYED_FP8_NO_RECOMPUTE)]
    if pins.recompute_modules:
        selective = [pins.recompute_modules]
    out += [Recompute("selective", s) for s in selective]
    own_policy = act.op_level_selective(training) and not pins.recompute_modules  # torchtitan's, MaxText's
    if own_policy or (not selective and (pins.recompute == "selective" or not training.flash_attention)):
        out.append(Recompute("selective"))
    if pins.recompute == "selective" or pins.recompute_modules:  # pinned modules: selective recompute of them
        return [r for r in out if r.recompute == "selective"]
    return out + _full(training, layers_per_chunk, None)


def _full(training: TrainingSpec, per_chunk: int, pinned: int | None) -> list[Recompute]:
    if not training.software.can.partial_recompute:
        return [Recompute("full")]
    if pinned:
        return [Recompute("full", method="block", layers=pinned)]
    counts = sorted({k for k in (1, 2, per_chunk // 4, per_chunk // 2, per_chunk - 1) if 0 < k < per_chunk})
    return [Recompute("full", method="block", layers=k) for k in counts] + [
        Recompute("full", method="uniform", layers=1)
    ]


def ep_overlap_runs(ep: int, recompute: str, pp: int, vpp: int) -> bool:
    """Whether megatron-core runs combined 1F1B for this layout: EP > 1, no full recompute, and with a pipeline only
    the interleaved schedule (the stack must also have it: `Capabilities.ep_overlap`)."""
    return ep > 1 and recompute != "full" and (pp == 1 or vpp > 1)


# Transformer Engine's TP comm overlap (userbuffers) is built for NVSwitch systems from Hopper on: it relies on CUDA
# multicast handles (NVIDIA/TransformerEngine#1071; initialize_ub stops where the device has none, asking for
# UB_SKIPMC=1), and its pipelined reduce-scatter overlap was held back for a hang on A100 (TransformerEngine#1311);
# no published Ampere run uses it. Elsewhere (and on NVLink-bridged PCIe cards) it is off unless pinned.
USERBUFFERS_GENERATIONS = ("hopper", "blackwell")
NVSWITCH_DOMAIN = 8  # GPUs behind NVSwitch (HGX 8-GPU boards, NVL72 racks); NVLink bridges join 2


def userbuffers_multicast(cluster: ClusterSpec) -> bool:
    """Whether the GPUs' NVLink fabric has CUDA multicast (NVSwitch from Hopper on: NVLink SHARP), which userbuffers
    use unless UB_SKIPMC=1."""
    return cluster.gpu.generation in USERBUFFERS_GENERATIONS and cluster.gpu.nvlink_domain >= NVSWITCH_DOMAIN


def overlap_options(
    model: ModelSpec,
    training: TrainingSpec,
    cluster: ClusterSpec,
    tp: int,
    ep: int,
    pp: int,
    vpp: int,
    recompute: str,
    etp: int | None = None,
) -> dict[str, object]:
    """Overlaps that cost nothing but memory the model counts: TP comm overlap with SP (TE userbuffers), EP overlap
    where megatron-core allows it (no full recompute; interleaving with PP; one MTP layer at most, with PP), the
    flex (DeepEP) dispatcher where the stack has it and it moves at least 5 % less than alltoall (dispatch.py), FP8
    primary weights with the distributed optimizer; and the FP8 recipe of the GPU generation when the request leaves
    it open."""
    can, pins = training.software.can, training.pinned
    # not with multi-latent attention: megatron-core's TELinear turns tp_comm_overlap off on the config every layer
    # shares at the first projection whose userbuffer is not qkv/proj/fc1/fc2 (MLA's q_down_proj), so the model's
    # later layers run their TP communication exposed (rules.stack.overlap_supported; NVIDIA's MLA recipes leave
    # it off)
    tp_overlap = (
        can.tp_comm_overlap
        and tp > 1
        and can.sequence_parallel
        and userbuffers_multicast(cluster)
        and not model.multi_latent_attention
    )
    if pins.tp_comm_overlap is not None:
        tp_overlap = pins.tp_comm_overlap and tp > 1
    ep_overlap = can.ep_overlap and ep_overlap_runs(ep, recompute, pp, vpp)
    if model.mtp_num_layers and (model.mtp_num_layers > 1 or pp == 1):
        ep_overlap = False  # megatron-core 0.16 TransformerConfig.__post_init__: at most one MTP layer, and pp > 1
    if pins.moe_ep_overlap is not None:
        ep_overlap = pins.moe_ep_overlap and ep_overlap  # on: wherever Megatron can run it, as tp_comm_overlap's pin
    flex = can.flex_dispatcher and ep > 1 and dispatch.flex_saves(model, layout.expert_group(ep, etp or tp, cluster))
    dispatcher = pins.moe_token_dispatcher or ("flex" if flex else "alltoall")
    fp8 = training.precision == "fp8"
    recipe = training.fp8_recipe or ("mxfp8" if cluster.gpu.generation == "blackwell" else "tensorwise")
    return {
        "tp_comm_overlap": tp_overlap,
        "moe_ep_overlap": ep_overlap,
        "moe_token_dispatcher": dispatcher,
        "fp8_recipe": recipe if fp8 else None,
        "grad_reduce_dtype": training.reduce_dtype,
    }


def fp8_param_gather(training: TrainingSpec, distributed_optimizer: bool) -> bool:
    if training.pinned.fp8_param_gather is not None:
        return training.pinned.fp8_param_gather
    sharded = distributed_optimizer or "fsdp" in training.software.can.sharding
    return training.precision == "fp8" and sharded and training.software.can.fp8_param_gather


__all__ = ["ParallelConfig"]
