"""One rank of the DeepSpeed engine matrix (tests/render/test_deepspeed_engine.py), started by torchrun on CPU.

For each case: the rendered ds_config.json, the model and the client optimizer the framework itself would pass,
`deepspeed.initialize`, two optimizer steps; rank 0 writes what happened (engine and optimizer classes, losses,
or the exception) as JSON. No op is JIT-compiled: the shm op is switched off, and where a framework would pass
DeepSpeedCPUAdam (a compiled op) the case says so and runs torch's AdamW with `zero_force_ds_cpu_optimizer` off.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
from gpt_model import GPT, GPTConfig  # noqa: E402


def tiny_config(case: dict[str, Any]) -> GPTConfig:
    m = case["model"]
    return GPTConfig(
        num_layers=m["num_layers"],
        hidden_size=m["hidden_size"],
        num_attention_heads=m["num_attention_heads"],
        vocab_size=m["vocab_size"],
        seq_length=m["seq_length"],
        position_embedding_type="learned_absolute",
        normalization="LayerNorm",
    )


def client_optimizer(case: dict[str, Any], params: Any, cfg: dict[str, Any]) -> torch.optim.Optimizer:
    """Megatron-DeepSpeed (megatron/optimizer/__init__.py): --cpu-optimizer -> DeepSpeedCPUAdam, else its `Adam`,
    which is torch.optim.Adam off CUDA (apex FusedAdam on CUDA, L4-8)."""
    name = case["client"]
    if name == "torch.optim.Adam":
        return torch.optim.Adam(params, lr=1e-4)
    if name == "DeepSpeedCPUAdam":  # a compiled op: run torch's AdamW in its place, as the case states
        cfg["zero_force_ds_cpu_optimizer"] = False
        cfg.setdefault("zero_allow_untested_optimizer", True)
        return torch.optim.AdamW(params, lr=1e-4)
    raise ValueError(name)


def pipeline_model(case: dict[str, Any]) -> Any:
    from deepspeed.pipe import LayerSpec, PipelineModule

    h, v = case["model"]["hidden_size"], case["model"]["vocab_size"]

    layers = [
        LayerSpec(torch.nn.Embedding, v, h),
        *[LayerSpec(torch.nn.Linear, h, h) for _ in range(4)],
        LayerSpec(torch.nn.Linear, h, v),
    ]
    loss = torch.nn.CrossEntropyLoss()
    return PipelineModule(
        layers=layers,
        num_stages=case["pp"],
        partition_method="type:Linear",
        loss_fn=lambda out, y: loss(out.reshape(-1, v).float(), y.reshape(-1)),
    )


def batches(case: dict[str, Any], mbs: int) -> Any:
    g = torch.Generator().manual_seed(0)
    s, v = case["model"]["seq_length"], case["model"]["vocab_size"]
    while True:
        x = torch.randint(0, v, (mbs, s), generator=g)
        yield x, torch.roll(x, -1, dims=1)


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    import deepspeed

    cfg = json.loads(json.dumps(case["config"]))
    if case["framework"] == "deepspeed":  # examples/train_gpt.py's own config and optimizer
        import train_gpt

        args = train_gpt.parse_args(case["trainer_args"])
        cfg = train_gpt.ds_config(args, world=int(os.environ["WORLD_SIZE"]), on_cuda=False)
        model = GPT(tiny_config(case), None)
        optimizer = train_gpt.optimizer_for(model, cfg, args, on_cuda=False)
    elif case["pp"] > 1:
        model = pipeline_model(case)
        optimizer = client_optimizer(case, model.parameters(), cfg)
    else:  # Megatron-DeepSpeed builds a ZeRO-3 model under zero.Init (pretrain_gpt.py L46-50)
        init = deepspeed.zero.Init(config_dict_or_path=cfg) if cfg["zero_optimization"]["stage"] == 3 else nullcontext()
        with init:
            model = GPT(tiny_config(case), None)
        optimizer = client_optimizer(case, model.parameters(), cfg)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=cfg)
    mbs, gas = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    data = batches(case, mbs)
    losses = []
    for _ in range(2):
        if case["pp"] > 1:
            losses.append(float(engine.train_batch(data_iter=data)))
            continue
        for _ in range(gas):
            x, y = next(data)
            loss = engine(x, y)  # the example GPT returns its cross-entropy
            engine.backward(loss)
            engine.step()
        losses.append(float(loss.detach()))
    inner = getattr(engine.optimizer, "optimizer", engine.optimizer)
    return {
        "engine": type(engine).__name__,
        "optimizer": type(engine.optimizer).__name__,
        "inner_optimizer": type(inner).__name__,
        "losses": losses,
        "steps": engine.global_steps,
        "zero_stage": engine.zero_optimization_stage(),
    }


def main() -> None:
    import deepspeed
    import torch.distributed as dist

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # no JIT build of the shm op
    deepspeed.init_distributed(dist_backend="gloo")
    cases = json.loads(Path(sys.argv[1]).read_text())
    out = []
    for case in cases:
        try:
            result = run_case(case)
        except Exception as exc:  # recorded: the test decides whether this case had to fail
            result = {"error": type(exc).__name__, "message": str(exc)[:500], "trace": traceback.format_exc()[-1500:]}
        print(
            f"[ds_engine_worker] rank {dist.get_rank()} {case['label']}: "
            f"{result.get('error', 'ok')} {result.get('trace', '')}",
            file=sys.stderr,
            flush=True,
        )
        dist.barrier()
        out.append({"label": case["label"], **result})
    if dist.get_rank() == 0:
        Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
