"""Megatron-LM (core_v0.16) and Megatron-DeepSpeed arguments for a plan, as data: sections of flags.

Flag names are the ones each project's `arguments.py` defines (Megatron-LM generates many from megatron-core's
dataclass fields: `--tensor-model-parallel-size`, `--sequence-parallel`, `--recompute-granularity`, ...).
Megatron-DeepSpeed is an older fork with its own names for some (`--num-key-value-heads`,
`--use-rotary-position-embeddings`, `--use-flash-attn-v2`); the two dialects differ only where the projects do.
"""

from __future__ import annotations

from app.render.deepspeed_config import LossScale
from app.render.facts import Facts
from app.render.flags import Flag, Section, flag, group_words
from app.render.megatron_model import model_flags, moe_flags


def _pipeline_flags(f: Facts) -> list[Flag]:
    par = f.par
    out: list[Flag] = []
    uneven = par.first_stage_layers is not None or par.last_stage_layers is not None
    if par.vpp > 1:
        if uneven:  # validate_args: layers-per-virtual-stage cannot be combined with first/last-stage layers
            out.append(flag("--num-virtual-stages-per-pipeline-rank", par.vpp))
        else:
            out.append(flag("--num-layers-per-virtual-pipeline-stage", f.plan.layout.stage_layers[0] // par.vpp))
        if not f.training.overlap_p2p_comm and par.pp > 2:
            out.append(flag("--no-overlap-p2p-communication"))
    if par.first_stage_layers is not None:
        out.append(flag("--decoder-first-pipeline-num-layers", par.first_stage_layers))
    if par.last_stage_layers is not None:
        out.append(flag("--decoder-last-pipeline-num-layers", par.last_stage_layers))
    return out


def parallel_flags(f: Facts) -> list[Flag]:
    par, megatron = f.par, f.framework == "megatron"
    out = [flag("--tensor-model-parallel-size", par.tp), flag("--pipeline-model-parallel-size", par.pp)]
    if megatron:
        out += _pipeline_flags(f)
    elif par.pp == 1:
        out.append(flag("--no-pipeline-parallel"))  # DeepSpeed's mpu path: ZeRO 1-3 instead of the pipe engine
    if par.sequence_parallel and par.tp > 1:
        out.append(flag("--sequence-parallel"))
    if par.cp > 1:
        out.append(flag("--context-parallel-size", par.cp))
    if megatron and par.distributed_optimizer:
        out.append(flag("--use-distributed-optimizer"))
    if megatron and f.training.overlap_grad_reduce and par.dp * par.cp > 1:
        out.append(flag("--overlap-grad-reduce"))
        if par.distributed_optimizer:
            out.append(flag("--overlap-param-gather"))
    return out


def batch_flags(f: Facts) -> list[Flag]:
    return [flag("--micro-batch-size", f.micro_batch_size), flag("--global-batch-size", f.global_batch_size)]


def precision_flags(f: Facts) -> list[Flag]:
    precision = f.training.precision
    if precision == "fp16":
        out = [flag("--fp16")]
        if f.framework == "megatron":  # under DeepSpeed the ds_config fp16 block scales the loss
            ls = LossScale()
            out += [flag("--initial-loss-scale", 2**ls.initial_scale_power),
                    flag("--min-loss-scale", ls.min_loss_scale), flag("--loss-scale-window", ls.loss_scale_window),
                    flag("--hysteresis", ls.hysteresis)]
        return out
    out = [flag("--bf16")]
    if precision == "fp8":
        out += [flag("--fp8-format", "hybrid"), flag("--fp8-amax-history-len", 1024),
                flag("--fp8-amax-compute-algo", "max")]
    return out


def recompute_flags(f: Facts) -> list[Flag]:
    recompute = f.par.recompute
    if recompute == "selective":
        return [flag("--recompute-granularity", "selective")]
    if recompute != "full":
        return []
    out = [flag("--recompute-granularity", "full"), flag("--recompute-method", "uniform"),
           flag("--recompute-num-layers", 1)]
    if f.framework == "megatron-deepspeed":
        out.append(flag("--deepspeed-activation-checkpointing"))  # the ds_config activation_checkpointing block
    return out


def schedule_flags(f: Facts) -> list[Flag]:
    o = f.options
    out = [
        flag("--train-iters", o.train_iters), flag("--lr", o.lr), flag("--min-lr", o.final_lr),
        flag("--lr-decay-style", "cosine"), flag("--lr-warmup-iters", o.warmup_iters),
        flag("--optimizer", "adam"), flag("--adam-beta1", 0.9), flag("--adam-beta2", 0.95),
        flag("--weight-decay", o.weight_decay), flag("--clip-grad", o.clip_grad), flag("--seed", o.seed),
        flag("--log-interval", o.log_interval), flag("--eval-interval", o.eval_interval),
        flag("--eval-iters", o.eval_iters),
    ]
    if f.framework == "megatron":
        out.append(flag("--log-throughput"))
    if o.checkpoint_dir:
        out += [flag("--save", o.checkpoint_dir), flag("--load", o.checkpoint_dir),
                flag("--save-interval", o.save_interval)]
    return out


def data_flags(f: Facts) -> list[Flag]:
    o = f.options
    if o.data_path is None:
        if f.framework != "megatron":
            raise ValueError("data_path: Megatron-DeepSpeed has no mock data; give the tokenized dataset's path "
                             "and its tokenizer_type")
        return [flag("--mock-data"), flag("--tokenizer-type", "NullTokenizer"),
                flag("--vocab-size", f.model.vocab_size)]
    out = [flag("--data-path", o.data_path), flag("--split", "949,50,1")]
    assert o.tokenizer_type is not None  # RenderOptions requires it with data_path
    mds_names = {"HuggingFaceTokenizer": "HFTokenizer"}
    name = mds_names.get(o.tokenizer_type, o.tokenizer_type) if f.framework != "megatron" else o.tokenizer_type
    out.append(flag("--tokenizer-type", name))
    if o.tokenizer_model:
        out.append(flag("--tokenizer-model", o.tokenizer_model))
    if o.vocab_file and o.merge_file:
        out += [flag("--vocab-file", o.vocab_file), flag("--merge-file", o.merge_file)]
    return out


def deepspeed_flags(f: Facts) -> list[Flag]:
    """Megatron-DeepSpeed: `--zero-stage` drives `deepspeed.zero.Init` (stage 3) and must match ds_config.json,
    whose path train.sh (or plan.json) appends as `--deepspeed_config`."""
    if f.framework != "megatron-deepspeed":
        return []
    return [flag("--deepspeed"), flag("--zero-stage", f.par.zero_stage)]


def sections(f: Facts) -> list[Section]:
    """Every flag of the plan, grouped; empty sections are dropped."""
    groups = [
        ("parallelism", parallel_flags(f)),
        ("model", model_flags(f)),
        ("mixture of experts", moe_flags(f)),
        ("batch", batch_flags(f)),
        ("precision", precision_flags(f)),
        ("activation recomputation", recompute_flags(f)),
        ("deepspeed", deepspeed_flags(f)),
        ("optimizer and schedule", schedule_flags(f)),
        ("data", data_flags(f)),
        ("extra arguments (render options)", group_words(f.options.extra_args)),
    ]
    out = [Section(title, tuple(flags)) for title, flags in groups if flags]
    _refuse_duplicates(out)
    return out


def _refuse_duplicates(secs: list[Section]) -> None:
    seen: set[str] = set()
    for sec in secs:
        for fl in sec.flags:
            if fl.name in seen:
                where = "extra_args" if sec.title.startswith("extra") else sec.title
                raise ValueError(f"{where}: {fl.name} is already set by the plan; change the plan or the render "
                                 f"options instead of repeating it")
            seen.add(fl.name)
