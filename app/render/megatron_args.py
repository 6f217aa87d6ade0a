"""Megatron-LM (core_v0.16) and Megatron-DeepSpeed arguments for a plan, as data: sections of flags.

Flag names are the ones each project's `arguments.py` defines (Megatron-LM generates many from megatron-core's
dataclass fields: `--tensor-model-parallel-size`, `--sequence-parallel`, `--recompute-granularity`, ...).
Megatron-DeepSpeed is an older fork with its own names for some (`--num-key-value-heads`,
`--use-rotary-position-embeddings`, `--use-flash-attn-v2`); the two dialects differ only where the projects do.
Values that follow from the plan (timeouts, GC, the CPU optimizer, the FP8 recipe) are the plan's decisions.
"""

from __future__ import annotations

from app.render.deepspeed_config import LossScale, deepspeed_decision
from app.render.facts import Facts
from app.render.flags import Flag, Section, flag, flag_name, group_words
from app.render.megatron_model import fusion_flags, model_flags, moe_flags
from app.render.megatron_parallel import parallel_flags
from app.render.slurm import exit_duration_minutes


def batch_flags(f: Facts) -> list[Flag]:
    return [flag("--micro-batch-size", f.micro_batch_size), flag("--global-batch-size", f.global_batch_size)]


def _fp8_flags(f: Facts) -> list[Flag]:
    """Transformer Engine FP8: the hybrid format with the plan's recipe; delayed scaling keeps an amax history
    (the other recipes scale from the current tensor or block); FP8 primary weights where planned (they need the
    distributed optimizer or Megatron-FSDP, arguments.py L655-657)."""
    recipe = f.decisions.fp8_recipe or "tensorwise"
    out = [flag("--fp8-format", "hybrid"), flag("--fp8-recipe", recipe)]
    if recipe == "delayed":
        out += [flag("--fp8-amax-history-len", 1024), flag("--fp8-amax-compute-algo", "max")]
    if f.par.fp8_param_gather:
        out.append(flag("--fp8-param-gather"))
    return out


def precision_flags(f: Facts) -> list[Flag]:
    precision = f.training.precision
    if precision == "fp16":
        out = [flag("--fp16")]
        if f.framework == "megatron":  # under DeepSpeed the ds_config fp16 block scales the loss
            ls = LossScale()
            out += [
                flag("--initial-loss-scale", 2**ls.initial_scale_power),
                flag("--min-loss-scale", ls.min_loss_scale),
                flag("--loss-scale-window", ls.loss_scale_window),
                flag("--hysteresis", ls.hysteresis),
            ]
        return out
    out = [flag("--bf16")]
    if f.framework == "megatron" and (f.par.grad_reduce_dtype or f.training.reduce_dtype) == "bf16":
        out.append(flag("--grad-reduce-in-bf16"))  # else bf16 keeps fp32 main grads (arguments.py L712-724)
    if precision == "fp8":
        out += _fp8_flags(f)
    if f.training.optimizer_states == "bf16":  # OptimizerConfig: needs the distributed optimizer and TE's FusedAdam
        out += [
            flag("--use-precision-aware-optimizer"),
            flag("--exp-avg-dtype", "bf16"),
            flag("--exp-avg-sq-dtype", "bf16"),
        ]
    return out


def recompute_flags(f: Facts) -> list[Flag]:
    """Full recompute with the plan's method and layer count (Megatron's TransformerConfig requires both); selective
    with the plan's modules (default core_attn); or, instead of recomputation, the layers whose activations are
    offloaded to the host."""
    par = f.par
    if par.cpu_offloading_num_layers:  # Megatron-LM sets cpu_offloading from it (arguments.py L1236-1237)
        return [flag("--cpu-offloading-num-layers", par.cpu_offloading_num_layers)]
    if par.recompute == "selective":
        out = [flag("--recompute-granularity", "selective")]
        if par.recompute_modules and f.framework == "megatron":
            out.append(flag("--recompute-modules", *par.recompute_modules))
        return out
    if par.recompute != "full":
        return []
    out = [
        flag("--recompute-granularity", "full"),
        flag("--recompute-method", par.recompute_method or "uniform"),
        flag("--recompute-num-layers", par.recompute_num_layers or 1),
    ]
    if f.framework == "megatron-deepspeed":
        out.append(flag("--deepspeed-activation-checkpointing"))  # the ds_config activation_checkpointing block
    return out


def runtime_flags(f: Facts) -> list[Flag]:
    """What keeps a long job alive and stoppable: the collective timeout from the predicted step, manual GC at
    scale (one rank's GC pause stalls every collective), SIGTERM handling (save, then exit) and, under a Slurm
    time limit, a stop before it."""
    d = f.decisions
    out = [flag("--distributed-timeout-minutes", d.distributed_timeout_minutes)]
    if saves_on_stop(f):
        out.append(flag("--exit-signal-handler"))
        minutes = exit_duration_minutes(f)
        if minutes is not None:
            out.append(flag("--exit-duration-in-mins", minutes))
    if f.framework == "megatron" and d.manual_gc_interval is not None:
        out += [flag("--manual-gc"), flag("--manual-gc-interval", d.manual_gc_interval)]
    return out


def saves_on_stop(f: Facts) -> bool:
    """Whether the job may save on SIGTERM and before the time limit: Megatron-LM saves there only with --save
    (training.py `if args.save`); Megatron-DeepSpeed saves unconditionally (megatron/training.py L1335-1361 at
    4efb479d), and without --save `get_checkpoint_name(None, ...)` raises: every rank exited with a traceback
    instead of stopping (QA 2026-12-07)."""
    return f.framework != "megatron-deepspeed" or f.options.checkpoint_dir is not None


def save_interval(f: Facts) -> int:
    """Steps between checkpoints: the render option when it is given, else the plan's interval (Daly's optimum for
    the cluster's MTBF and the checkpoint's save time, app/planner/goodput.py)."""
    checkpoint = f.plan.checkpoint
    if "save_interval" in f.options.model_fields_set or checkpoint is None:
        return f.options.save_interval
    return checkpoint.interval_steps


def schedule_flags(f: Facts) -> list[Flag]:
    o = f.options
    out = [
        flag("--train-iters", o.train_iters),
        flag("--lr", o.lr),
        flag("--min-lr", o.final_lr),
        flag("--lr-decay-style", "cosine"),
        flag("--lr-warmup-iters", o.warmup_iters),
        flag("--optimizer", "adam"),
        flag("--adam-beta1", 0.9),
        flag("--adam-beta2", 0.95),
        flag("--weight-decay", o.weight_decay),
        flag("--clip-grad", o.clip_grad),
        flag("--seed", o.seed),
        flag("--log-interval", o.log_interval),
        flag("--eval-interval", o.eval_interval),
        flag("--eval-iters", o.eval_iters),
    ]
    if f.framework == "megatron":
        out.append(flag("--log-throughput"))
    if o.checkpoint_dir:
        out += [
            flag("--save", o.checkpoint_dir),
            flag("--load", o.checkpoint_dir),
            flag("--save-interval", save_interval(f)),
        ]
    return out


def data_cache_path(f: Facts) -> str | None:
    o = f.options
    if o.data_cache_path:
        return o.data_cache_path
    return f"{o.checkpoint_dir}/data_cache" if o.checkpoint_dir and o.data_path else None


def data_flags(f: Facts) -> list[Flag]:
    """Mock data or a tokenized dataset. Megatron-LM gets --no-create-attention-mask-in-dataloader: with causal
    (fused or unfused) attention no mask is needed, and the default builds a dense seq x seq mask per sample in
    every worker (16 GiB at 128K; Megatron's own Llama-3 scripts pass it)."""
    o, megatron = f.options, f.framework == "megatron"
    mask = [flag("--no-create-attention-mask-in-dataloader")] if megatron else []
    if o.data_path is None:
        if not megatron:
            raise ValueError(
                "data_path: Megatron-DeepSpeed has no mock data; give the tokenized dataset's path "
                "and its tokenizer_type"
            )
        # NullTokenizer adds its end-of-document token to --vocab-size (tokenizer.py _NullTokenizer.vocab_size):
        # V - 1 gives the model's V rows, which the vocabulary divisor then leaves unpadded.
        return [
            flag("--mock-data"),
            flag("--tokenizer-type", "NullTokenizer"),
            flag("--vocab-size", f.model.vocab_size - 1),
            *mask,
        ]
    out = [flag("--data-path", o.data_path), flag("--split", "949,50,1")]
    assert o.tokenizer_type is not None  # RenderOptions requires it with data_path
    mds_names = {"HuggingFaceTokenizer": "HFTokenizer"}
    name = o.tokenizer_type if megatron else mds_names.get(o.tokenizer_type, o.tokenizer_type)
    out.append(flag("--tokenizer-type", name))
    if o.tokenizer_model:
        out.append(flag("--tokenizer-model", o.tokenizer_model))
    if o.vocab_file and o.merge_file:
        out += [flag("--vocab-file", o.vocab_file), flag("--merge-file", o.merge_file)]
    cache = data_cache_path(f)
    if cache:  # one shared directory: rank 0 builds the index cache, every other rank reads it
        out.append(flag("--data-cache-path", cache))
    return out + mask


def deepspeed_flags(f: Facts) -> list[Flag]:
    """Megatron-DeepSpeed: `--zero-stage` drives `deepspeed.zero.Init` (stage 3) and must match ds_config.json,
    whose path train.sh (or plan.json) appends as `--deepspeed_config`. ZeRO-Offload needs DeepSpeedCPUAdam as the
    client optimizer (DeepSpeed raises ZeRORuntimeException for any other): `--cpu-optimizer` makes
    Megatron-DeepSpeed build it (megatron/optimizer/__init__.py L83-89)."""
    if f.framework != "megatron-deepspeed":
        return []
    out = [flag("--deepspeed"), flag("--zero-stage", f.par.zero_stage)]
    if deepspeed_decision(f).client_optimizer.endswith("DeepSpeedCPUAdam"):
        out.append(flag("--cpu-optimizer"))
    return out


def sections(f: Facts) -> list[Section]:
    """Every flag of the plan, grouped; empty sections are dropped."""
    groups = [
        ("parallelism", parallel_flags(f)),
        ("model", model_flags(f)),
        ("mixture of experts", moe_flags(f)),
        ("fused kernels", fusion_flags(f)),
        ("batch", batch_flags(f)),
        ("precision", precision_flags(f)),
        ("activation recomputation", recompute_flags(f)),
        ("deepspeed", deepspeed_flags(f)),
        ("runtime: timeouts, garbage collection, graceful stop", runtime_flags(f)),
        ("optimizer and schedule", schedule_flags(f)),
        ("data", data_flags(f)),
        ("extra arguments (render options)", group_words(f.options.extra_args)),
    ]
    out = [Section(title, tuple(flags)) for title, flags in groups if flags]
    _refuse_duplicates(out)
    return out


# Flags that set one thing under different names: an extra argument from a group the plan already sets contradicts
# it (Megatron's validate_args aborts at start-up: --fp16 with --bf16, two interleaving flags, --recompute-activations
# with a recompute granularity, --data-path with --mock-data; or it silently trains another plan: --fp8-format on a
# bf16 plan)
SAME_SETTING: tuple[tuple[str, frozenset[str]], ...] = (
    ("the precision", frozenset({"--fp16", "--bf16", "--fp8-format"})),
    (
        "the interleaving",
        frozenset({"--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank"}),
    ),
    (
        "the recomputation",
        frozenset(
            {"--recompute-activations", "--recompute-granularity", "--recompute-method", "--recompute-num-layers"}
        ),
    ),
    ("the data", frozenset({"--data-path", "--mock-data"})),
)


def _refuse_duplicates(secs: list[Section]) -> None:
    seen: dict[str, bool] = {}  # flag -> set by extra_args
    for sec in secs:
        extra = sec.title.startswith("extra")
        for fl in sec.flags:
            name = flag_name(fl.name)
            if name in seen:
                where = "extra_args" if extra else sec.title
                if extra and seen[name]:
                    raise ValueError(f"extra_args: {fl.name} is given twice")
                raise ValueError(
                    f"{where}: {fl.name} is already set by the plan; change the plan or the render "
                    f"options instead of repeating it"
                )
            if extra:
                for what, group in SAME_SETTING:
                    planned = sorted(f for f, by_extra in seen.items() if f in group and not by_extra)
                    if name in group and planned:
                        raise ValueError(
                            f"extra_args: {fl.name} contradicts the plan's {', '.join(planned)} ({what}); change the "
                            f"plan or the render options instead"
                        )
            seen[name] = extra
