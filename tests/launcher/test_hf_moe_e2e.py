"""A Hugging Face MoE plan end to end on CPU: the planner's plan for a small Mixtral under DeepSpeed ZeRO-3 is
rendered, `python -m launcher run` starts it, and examples/train_gpt.py --model-impl hf trains transformers' own
MixtralForCausalLM with DeepSpeed's engine (the sparse blocks as ZeRO-3 leaf modules, as ds_config.json says)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("deepspeed")

from hf_model import HFCausalLM, HFShape, unsupported

from app.planner import PlanRequest, plan
from app.render import RenderOptions, render, write_artifacts

ROOT = Path(__file__).resolve().parents[2]
MODEL = {
    "preset": "mixtral-8x7b",
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_query_groups": 2,
    "kv_channels": 16,
    "ffn_hidden_size": 128,
    "moe_ffn_hidden_size": 128,
    "num_experts": 4,
    "vocab_size": 256,
    "seq_length": 32,
}


def test_the_planned_mixtral_trains_under_zero3_through_the_launcher(tmp_path: Path) -> None:
    request = PlanRequest(
        model=MODEL,
        cluster={"num_nodes": 1, "gpus_per_node": 2, "gpu": "A100-80GB"},
        training={"global_batch_size": 4, "framework": "deepspeed", "pinned": {"zero_stage": 3}},
    )
    result = plan(request)
    assert result.plans, result.suggestions
    files = tmp_path / "files"
    options = RenderOptions(workdir=str(ROOT), train_iters=3, log_interval=1, accelerator="cpu")
    write_artifacts(render(result, 1, options), files)
    env = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "TMPDIR", "USER")}
    env.update(PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "run", str(files / "plan.json"), "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=files,
        env=env,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "ZeRO stage 3" in out and "step 3/3" in out and "job finished: exit code 0" in out
    assert "MixtralSparseMoeBlock" in (files / "ds_config.json").read_text()


def test_the_transformers_network_is_the_one_the_planner_counts() -> None:
    """The same parameters as the planner's count for the shape (routers, experts, untied head), and what the
    classes cannot build is refused by name."""
    from app.planner.specs import ModelSpec

    spec = PlanRequest(model=MODEL, cluster={"num_nodes": 1, "gpu": "A100-80GB"}, training={"global_batch_size": 4})
    shape = HFShape(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        vocab_size=256,
        seq_length=32,
        num_query_groups=2,
        ffn_hidden_size=128,
        untie_embeddings_and_output_weights=True,
        num_experts=4,
        moe_router_topk=2,
        moe_ffn_hidden_size=128,
    )
    model = HFCausalLM(shape, recompute=False)
    assert isinstance(spec.model, ModelSpec)
    assert sum(p.numel() for p in model.parameters()) == spec.model.num_parameters
    assert unsupported(replace(shape, position_embedding_type="learned_absolute"), 2) == [
        "--position-embedding-type learned_absolute: these classes use rope",
        "--recompute-num-layers 2: gradient checkpointing in transformers recomputes each decoder layer (uniform, 1)",
    ]
