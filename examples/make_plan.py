"""Write a plan.json for examples/train_gpt.py: a tiny GPT that trains on CPU (gloo) or GPUs (NCCL).

    python examples/make_plan.py plan.json --procs 2 --steps 8              # 1 node x 2 CPU processes
    python -m launcher run plan.json

What the renderer in app/ produces for a real model has the same shape: this is the smallest honest plan.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from launcher.spec import Entrypoint, Job, Model, Parallel, Plan, Prediction, World, dump  # noqa: E402

TINY = Model(
    name="tiny-gpt",
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_query_groups=2,
    vocab_size=256,
    seq_length=32,
    swiglu=True,
)


def ds_config(zero_stage: int, mbs: int, gas: int, dp: int, bf16: bool) -> str:
    config = {
        "train_batch_size": mbs * gas * dp,
        "train_micro_batch_size_per_gpu": mbs,
        "gradient_accumulation_steps": gas,
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": bf16},
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
        "steps_per_print": 1000000,
    }
    return json.dumps(config, indent=2) + "\n"


def megatron_args(model: Model, mbs: int, gbs: int) -> str:
    lines = [
        f"--num-layers {model.num_layers}",
        f"--hidden-size {model.hidden_size}",
        f"--num-attention-heads {model.num_attention_heads}",
        f"--num-query-groups {model.query_groups}",
        f"--seq-length {model.seq_length}",
        f"--max-position-embeddings {model.seq_length}",
        f"--vocab-size {model.vocab_size}",
        f"--micro-batch-size {mbs}",
        f"--global-batch-size {gbs}",
        "--tensor-model-parallel-size 1",
        "--pipeline-model-parallel-size 1",
        f"--normalization {model.normalization}",
        f"--position-embedding-type {model.position_embedding_type}",
    ]
    if model.swiglu:
        lines.append("--swiglu")
    return "\n".join(lines) + "\n"


def tiny_plan(
    name: str = "tiny",
    *,
    nodes: int = 1,
    procs: int = 2,
    backend: str = "torchrun",
    zero_stage: int = 1,
    steps: int = 8,
    accelerator: str = "cpu",
    hosts: tuple[str, ...] = (),
    master_addr: str = "127.0.0.1",
    master_port: int = 29500,
    max_restarts: int = 0,
    grace_period_s: float = 10.0,
    run_dir: str | None = None,
    env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    gas: int = 1,
    mbs: int = 2,
    model: Model = TINY,
) -> Plan:
    dp = nodes * procs
    script = HERE / "train_gpt.py"
    args = (
        "--args-file",
        "{run_dir}/megatron_args.txt",
        "--deepspeed_config",
        "{run_dir}/ds_config.json",
        "--train-iters",
        str(steps),
        "--save",
        "{run_dir}/checkpoints",
        "--load",
        "{run_dir}/checkpoints",
        *extra_args,
    )
    base_env = {"DS_ACCELERATOR": "cpu"} if accelerator == "cpu" else {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return Plan(
        job=Job(
            name=name,
            backend=backend,
            max_restarts=max_restarts,
            grace_period_s=grace_period_s,
            run_dir=run_dir,
            omp_num_threads=1,
        ),
        world=World(
            num_nodes=nodes,
            gpus_per_node=procs,
            hosts=hosts,
            master_addr=master_addr,
            master_port=master_port,
            accelerator=accelerator,
        ),
        parallel=Parallel(dp=dp, global_batch_size=mbs * gas * dp, micro_batch_size=mbs, zero_stage=zero_stage),
        entrypoint=Entrypoint(script=str(script), args=args),
        env={**base_env, **(env or {})},
        files={
            "ds_config.json": ds_config(zero_stage, mbs, gas, dp, bf16=True),
            "megatron_args.txt": megatron_args(model, mbs, mbs * gas * dp),
        },
        model=model,
        prediction=Prediction(tokens_per_s=None, step_s=None, peak_memory_bytes=()),
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("output")
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--backend", default="torchrun", choices=("torchrun", "deepspeed", "slurm"))
    p.add_argument("--zero-stage", type=int, default=1)
    p.add_argument("--accelerator", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--master-port", type=int, default=29500)
    a = p.parse_args()
    plan = tiny_plan(
        procs=a.procs,
        nodes=a.nodes,
        steps=a.steps,
        backend=a.backend,
        zero_stage=a.zero_stage,
        accelerator=a.accelerator,
        master_port=a.master_port,
    )
    try:
        dump(plan, a.output)
    except OSError as exc:  # a folder that does not exist: say so, no traceback (QA, 2026-12-06)
        sys.stderr.write(f"make_plan: cannot write {a.output}: {exc.strerror}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
