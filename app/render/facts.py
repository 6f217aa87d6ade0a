"""The numbers and names every artifact reads, derived once from (result, plan, options).

World size, nodes, GPUs per node, the batch identity and the environment are computed here and nowhere else;
the DeepSpeed JSON, the Megatron arguments, the sbatch header, the torchrun flags, the PyTorchJob and plan.json
all read them from one `Facts` (docs/conventions.md, habit 6).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.planner.decisions import decide
from app.planner.explain import describe
from app.planner.results import Decisions, Plan, PlanResult
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.render.env import EnvVar, nccl_env, worker_env
from app.render.options import RenderOptions
from app.render.support import EXAMPLE_TRAINER, unsupported

DEFAULT_ENTRYPOINTS = {
    "megatron": "pretrain_gpt.py",
    "megatron-deepspeed": "pretrain_gpt.py",
    "deepspeed": EXAMPLE_TRAINER,
}


@dataclass(frozen=True)
class Facts:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    plan: Plan
    decisions: Decisions
    options: RenderOptions
    job_name: str
    framework: str
    world_size: int
    num_nodes: int
    gpus_per_node: int
    micro_batch_size: int
    grad_accum_steps: int
    global_batch_size: int
    hosts: tuple[str, ...]
    master_addr: str | None  # None: multi-node scripts read MASTER_ADDR from the environment
    nccl_env: tuple[EnvVar, ...]
    worker_env: tuple[EnvVar, ...]
    entrypoint: str
    planner_version: str
    derive_notes: tuple[str, ...] = ()

    @property
    def par(self) -> ParallelConfig:
        return self.plan.parallel

    @property
    def env(self) -> tuple[EnvVar, ...]:
        return self.nccl_env + self.worker_env

    @property
    def env_map(self) -> dict[str, str]:
        return {e.name: e.value for e in self.env}

    @property
    def nvlink_segment(self) -> int | None:
        """Nodes per NVLink segment the job asks Slurm for where NVLink spans nodes (GB200/GB300 trays): the
        planner's NVLink domain for this job (ClusterSpec.segment_nodes), which only holds if the trays of each
        segment share a rack; None elsewhere and on one node."""
        if not self.cluster.gpu.nvlink_spans_nodes or self.num_nodes <= 1:
            return None
        return self.cluster.segment_nodes(self.world_size)

    @property
    def uses_example_trainer(self) -> bool:
        return self.framework == "deepspeed" and self.entrypoint == EXAMPLE_TRAINER

    @property
    def summary(self) -> str:
        """One line naming the plan, for file headers."""
        return (
            f"{self.model.name} on {self.num_nodes} x {self.gpus_per_node} {self.cluster.gpu.name}, "
            f"{self.framework}, plan #{self.plan.rank}: {plan_label(self.par)}"
        )


def plan_label(par: ParallelConfig) -> str:
    """The layout in a few words, as the plan table names it (explain.describe): the renderer's own called
    Megatron-FSDP "dist-opt" and left out activation offload, FP8 weights, the layout, the CP comm type and the
    overlaps the files set (QA 2026-12-07)."""
    return describe(par)


def default_job_name(model_name: str) -> str:
    """A DNS-1035 label from the model's name (a letter first: '70b' becomes 'job-70b')."""
    name = re.sub(r"[^a-z0-9]+", "-", model_name.lower()).strip("-")
    if not name[:1].isalpha():
        name = f"job-{name}"
    return name[:40].strip("-") or "trainplan-job"


def plan_decisions(result: PlanResult, plan: Plan) -> tuple[Decisions, list[str]]:
    """The decisions the plan carries; a plan stored before plans carried them gets them derived now (once,
    by app.planner.decisions), said in a note."""
    if plan.decisions is not None:
        return plan.decisions, []
    derived = decide(result.model, result.cluster, result.training, plan.parallel, plan.estimate)
    return derived, [
        f"plan #{plan.rank} was stored without its decisions (planner {result.planner_version}): "
        f"bucket sizes, NCCL and timeouts were derived by this planner"
    ]


def _plan(result: PlanResult, rank: int) -> Plan:
    for plan in result.plans:
        if plan.rank == rank:
            return plan
    ranks = [p.rank for p in result.plans]
    raise ValueError(f"rank({rank}) is not among the result's plans (ranks {ranks or 'none: nothing fits'})")


def _check_batch(plan: Plan) -> tuple[int, int]:
    par, lay = plan.parallel, plan.layout
    mbs, gas, dp, gbs = par.micro_batch_size, lay.num_microbatches, par.dp, lay.global_batch_size
    if mbs * gas * dp != gbs:
        raise ValueError(
            f"plan #{plan.rank}: micro_batch_size({mbs}) * num_microbatches({gas}) * dp({dp}) = "
            f"{mbs * gas * dp} != global_batch_size({gbs})"
        )
    if par.world_size != lay.world_size or lay.num_nodes * lay.gpus_per_node != lay.world_size:
        raise ValueError(
            f"plan #{plan.rank}: tp*pp*cp*dp = {par.world_size}, layout world_size = "
            f"{lay.world_size}, num_nodes({lay.num_nodes}) * gpus_per_node({lay.gpus_per_node}) = "
            f"{lay.num_nodes * lay.gpus_per_node}: they must agree"
        )
    return mbs, gas


def derive(result: PlanResult, rank: int, options: RenderOptions) -> Facts:
    plan = _plan(result, rank)
    mbs, gas = _check_batch(plan)
    lay, cluster, training = plan.layout, result.cluster, result.training
    entrypoint = options.entrypoint or DEFAULT_ENTRYPOINTS.get(training.framework, "")
    reasons = unsupported(result.model, training, plan, entrypoint, options.accelerator, cluster.gpu.generation)
    if reasons:
        raise ValueError("; ".join(reasons))
    decisions, decision_notes = plan_decisions(result, plan)
    hosts = cluster.hosts[: lay.num_nodes]
    master = options.master_addr or (hosts[0] if hosts else None)
    if master is None and lay.num_nodes == 1:
        master = "127.0.0.1"
    return Facts(
        model=result.model,
        cluster=cluster,
        training=training,
        plan=plan,
        decisions=decisions,
        options=options,
        job_name=options.job_name or default_job_name(result.model.name),
        framework=training.framework,
        world_size=lay.world_size,
        num_nodes=lay.num_nodes,
        gpus_per_node=lay.gpus_per_node,
        micro_batch_size=mbs,
        grad_accum_steps=gas,
        global_batch_size=lay.global_batch_size,
        hosts=hosts,
        master_addr=master,
        nccl_env=nccl_env(decisions, cluster, options),
        worker_env=worker_env(decisions, training.framework, options),
        entrypoint=entrypoint,
        planner_version=result.planner_version,
        derive_notes=tuple(decision_notes),
    )
