"""Plans the renderer tests use: fixed golden cases (a request and a pinned parallel layout, so that a change in
the search's ranking does not change them) and small search requests whose every returned plan is rendered."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.planner import PlanRequest, __version__, plan
from app.planner.decisions import decide
from app.planner.estimate import evaluate
from app.planner.layout import make_layout
from app.planner.results import Plan, PlanResult, SearchStats
from app.planner.specs import ParallelConfig
from app.render import RenderOptions

IB8 = [f"mlx5_{i}" for i in range(8)]
DATA = {
    "data_path": "/data/llama/corpus_text_document",
    "tokenizer_type": "HuggingFaceTokenizer",
    "tokenizer_model": "meta-llama/Llama-2-7b-hf",
}


@dataclass(frozen=True)
class Case:
    name: str
    request: dict[str, Any]
    parallel: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)


GOLDEN = (
    Case(
        "a100x8-llama2-7b-megatron",
        {
            "model": "llama-2-7b",
            "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "A100-80GB"},
            "training": {"global_batch_size": 256, "framework": "megatron"},
        },
        {
            "tp": 2,
            "pp": 1,
            "dp": 4,
            "distributed_optimizer": True,
            "sequence_parallel": True,
            "micro_batch_size": 2,
            "recompute": "selective",
        },
    ),
    Case(
        "h100x64-llama2-70b-megatron-ib",
        {
            "model": "llama-2-70b",
            "cluster": {
                "num_nodes": 8,
                "gpus_per_node": 8,
                "gpu": "H100-SXM",
                "nics": IB8,
                "socket_ifname": "eth0",
                "hosts": [f"gpu{i:03d}" for i in range(1, 9)],
            },
            "training": {"global_batch_size": 512, "framework": "megatron"},
        },
        {
            "tp": 4,
            "pp": 4,
            "vpp": 4,
            "dp": 4,
            "distributed_optimizer": True,
            "sequence_parallel": True,
            "micro_batch_size": 1,
        },
        {
            "job_name": "llama2-70b-pretrain",
            "workdir": "/opt/Megatron-LM",
            "checkpoint_dir": "/lustre/ckpt/llama2-70b",
            "slurm_partition": "gpu",
            "slurm_account": "llm",
            "slurm_time_limit": "2-00:00:00",
            "max_restarts": 2,
            "slurm_requeue": True,
            "k8s_rdma_resource": "rdma/rdma_shared_device_a",
            "nccl_version": "2.27.5",
        },
    ),
    Case(
        "a100x8-llama2-13b-deepspeed-zero3-cpu-offload",
        {
            "model": "llama-2-13b",
            "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "A100-40GB"},
            "training": {"global_batch_size": 64, "framework": "deepspeed"},
        },
        {"dp": 8, "zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu", "micro_batch_size": 1},
    ),
    Case(
        "h100x32-mixtral-8x7b-megatron-moe",
        {
            "model": "mixtral-8x7b",
            "cluster": {
                "num_nodes": 4,
                "gpus_per_node": 8,
                "gpu": "H100-SXM",
                "nics": ["mlx5_0", "mlx5_1"],
                "hosts": ["node-a", "node-b", "node-c", "node-d"],
            },
            "training": {"global_batch_size": 256, "framework": "megatron"},
        },
        {
            "tp": 2,
            "pp": 4,
            "dp": 4,
            "ep": 4,
            "distributed_optimizer": True,
            "sequence_parallel": True,
            "micro_batch_size": 1,
        },
    ),
    Case(
        "a100x16-llama2-13b-megatron-deepspeed-pp",
        {
            "model": "llama-2-13b",
            "cluster": {
                "num_nodes": 2,
                "gpus_per_node": 8,
                "gpu": "A100-80GB",
                "socket_ifname": "ens1f0",
                "hosts": ["dgx1", "dgx2"],
            },
            "training": {"global_batch_size": 128, "framework": "megatron-deepspeed"},
        },
        {
            "tp": 2,
            "pp": 2,
            "dp": 4,
            "zero_stage": 1,
            "sequence_parallel": False,  # Megatron-DeepSpeed under --deepspeed has no SP (data/stacks.json)
            "micro_batch_size": 2,
            "recompute": "full",
        },
        {**DATA, "workdir": "/opt/Megatron-DeepSpeed"},
    ),
    Case(
        "h100x64-deepseek-v3-like-fp8-uneven-pp",
        {
            "model": {"preset": "deepseek-v3-like", "num_layers": 16, "num_experts": 64},
            "cluster": {
                "num_nodes": 8,
                "gpus_per_node": 8,
                "gpu": "H100-SXM",
                "nics": IB8,
                "hosts": [f"h{i}" for i in range(8)],
            },
            "training": {"global_batch_size": 256, "framework": "megatron", "precision": "fp8"},
        },
        {
            "tp": 2,
            "pp": 4,
            "dp": 8,
            "ep": 8,
            "etp": 1,
            "distributed_optimizer": True,
            "sequence_parallel": True,
            "micro_batch_size": 1,
            "recompute": "full",
            "first_stage_layers": 3,
            "last_stage_layers": 3,
        },
    ),
    Case(
        "h100x32-llama3-8b-128k-megatron-cp",
        {
            "model": "llama-3-8b-128k",
            "cluster": {"num_nodes": 4, "gpus_per_node": 8, "gpu": "H100-SXM", "nics": ["mlx5_0"]},
            "training": {"global_batch_size": 16, "framework": "megatron", "precision": "bf16"},
        },
        {
            "tp": 2,
            "pp": 2,
            "vpp": 2,
            "cp": 8,
            "dp": 1,
            "distributed_optimizer": True,
            "sequence_parallel": True,
            "micro_batch_size": 1,
        },
        {"master_addr": "10.0.0.1", "nccl_algo": "Ring"},
    ),
)


def hosts(n: int) -> list[str]:
    return [f"node{i:02d}" for i in range(n)]


# Small requests searched for real: every plan they return is rendered and checked against the tools.
SEARCHED = (
    {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "A100-80GB"},
        "training": {"global_batch_size": 128, "framework": "megatron"},
    },
    {
        "model": "llama-2-70b",
        "cluster": {"num_nodes": 8, "gpus_per_node": 8, "gpu": "H100-SXM", "nics": IB8},
        "training": {"global_batch_size": 512, "framework": "megatron"},
    },
    {
        "model": "gpt3-175b",
        "cluster": {"num_nodes": 16, "gpus_per_node": 8, "gpu": "A100-80GB", "hosts": hosts(16)},
        "training": {"global_batch_size": 1536, "framework": "megatron", "precision": "fp16"},
    },
    {
        "model": "qwen2-57b-a14b",
        "cluster": {"num_nodes": 4, "gpus_per_node": 8, "gpu": "H100-SXM", "hosts": hosts(4)},
        "training": {"global_batch_size": 256, "framework": "megatron"},
    },
    {
        "model": "llama-3-8b-128k",
        "cluster": {"num_nodes": 4, "gpus_per_node": 8, "gpu": "H100-SXM", "hosts": hosts(4), "nics": ["mlx5_0"]},
        "training": {"global_batch_size": 32, "framework": "megatron", "precision": "fp8"},
    },
    {
        "model": "llama-2-13b",
        "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "A100-80GB", "hosts": hosts(2)},
        "training": {"global_batch_size": 256, "framework": "megatron-deepspeed"},
    },
    {
        "model": "gpt3-175b",
        "cluster": {"num_nodes": 16, "gpus_per_node": 8, "gpu": "A100-80GB"},
        "training": {"global_batch_size": 1536, "framework": "megatron-deepspeed", "precision": "fp16"},
    },
    {
        "model": "llama-2-13b",
        "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "A100-40GB"},
        "training": {"global_batch_size": 64, "framework": "deepspeed", "pinned": {"pp": 1}},
    },
    {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "A100-40GB", "nvme_path": "/local_nvme"},
        "training": {
            "global_batch_size": 64,
            "framework": "deepspeed",
            "pinned": {"pp": 1, "zero_stage": 3, "offload_optimizer": "nvme", "offload_param": "nvme"},
        },
    },
)


def fixed_result(request: dict[str, Any], parallel: dict[str, Any]) -> PlanResult:
    """A PlanResult holding one plan with the given layout, built as the planner builds its plans."""
    req = PlanRequest(**request)
    par = ParallelConfig(**parallel)
    est = evaluate(req.model, req.cluster, req.training, par, world_size=par.world_size)
    one = Plan(
        rank=1,
        parallel=par,
        layout=make_layout(req.model, req.cluster, req.training, par),
        estimate=est,
        why=["pinned by the renderer's tests"],
        notes=[],
        decisions=decide(req.model, req.cluster, req.training, par, est),
    )
    return PlanResult(
        planner_version=__version__,
        model=req.model,
        cluster=req.cluster,
        training=req.training,
        num_parameters=req.model.num_parameters,
        num_active_parameters=req.model.num_active_parameters,
        plans=[one],
        rejected=[],
        stats=SearchStats(candidates=1, evaluated=1, feasible=int(est.feasible), seconds=0.0),
    )


def searched(request: dict[str, Any]) -> PlanResult:
    req = PlanRequest(**{**request, "training": {"max_plans": 6, **request["training"]}})
    return plan(req)


def options_for(result: PlanResult, extra: dict[str, Any] | None = None) -> RenderOptions:
    """Megatron-DeepSpeed has no mock data: give it a dataset; everything else renders with the defaults."""
    base = dict(DATA) if result.training.framework == "megatron-deepspeed" else {}
    return RenderOptions(**{**base, **(extra or {})})
