"""Megatron-LM's `validate_args` checks that megatron-core's config classes do not make (shared/docs/rules.md
sec. 1, Megatron-LM core_v0.16), and Megatron-DeepSpeed's (sec. 3), applied to rendered flags. Each returns the
violations as messages; an empty list means Megatron would start."""

from __future__ import annotations

from megatron_check import Flags


def _batch(fl: Flags, dp: int) -> list[str]:
    """megatron.core.num_microbatches_calculator: the real calculator Megatron-LM builds from the flags."""
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator

    try:
        calc = ConstantNumMicroBatchesCalculator(
            fl.int("--global-batch-size"), fl.int("--micro-batch-size"), dp, decrease_batch_size_if_needed=False, rank=0
        )
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
    elif fl.has("--pipeline-model-parallel-layout"):
        return []  # megatron-core's PipelineParallelLayerLayout validates the string against layers and pp
    elif not (first or last):
        n = (
            layers
            + fl.has("--account-for-embedding-in-pipeline-split")
            + fl.has("--account-for-loss-in-pipeline-split")
        )
        if n % pp:
            return [f"num_layers({layers}) + accounted embedding/loss = {n}, % pp({pp}) != 0 (L985-998)"]
    return []


def _overlap_and_precision(fl: Flags) -> list[str]:
    errs = []
    sharded = fl.has("--use-distributed-optimizer") or fl.has("--use-megatron-fsdp")
    if fl.has("--overlap-param-gather") and not (sharded and fl.has("--overlap-grad-reduce")):
        errs.append(
            "--overlap-param-gather needs --use-distributed-optimizer (or Megatron-FSDP) and "
            "--overlap-grad-reduce (arguments.py L597-601)"
        )
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
    return errs


def _connections(fl: Flags, env: dict[str, str], blackwell: bool) -> list[str]:
    """arguments.py L927-953 (core_v0.16.1): Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 (L686-688);
    else with TP or CP > 1 before Blackwell it asserts == 1 (EP-overlap only warns)."""
    tp, cp = fl.int("--tensor-model-parallel-size", 1), fl.int("--context-parallel-size", 1)
    value = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if fl.has("--use-megatron-fsdp"):
        return ["Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1"] if value == "1" else []
    if fl.has("--deepspeed"):
        if fl.has("--sequence-parallel") and value != "1":
            return ["Megatron-DeepSpeed raises without CUDA_DEVICE_MAX_CONNECTIONS=1 under sequence parallelism"]
        return []
    if (tp > 1 or cp > 1) and not blackwell and not fl.has("--overlap-moe-expert-parallel-comm") and value != "1":
        return ["validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS == 1 with tp or cp > 1 (pre-Blackwell)"]
    return []


def _features(fl: Flags) -> list[str]:
    """validate_args rules of the newer flags (core_v0.16.1 arguments.py)."""
    errs = []
    if fl.has("--use-megatron-fsdp") and (fl.one("--ckpt-format") if fl.has("--ckpt-format") else "") != "fsdp_dtensor":
        errs.append("Megatron-FSDP only supports --ckpt-format fsdp_dtensor (L689-690)")
    if fl.has("--fp8-param-gather") and not (fl.has("--use-distributed-optimizer") or fl.has("--use-megatron-fsdp")):
        errs.append("--fp8-param-gather needs the distributed optimizer or Megatron-FSDP (L655-657)")
    if fl.has("--tp-comm-overlap") and not fl.has("--sequence-parallel"):
        errs.append("--tp-comm-overlap needs --sequence-parallel")
    if (
        fl.has("--cp-comm-type")
        and fl.one("--cp-comm-type") == "a2a+p2p"
        and not fl.has("--hierarchical-context-parallel-sizes")
    ):
        errs.append("--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes (L405-408)")
    if fl.has("--exit-duration-in-mins") and fl.int("--exit-duration-in-mins") < 1:
        errs.append("--exit-duration-in-mins must leave training time")
    return errs


def _cpu_optimizer(fl: Flags, ds_config: dict | None) -> list[str]:
    """DeepSpeed raises ZeRORuntimeException for ZeRO-Offload unless the client optimizer is DeepSpeedCPUAdam
    (engine.py _configure_optimizer) or zero_force_ds_cpu_optimizer is false; Megatron-DeepSpeed passes
    DeepSpeedCPUAdam only with --cpu-optimizer (megatron/optimizer/__init__.py L83-89)."""
    if ds_config is None:
        return []
    offload = ds_config["zero_optimization"].get("offload_optimizer", {}).get("device", "none")
    forced = ds_config.get("zero_force_ds_cpu_optimizer", True)
    if offload != "none" and forced and not fl.has("--cpu-optimizer"):
        return [
            f"offload_optimizer {offload} without --cpu-optimizer: Megatron-DeepSpeed passes a GPU Adam and "
            f"deepspeed.initialize raises ZeRORuntimeException"
        ]
    return []


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


def megatron_rules(
    fl: Flags,
    world: int,
    env: dict[str, str],
    zero_stage: int | None = None,
    blackwell: bool = False,
    ds_config: dict | None = None,
) -> list[str]:
    tp, pp, cp = (
        fl.int(n, 1)
        for n in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size")
    )
    if world % (tp * pp * cp):
        return [f"world_size({world}) % (tp*pp*cp = {tp * pp * cp}) != 0"]
    dp = world // (tp * pp * cp)
    errs = _batch(fl, dp) + _pipeline_split(fl) + _overlap_and_precision(fl) + _parallel(fl, dp, env)
    errs += _connections(fl, env, blackwell) + _features(fl)
    if fl.has("--deepspeed"):
        errs += _deepspeed(fl, zero_stage) + _cpu_optimizer(fl, ds_config)
    return errs
