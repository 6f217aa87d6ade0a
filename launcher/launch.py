"""The `run`, `dry-run` and `show` verbs: plan.json -> commands -> checks -> run directory -> runner."""

from __future__ import annotations

import shlex
import sys

from launcher import rundir, spec
from launcher.backends import build
from launcher.checks import FAIL, Check, is_local_command
from launcher.command import Command, launch_argv
from launcher.context import LaunchContext, make_context
from launcher.events import EventLog
from launcher.limits import Limits, int_arg, log_interval
from launcher.runner import Runner, RunPolicy
from launcher.storage import check_run_dir, quick_checks, save_dirs

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (mypy reads it so), without importing typing: docs/launcher.md
if TYPE_CHECKING:
    import argparse
    from typing import BinaryIO

    from launcher.backends import Backend
    from launcher.strategy import Strategy


def context_from_args(args: argparse.Namespace) -> LaunchContext:
    plan = spec.load(args.plan)
    return make_context(
        plan,
        args.plan,
        node_rank=args.node_rank,
        run_dir=args.run_dir,
        backend=args.backend,
        extra_args=tuple(args.extra),
    )


def checks_table(checks: list[Check]) -> str:
    from launcher.table import table  # only when checks are shown: not on the way to the job's start

    return table(("check", "status", "detail", "what to do"), [(c.name, c.status, c.detail, c.fix) for c in checks])


def launch(ctx: LaunchContext, console: BinaryIO | None = None) -> int:
    """Build, check, prepare the run directory and run; the job's exit code (2: refused before starting)."""
    backend, commands = build(ctx)
    failed = [c for c in quick_checks(ctx, commands) if c.status == FAIL]
    if failed:
        sys.stderr.write(f"launcher: refusing to start {ctx.plan.job.name}:\n{checks_table(failed)}\n")
        return 2
    try:
        lock = rundir.lock(ctx)
    except rundir.RunDirError as exc:
        sys.stderr.write(f"launcher: refusing to start {ctx.plan.job.name}: {exc}\n")
        return 2
    with lock:
        return _launch(ctx, backend, commands, console)


def _launch(ctx: LaunchContext, backend: Backend, commands: list[Command], console: BinaryIO | None) -> int:
    rundir.prepare(ctx, commands, backend.derived_files(ctx))
    log = EventLog(ctx.run_dir / f"launcher{ctx.suffix}.log")
    log(f"run directory {ctx.run_dir}; backend {ctx.backend}; {len(commands)} command(s)")
    args = (*ctx.plan.entrypoint.args, *ctx.extra_args)
    policy = RunPolicy(
        ctx.plan.job.grace_period_s,
        ctx.plan.job.max_restarts,
        backend.restarts_inside,
        ctx.run_dir,
        Limits.from_plan(ctx.plan),
        ctx.caller_env.get("SLURM_JOB_ID"),
        int_arg(args, "--train-iters"),
        log_interval(args),
        ctx.resume_hint,
        tuple(save_dirs(ctx)) if any(is_local_command(c) for c in commands) else (),
    )
    try:
        return Runner(commands, policy, log, console).run()
    finally:
        log.close()


def run(args: argparse.Namespace) -> int:
    return launch(context_from_args(args))


def describe_command(command: Command) -> str:
    local = is_local_command(command)
    where = "this machine" if local else f"{command.host} (over ssh)"
    node = "every node" if command.node_rank is None else f"node {command.node_rank}"
    lines = [f"# {node} on {where}", f"# cwd: {command.cwd}", "# environment (exactly this, nothing else):"]
    lines += [f"#   {k}={v}" for k, v in sorted(command.env.items())]
    lines.append(shlex.join(command.argv))
    if not local:
        lines += ["# executed as:", shlex.join(launch_argv(command, False))]
    return "\n".join(lines)


def dry_run(args: argparse.Namespace) -> int:
    """Print every command per node with its exact environment, and the checks; create nothing. Exits 2, as `run`
    would refuse to start, when a check fails (a script can gate on it); 0 otherwise."""
    ctx = context_from_args(args)
    backend, commands = build(ctx)
    print(f"# plan {ctx.plan.job.name}: backend {ctx.backend}, run directory {ctx.run_dir} (not created)")
    for command in commands:
        print(describe_command(command) + "\n")
    files = {**ctx.plan.files, **backend.derived_files(ctx)}
    if files:
        print("# files written to the run directory: " + ", ".join(sorted(files)))
    checks = [*quick_checks(ctx, commands), check_run_dir(ctx)]  # run refuses a run directory it cannot make
    print(checks_table(checks))
    failed = [c.name for c in checks if c.status == FAIL]
    if failed:
        sys.stderr.write(f"launcher: run would refuse to start {ctx.plan.job.name}: failed {', '.join(failed)}\n")
        return 2
    return 0


def show(args: argparse.Namespace) -> int:
    plan = spec.load(args.plan)
    job, w, p, e = plan.job, plan.world, plan.parallel, plan.entrypoint
    rows = [
        (
            "job",
            f"{job.name}: backend {job.backend}, max_restarts {job.max_restarts}, "
            f"grace {job.grace_period_s:g} s, numa {job.numa_binding}, "
            f"OMP threads {job.omp_num_threads or 'per the backend (torchrun: 1)'}",
        ),
        (
            "world",
            f"{w.num_nodes} node(s) x {w.gpus_per_node} {w.accelerator} process(es) = {w.world_size}; "
            f"master {w.master_addr}:{w.master_port}" + (f"; hosts {', '.join(w.hosts)}" if w.hosts else ""),
        ),
        (
            "parallel",
            f"tp {p.tp} pp {p.pp} vpp {p.vpp} cp {p.cp} dp {p.dp} ep {p.ep} etp {p.etp}, ZeRO {p.zero_stage}; "
            f"batch {p.global_batch_size} = mbs {p.micro_batch_size} x gas "
            f"{p.gradient_accumulation_steps} x dp {p.dp}",
        ),
        ("entrypoint", shlex.join([e.python or "python", e.script, *e.args])),
        ("env", ", ".join(f"{k}={v}" for k, v in sorted(plan.env.items())) or "-"),
        ("files", ", ".join(f"{k} ({len(v)} B)" for k, v in sorted(plan.files.items())) or "-"),
    ]
    if plan.model:
        m = plan.model
        rows.append(
            (
                "model",
                f"{m.name}: {m.num_layers} layers, h {m.hidden_size}, {m.num_attention_heads} heads "
                f"of {m.head_size} ({m.query_groups} kv), ffn {m.ffn_size}, vocab {m.vocab_size}, seq {m.seq_length}",
            )
        )
    if plan.strategy:
        rows.append(("strategy", strategy_summary(plan.strategy, plan.parallel.cp)))
    if plan.prediction:
        pr = plan.prediction
        mem = ", ".join(f"{b / 2**30:.2f}" for b in pr.peak_memory_bytes) or "-"
        rows.append(
            (
                "prediction",
                f"{_rounded(pr.tokens_per_s, ',.0f')} tokens/s, step {_rounded(pr.step_s, '.3g')} s, "
                f"peak memory GiB per stage: {mem}",
            )
        )
        if pr.checkpoint_save_s is not None or pr.checkpoint_interval_steps is not None:
            rows.append(("checkpoint", checkpoint_summary(pr)))
    rows.append(("watchdog", watchdog_summary(plan)))
    from launcher.table import table

    print(table(("section", "summary"), rows))
    return 0


def strategy_summary(st: Strategy, cp: int = 1) -> str:
    """What megatron_args.txt / ds_config.json set, in the words of their flags: the schedule and the pipeline
    split, the sharding, recomputation and offload, CP communication (with context parallelism `cp` > 1: a plan
    without it read "CP p2p", QA 2026-12-08), precision and the overlaps."""
    split = (
        f"layout {st.pipeline_layout}"
        if st.pipeline_layout
        else ", ".join(
            part
            for part in (
                f"first stage {st.first_stage_layers} layers" if st.first_stage_layers else "",
                f"last stage {st.last_stage_layers} layers" if st.last_stage_layers else "",
                "embedding as a stage unit" if st.account_for_embedding_in_pipeline_split else "",
                "loss as a stage unit" if st.account_for_loss_in_pipeline_split else "",
            )
            if part
        )
    )
    recompute = st.recompute
    if st.recompute_modules:
        recompute += f" ({'+'.join(st.recompute_modules)})"
    if st.recompute_method:
        recompute += f" ({st.recompute_method}, {st.recompute_num_layers} layers)"
    parts = [
        st.schedule + (f" ({split})" if split else ""),
        "SP" if st.sequence_parallel else "",
        "distributed optimizer" if st.distributed_optimizer else "",
        f"Megatron-FSDP {st.megatron_fsdp}" if st.megatron_fsdp else "",
        f"recompute {recompute}" if st.recompute != "none" else "",
        f"activation offload {st.cpu_offloading_num_layers} layers" if st.cpu_offloading_num_layers else "",
        f"offload optimizer {st.offload_optimizer}" if st.offload_optimizer != "none" else "",
        f"offload params {st.offload_param}" if st.offload_param != "none" else "",
        (f"CP {st.cp_comm_type}" + (f" {list(st.hierarchical_cp_sizes)}" if st.hierarchical_cp_sizes else ""))
        if cp > 1
        else "",
        st.precision + (f" ({st.fp8_recipe}{', FP8 weights' if st.fp8_param_gather else ''})" if st.fp8_recipe else ""),
        f"grads reduced in {st.grad_reduce_dtype}",
        "TP overlap" if st.tp_comm_overlap else "",
        "EP overlap" if st.moe_ep_overlap else "",
        f"{st.moe_token_dispatcher} dispatcher" if st.moe_token_dispatcher != "alltoall" else "",
    ]
    return "; ".join(part for part in parts if part)


def checkpoint_summary(pr: spec.Prediction) -> str:
    size = "-" if pr.checkpoint_bytes is None else _size(pr.checkpoint_bytes)
    goodput = "-" if pr.goodput is None else f"{100 * pr.goodput:.1f} %"
    every = (
        f"every {pr.checkpoint_interval_steps} steps"
        if pr.checkpoint_interval_steps
        else "interval not set (plan.json has one only where the plan names a checkpoint directory)"
    )
    save = "-" if pr.checkpoint_save_s is None else _seconds(pr.checkpoint_save_s)
    load = "-" if pr.checkpoint_load_s is None else _seconds(pr.checkpoint_load_s)
    return f"{every}, {size}, save {save}, load {load}; expected goodput {goodput}"


def _rounded(value: float | None, spec: str) -> str:
    """A prediction for a person: 77,337 tokens/s, 27.1 s (not 77337.0565943719); '-' when there is none."""
    return "-" if value is None else format(value, spec)


def _seconds(value: float) -> str:
    """Seconds for a person: 2.35 s, 93.8 s, 1,800 s (not 1.8e+03 s, QA)."""
    return f"{value:.3g} s" if value < 1000 else f"{value:,.0f} s"


def _size(num_bytes: int) -> str:
    """A checkpoint's size: GiB with two significant digits at least (59,831,296 B read "0.1 GiB", QA)."""
    gib = num_bytes / 2**30
    return f"{gib:,.1f} GiB" if gib >= 10 else f"{gib:.2g} GiB" if gib >= 0.01 else f"{num_bytes / 2**20:.2g} MiB"


def watchdog_summary(plan: spec.Plan) -> str:
    limits = Limits.from_plan(plan)
    if limits is None:
        return "off (watchdog.enabled is false)"
    step = limits.step_timeout(None)
    steps = f"a step may take {_seconds(step[0])} ({step[1]})" if step else "step timeout from the first observed steps"
    return (
        f"{steps}; first step {_seconds(limits.first_step_s)}; checkpoint save {_seconds(limits.checkpoint_s)}; "
        f"straggler at {limits.straggler_factor:g} x the other ranks for {limits.straggler_steps} heartbeats"
    )
