"""Megatron-LM's `validate_args` checks that megatron-core's config classes do not make (shared/docs/rules.md
sec. 1, Megatron-LM core_v0.16), and Megatron-DeepSpeed's (sec. 3), applied to rendered flags. Each returns the
violations as messages; an empty list means Megatron would start."""

from __future__ import annotations

from megatron_check import Flags


def _batch(fl: Flags, dp: int) -> list[str]:
    """megatron.core.num_microbatches_calculator: the real calculator Megatron-LM builds from the flags."""
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator

    try:
        calc = ConstantNumMicroBatchesCalculator(fl.int("--global-batch-size"), fl.int("--micro-batch-size"), dp,
                                                 decrease_batch_size_if_needed=False, rank=0)
    except AssertionError as exc:
        return [f"num_microbatches_calculator: {exc}"]
    return _interleaving(fl, calc.num_micro_batches)


def _interleaving(fl: Flags, microbatches: int) -> list[str]:
    """schedules.py: interleaving with the default group size PP needs num_microbatches % PP == 0; VPP needs PP > 1
    (PP > 2 with --no-overlap-p2p-communication)."""
    pp = fl.int("--pipeline-model-parallel-size", 1)
    vpp = fl.has("--num-layers-per-virtual-pipeline-stage") or fl.has("--num-virtual-stages-per-pipeline-rank")
    errs = []
    if vpp and (pp < 2 or microbatches % pp):
        errs.append(f"interleaved schedule: pp({pp}), num_microbatches({microbatches}) % pp != 0 or pp < 2")
    if fl.has("--no-overlap-p2p-communication") and (not vpp or pp <= 2):
        errs.append("--no-overlap-p2p-communication needs VPP and pp > 2")
    return errs


def _pipeline_split(fl: Flags) -> list[str]:
    layers, pp = fl.int("--num-layers"), fl.int("--pipeline-model-parallel-size", 1)
    first = fl.int("--decoder-first-pipeline-num-layers", 0)
    last = fl.int("--decoder-last-pipeline-num-layers", 0)
    if fl.has("--num-layers-per-virtual-pipeline-stage"):
        per = fl.int("--num-layers-per-virtual-pipeline-stage")
        if first or last:
            return ["--num-layers-per-virtual-pipeline-stage cannot be combined with first/last-stage layers"]
        if layers % pp or (layers // pp) % per:
            return [f"num_layers({layers}) must split over pp({pp}) stages of {per}-layer virtual stages"]
    elif not (first or last) and layers % pp:
        return [f"num_layers({layers}) % pp({pp}) != 0"]
    return []


def _overlap_and_precision(fl: Flags) -> list[str]:
    errs = []
    if fl.has("--overlap-param-gather") and not (fl.has("--use-distributed-optimizer")
                                                  and fl.has("--overlap-grad-reduce")):
        errs.append("--overlap-param-gather needs --use-distributed-optimizer and --overlap-grad-reduce")
    if fl.has("--fp16") and fl.has("--bf16"):
        errs.append("--fp16 and --bf16 are mutually exclusive")
    if fl.has("--fp8-format") and not fl.has("--bf16"):
        errs.append("--fp8-format runs with --bf16 here (rules: fp8 -> --bf16 --fp8-format hybrid)")
    if fl.has("--recompute-method") and fl.one("--recompute-granularity") == "selective":
        errs.append("selective recompute takes no --recompute-method")
    if fl.int("--max-position-embeddings") < fl.int("--seq-length"):
        errs.append("max_position_embeddings < seq_length")
    return errs


def _parallel(fl: Flags, dp: int, env: dict[str, str]) -> list[str]:
    tp, cp = fl.int("--tensor-model-parallel-size", 1), fl.int("--context-parallel-size", 1)
    ep, etp = fl.int("--expert-model-parallel-size", 1), fl.int("--expert-tensor-parallel-size", tp)
    errs = []
    if fl.has("--sequence-parallel") and tp == 1:
        errs.append("--sequence-parallel with tp 1 (Megatron drops it silently)")
    if cp > 1 and fl.int("--seq-length") % (2 * cp):
        errs.append(f"seq_length % (2 * cp({cp})) != 0")
    if ep > 1 and fl.int("--num-experts") % ep:
        errs.append(f"num_experts % ep({ep}) != 0")
    if (tp * cp * dp) % (etp * ep):
        errs.append(f"parallel_state: tp*cp*dp({tp * cp * dp}) % (etp({etp}) * ep({ep})) != 0")
    if (tp > 1 or cp > 1) and env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        errs.append("validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS == 1 with tp or cp > 1 (pre-Blackwell)")
    return errs


def _deepspeed(fl: Flags, zero_stage: int | None) -> list[str]:
    """Megatron-DeepSpeed: --no-pipeline-parallel iff pp == 1 here; ZeRO-2/3 only without the pipe engine;
    --zero-stage drives zero.Init and must equal ds_config.json's stage."""
    errs = []
    pp = fl.int("--pipeline-model-parallel-size", 1)
    if fl.has("--no-pipeline-parallel") != (pp == 1):
        errs.append(f"--no-pipeline-parallel must be given exactly when pp == 1 (pp {pp})")
    stage = fl.int("--zero-stage")
    if pp > 1 and stage >= 2:
        errs.append(f"zero stage {stage} with DeepSpeed's pipeline engine (pp {pp})")
    if zero_stage is not None and stage != zero_stage:
        errs.append(f"--zero-stage {stage} != ds_config.json stage {zero_stage}")
    return errs


def megatron_rules(fl: Flags, world: int, env: dict[str, str], zero_stage: int | None = None) -> list[str]:
    tp, pp, cp = (fl.int(n, 1) for n in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                          "--context-parallel-size"))
    if world % (tp * pp * cp):
        return [f"world_size({world}) % (tp*pp*cp = {tp * pp * cp}) != 0"]
    dp = world // (tp * pp * cp)
    errs = _batch(fl, dp) + _pipeline_split(fl) + _overlap_and_precision(fl) + _parallel(fl, dp, env)
    if fl.has("--deepspeed"):
        errs += _deepspeed(fl, zero_stage)
    return errs
