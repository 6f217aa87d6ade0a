"""The `probe` verb: short measurements through the same backends as `run`, written as a cluster profile.

The measuring code (launcher/workers/probe_worker.py) runs in the worker processes; this process only
builds the job, runs it and turns rank 0's numbers into the profile and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from launcher import spec
from launcher.checks import visible_gpus
from launcher.context import make_context
from launcher.launch import launch
from launcher.profile import make_profile, summary_rows
from launcher.rundir import write_atomic
from launcher.spec import Entrypoint, Job, Model, Parallel, Plan, World
from launcher.storage import output_refusal
from launcher.table import table

WORKER = Path(__file__).resolve().parent / "workers" / "probe_worker.py"
DEFAULT_SHAPES = [[4096, 4096, 4096], [4096, 16384, 4096], [4096, 4096, 128]]


def gemm_shapes(model: Model | None, micro_batch_size: int) -> list[list[int]]:
    """h x h and h x ffn at the plan's tokens per micro-batch, and the s x s attention-score product."""
    if model is None:
        return DEFAULT_SHAPES
    tokens = micro_batch_size * model.seq_length
    h, head = model.hidden_size, model.head_size
    return [[tokens, h, h], [tokens, model.ffn_size, h], [model.seq_length, model.seq_length, head]]


def plan_without_file(args: argparse.Namespace) -> Plan:
    """A plan for --nodes/--gpus-per-node: GPUs where this node has them, else CPU processes (gloo)."""
    gpus, _ = visible_gpus(dict(os.environ))
    accelerator = "cuda" if gpus else "cpu"
    per_node = args.gpus_per_node if args.gpus_per_node is not None else (gpus or 2)  # (0 was "not given")
    hosts = tuple(h.strip() for h in args.hosts.split(",")) if args.hosts else ()
    master = args.master_addr or (hosts[0] if hosts else "127.0.0.1")
    world = World(
        num_nodes=args.nodes,
        gpus_per_node=per_node,
        hosts=hosts,
        master_addr=master,
        master_port=args.master_port,
        accelerator=accelerator,
    )
    return Plan(
        job=Job(name="probe", grace_period_s=10.0),
        world=world,
        parallel=Parallel(dp=world.world_size, global_batch_size=world.world_size),
        entrypoint=Entrypoint(script=str(WORKER)),
    )


def probe_plan(plan: Plan) -> Plan:
    """The plan's world, environment and backend, running the probe worker instead of the training script."""
    config = {
        "accelerator": plan.world.accelerator,
        "num_nodes": plan.world.num_nodes,
        "gpus_per_node": plan.world.gpus_per_node,
        "gemm_shapes": gemm_shapes(plan.model, plan.parallel.micro_batch_size),
    }
    return replace(
        plan,
        job=replace(plan.job, name=f"{plan.job.name}-probe", max_restarts=0, run_dir=None),
        entrypoint=Entrypoint(
            script=str(WORKER),
            python=plan.entrypoint.python,
            args=("--config", "{run_dir}/probe_config.json", "--out", "{run_dir}/probe"),
        ),
        files={"probe_config.json": json.dumps(config, indent=2) + "\n"},
    )


def refused_options(args: argparse.Namespace) -> str | None:
    """Why probe's own options cannot be used, None if they can: checked before anything starts. `--hosts ,,` read as
    no hosts and `--master-addr ''` as the default, silently (QA 2026-12-07)."""
    if args.hosts is not None and not all(h.strip() for h in args.hosts.split(",")):
        return f"--hosts {args.hosts!r} has an empty host name: give the hosts separated by commas, head first"
    if args.master_addr is not None and not args.master_addr.strip():
        return "--master-addr is empty: give the head node's address, or leave the option out"
    return output_refusal(args.output)


def probe(args: argparse.Namespace) -> int:
    why = refused_options(args)
    if why:  # before the probe runs: it ran the whole probe, then crashed writing the profile (QA 2026-12-07)
        print(f"launcher probe: {why}", file=sys.stderr)
        return 2
    plan = spec.load(args.plan) if args.plan else plan_without_file(args)
    ctx = make_context(
        probe_plan(plan),
        args.plan or "./probe.json",
        node_rank=args.node_rank,
        run_dir=args.run_dir,
        backend=args.backend,
    )
    code = launch(ctx)
    if code or ctx.node_rank not in (None, 0):
        return code
    raw = json.loads((ctx.run_dir / "probe" / "rank0.json").read_text())
    w = plan.world
    profile = make_profile(raw, w.num_nodes, w.gpus_per_node, list(w.hosts))
    out = Path(args.output) if args.output else ctx.run_dir / "cluster_profile.json"
    write_atomic(out, json.dumps(profile, indent=2) + "\n")
    print(table(("measured", "value", "catalogue", "ratio"), summary_rows(profile, plan.hardware)))
    print(f"\ncluster profile written to {out}")
    return 0
