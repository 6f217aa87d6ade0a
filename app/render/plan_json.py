"""plan.json, the launcher's input, built with the launcher's own spec classes (launcher/spec.py owns the format).

The entrypoint is the training script with every argument written out (`{run_dir}` is the launcher's run
directory, where it writes the plan's `files`); the environment is the same NCCL and framework variables the
scripts export. The launcher never imports the renderer; the renderer imports only `launcher.spec`.
"""

from __future__ import annotations

import json

from app.planner.goodput import goodput
from app.render import launch
from app.render.facts import Facts
from app.render.flags import argv
from app.render.megatron_args import save_interval, sections
from app.render.words import Word, comment
from launcher import spec

RUN_DIR = "{run_dir}"
RENDERER_VERSION = "0.1.0"  # app.render.__version__ (imported from here to avoid a cycle)
# Scripts for a human at a cluster; the launcher builds its own commands from the plan.
NOT_FOR_LAUNCHER = ("plan.json",)


def _script_path(f: Facts) -> tuple[str, str | None]:
    """(script, working_dir): relative scripts resolve against the workdir when one is given."""
    workdir, script = f.options.workdir, f.entrypoint
    if workdir and not script.startswith("/"):
        script = f"{workdir}/{script}"
    return script, workdir


def entrypoint_args(f: Facts) -> tuple[str, ...]:
    config: Word = f"{RUN_DIR}/ds_config.json"
    if f.framework == "deepspeed":
        words = [w for name, values in launch.trainer_flags(f, config) for w in (name, *values)]
    else:
        words = list(argv(sections(f)))
        if f.framework == "megatron-deepspeed":
            words += ["--deepspeed_config", config]
    return tuple(str(w) for w in words)


def _files(f: Facts, files: dict[str, str]) -> dict[str, str]:
    _hosts, known = launch.hostfile_hosts(f)
    skip = (*NOT_FOR_LAUNCHER, *(() if known else ("hostfile",)))  # placeholders would mislead the launcher
    return {name: text for name, text in files.items() if name not in skip}


def _prediction(f: Facts) -> spec.Prediction:
    """The planner's numbers: `launcher bench` compares them with a run, the launcher's watchdog scales its
    timeouts by the step's upper bound and the checkpoint's save and load times."""
    est, cp = f.plan.estimate, f.plan.checkpoint
    interval = est.time.step_interval
    return spec.Prediction(
        tokens_per_s=est.time.tokens_per_s,
        step_s=est.time.step_s,
        peak_memory_bytes=tuple(s.total_bytes for s in est.memory.stages),
        step_s_high=max(interval.high, est.time.step_s) if interval else None,
        checkpoint_save_s=cp.save_s if cp else None,
        checkpoint_load_s=cp.load_s if cp else None,
        checkpoint_bytes=cp.size_bytes if cp else None,
        checkpoint_interval_steps=save_interval(f) if f.options.checkpoint_dir else None,
        goodput=_goodput(f),
    )


def _goodput(f: Facts) -> float | None:
    """The plan's goodput at the interval the files save at: the render option's, when given, not Daly's (plan.json
    said 0.9907 beside --save-interval 20, whose goodput is 0.818, QA 2026-12-07)."""
    cp = f.plan.checkpoint
    if cp is None:
        return None
    steps = save_interval(f)
    if steps == cp.interval_steps:
        return cp.goodput
    return goodput(steps * f.plan.estimate.time.step_s, cp.save_s, cp.restart_s, cp.mtbf_s)


def _model(f: Facts) -> spec.Model | None:
    """The shape in the launcher's terms; None where its Model cannot say it (other position embeddings)."""
    m = f.model
    position = m.position_embedding_type
    if position not in ("rope", "learned_absolute"):
        return None
    return spec.Model(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        num_attention_heads=m.num_attention_heads,
        vocab_size=m.vocab_size,
        seq_length=m.seq_length,
        name=comment(m.name),
        num_query_groups=m.num_query_groups,
        ffn_hidden_size=m.ffn_hidden_size,
        swiglu=m.swiglu,
        normalization=m.normalization,
        position_embedding_type=position,
        untie_embeddings_and_output_weights=m.untie_embeddings_and_output_weights,
        kv_channels=m.kv_channels,
    )


def _hardware(f: Facts) -> spec.Hardware:
    c, gpu = f.cluster, f.cluster.gpu
    return spec.Hardware(
        name=comment(gpu.name),
        memory_bytes=gpu.memory_bytes,
        bf16_TFLOPs=gpu.bf16_TFLOPs,
        fp16_TFLOPs=gpu.fp16_TFLOPs,
        intra_node_GBps=c.intra_bw / 1e9,
        inter_node_GBps=c.inter_bw / 1e9,
        host_to_device_GBps=c.h2d_bw / 1e9,
        cpu_adam_params_per_s=c.cpu_adam_params_per_s,
    )


def _strategy(f: Facts) -> spec.Strategy:
    par = f.par
    return spec.Strategy(
        schedule=par.schedule or "1f1b",
        first_stage_layers=par.first_stage_layers,
        last_stage_layers=par.last_stage_layers,
        pipeline_layout=par.pipeline_layout,
        account_for_embedding_in_pipeline_split=par.account_for_embedding_in_pipeline_split,
        account_for_loss_in_pipeline_split=par.account_for_loss_in_pipeline_split,
        sequence_parallel=par.sequence_parallel and par.tp > 1,
        distributed_optimizer=par.distributed_optimizer,
        megatron_fsdp=par.megatron_fsdp,
        offload_optimizer=par.offload_optimizer,
        offload_param=par.offload_param,
        recompute=par.recompute,
        recompute_method=par.recompute_method,
        recompute_num_layers=par.recompute_num_layers,
        recompute_modules=par.recompute_modules or (),
        cpu_offloading_num_layers=par.cpu_offloading_num_layers,
        cp_comm_type=par.cp_comm_type,
        hierarchical_cp_sizes=par.hierarchical_cp_sizes or (),
        precision=f.training.precision,
        grad_reduce_dtype=reduced_in(f),
        fp8_recipe=f.decisions.fp8_recipe,
        fp8_param_gather=par.fp8_param_gather,
        optimizer_states=f.training.optimizer_states,
        tp_comm_overlap=par.tp_comm_overlap,
        moe_ep_overlap=par.moe_ep_overlap,
        moe_token_dispatcher=par.moe_token_dispatcher,
    )


def reduced_in(f: Facts) -> str:
    """The dtype the gradients are reduced in: under DeepSpeed, ds_config.json's communication_data_type (ZeRO-2/3
    send bf16 whatever fp32 accumulation was asked for; QA 2026-12-07: plan.json said fp32), else the plan's."""
    if f.decisions.deepspeed is not None:
        return f.decisions.deepspeed.communication_data_type
    if f.training.precision == "fp16":  # --fp16 keeps fp16 gradients (TrainingSpec refuses another dtype with it)
        return "fp16"
    return f.par.grad_reduce_dtype or f.training.reduce_dtype


def build_plan(f: Facts, files: dict[str, str]) -> spec.Plan:
    o, par = f.options, f.par
    script, workdir = _script_path(f)
    return spec.Plan(
        # the launcher's grace period is torchrun's --shutdown-timeout and its own SIGKILL: the plan's graceful-stop
        # margin, as TORCH_ELASTIC_SHUTDOWN_TIMEOUT, sbatch's --signal and the pod's grace period have it (it was
        # torch's 30 s, which killed a Megatron save on SIGTERM that the plan predicts takes minutes)
        job=spec.Job(
            name=f.job_name,
            backend="torchrun",
            max_restarts=o.max_restarts,
            grace_period_s=float(f.decisions.graceful_stop_s),
        ),
        world=spec.World(
            num_nodes=f.num_nodes,
            gpus_per_node=f.gpus_per_node,
            hosts=f.hosts,
            master_addr=f.master_addr or "127.0.0.1",
            master_port=o.master_port,
            accelerator=o.accelerator,
        ),
        parallel=spec.Parallel(
            dp=par.dp,
            global_batch_size=f.global_batch_size,
            tp=par.tp,
            pp=par.pp,
            vpp=par.vpp,
            cp=par.cp,
            ep=par.ep,
            etp=par.expert_tp,
            zero_stage=par.zero_stage,
            micro_batch_size=f.micro_batch_size,
            gradient_accumulation_steps=f.grad_accum_steps,
        ),
        entrypoint=spec.Entrypoint(
            script=script,
            args=entrypoint_args(f),
            working_dir=workdir,
            python=None if o.python == "python" else o.python,
        ),
        env=f.env_map,
        files=_files(f, files),
        model=_model(f),
        prediction=_prediction(f),
        hardware=_hardware(f),
        strategy=_strategy(f),
        meta={
            "summary": comment(f.summary),
            "framework": f.framework,
            "stack": f.training.software.name,  # the stack modelled (deepspeed-hf, megatron-core...), not the framework
            "planner_version": f.planner_version,
            "renderer_version": RENDERER_VERSION,
        },
    )


def plan_json(f: Facts, files: dict[str, str]) -> str:
    return json.dumps(build_plan(f, files).to_dict(), indent=2) + "\n"
