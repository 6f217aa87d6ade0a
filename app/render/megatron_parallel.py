"""Parallelism flags of Megatron-LM (core_v0.16.1) and Megatron-DeepSpeed, as data.

Every dimension of the plan's ParallelConfig is written in the flag Megatron-LM reads it from (shared/docs/rules.md
sec. 1 gives validate_args' rules, cited beside each choice below).
"""

from __future__ import annotations

from app.render.facts import Facts
from app.render.flags import Flag, flag


def _virtual_stages(f: Facts) -> list[Flag]:
    """VPP: `--num-layers-per-virtual-pipeline-stage` for even stages; `--num-virtual-stages-per-pipeline-rank`
    with uneven stages or embedding/loss accounting (validate_args forbids layers-per-vstage with first/last-stage
    layers, arguments.py L955-956). A layout string carries the VPP itself (L941-951)."""
    par = f.par
    if par.vpp <= 1 or par.pipeline_layout is not None:
        return []
    uneven = par.first_stage_layers is not None or par.last_stage_layers is not None
    accounted = par.account_for_embedding_in_pipeline_split or par.account_for_loss_in_pipeline_split
    if uneven or accounted:
        return [flag("--num-virtual-stages-per-pipeline-rank", par.vpp)]
    return [flag("--num-layers-per-virtual-pipeline-stage", f.plan.layout.stage_layers[0] // par.vpp)]


def pipeline_flags(f: Facts) -> list[Flag]:
    """Megatron-LM's pipeline split: VPP, uneven first/last stages, embedding/loss accounting or a layout string."""
    par = f.par
    out = _virtual_stages(f)
    if par.pipeline_layout is not None:
        out.append(flag("--pipeline-model-parallel-layout", par.pipeline_layout))
    if par.vpp > 1 and not f.training.overlap_p2p_comm and par.pp > 2:
        out.append(flag("--no-overlap-p2p-communication"))  # PP > 2 required with VPP (L1000-1009)
    if par.first_stage_layers is not None:
        out.append(flag("--decoder-first-pipeline-num-layers", par.first_stage_layers))
    if par.last_stage_layers is not None:
        out.append(flag("--decoder-last-pipeline-num-layers", par.last_stage_layers))
    if par.account_for_embedding_in_pipeline_split:
        out.append(flag("--account-for-embedding-in-pipeline-split"))
    if par.account_for_loss_in_pipeline_split:
        out.append(flag("--account-for-loss-in-pipeline-split"))
    return out


def _context_flags(f: Facts) -> list[Flag]:
    par = f.par
    if par.cp <= 1:
        return []
    out = [flag("--context-parallel-size", par.cp)]
    if f.framework == "megatron":
        out.append(flag("--cp-comm-type", par.cp_comm_type))
        if par.hierarchical_cp_sizes is not None:  # a2a+p2p needs it (arguments.py L405-408)
            out.append(flag("--hierarchical-context-parallel-sizes", *par.hierarchical_cp_sizes))
    return out


def _sharding_flags(f: Facts) -> list[Flag]:
    """Distributed optimizer or Megatron-FSDP, and the overlap the step-time model assumes. Megatron-FSDP runs on
    the distributed optimizer, which Megatron-LM does not turn on by itself (without the flag it builds
    Float16OptimizerWithFloat16Params: megatron-fsdp-user-guide.md "Required Configurations"; Megatron-Bridge
    forces it, training/config.py `_validate_and_apply_megatron_fsdp_v1_configs`), and `--ckpt-format fsdp_dtensor`
    (arguments.py L689-690); sharding the weights too, it builds the model on the meta device and materialises
    each rank's shard (`--init-model-with-meta-device`, training.py L1218-1266; NVIDIA's perf scripts set it,
    scripts/performance/utils/overrides.py `_set_megatron_fsdp_overrides`): otherwise every rank first allocates
    its whole unsharded chunk. Gradient-accumulation fusion stays on, as in those scripts (validate_args only
    warns). Overlap-param-gather needs the distributed optimizer (or FSDP) and overlap-grad-reduce (L597-601)."""
    par = f.par
    out: list[Flag] = []
    if par.megatron_fsdp is not None:
        out += [
            flag("--use-megatron-fsdp"),
            flag("--data-parallel-sharding-strategy", par.megatron_fsdp),
            flag("--use-distributed-optimizer"),
            flag("--ckpt-format", "fsdp_dtensor"),
        ]
        if par.megatron_fsdp == "optim_grads_params":
            out.append(flag("--init-model-with-meta-device"))
    elif par.distributed_optimizer:
        out.append(flag("--use-distributed-optimizer"))
    sharded = par.distributed_optimizer or par.megatron_fsdp is not None
    if f.training.overlap_grad_reduce and par.dp * par.cp > 1:
        out.append(flag("--overlap-grad-reduce"))
        if sharded:
            out.append(flag("--overlap-param-gather"))
    return out


def _overlap_flags(f: Facts) -> list[Flag]:
    """TP-communication overlap (Transformer Engine userbuffers; needs sequence parallelism, L1441-1442) and the
    EP all-to-all overlap, each only when the plan overlaps."""
    par = f.par
    out: list[Flag] = []
    if par.tp_comm_overlap and par.tp > 1 and par.sequence_parallel:
        out.append(flag("--tp-comm-overlap"))
    if par.moe_ep_overlap and par.ep > 1:
        out.append(flag("--overlap-moe-expert-parallel-comm"))
    return out


def parallel_flags(f: Facts) -> list[Flag]:
    par, megatron = f.par, f.framework == "megatron"
    out = [flag("--tensor-model-parallel-size", par.tp), flag("--pipeline-model-parallel-size", par.pp)]
    if megatron:
        out += pipeline_flags(f)
    elif par.pp == 1:
        out.append(flag("--no-pipeline-parallel"))  # DeepSpeed's mpu path: ZeRO 1-3 instead of the pipe engine
    if par.sequence_parallel and par.tp > 1:
        out.append(flag("--sequence-parallel"))
    out += _context_flags(f)
    if megatron:
        out += _sharding_flags(f) + _overlap_flags(f)
    return out
