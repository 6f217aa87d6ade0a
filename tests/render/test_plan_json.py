"""plan.json is built with the launcher's own spec classes, loads with `launcher.spec`, and for the DeepSpeed
framework runs the project's example trainer with arguments its argparse accepts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from render_cases import fixed_result

from app.render import RenderOptions, render, write_artifacts
from launcher import spec

ROOT = Path(__file__).resolve().parents[2]


def test_plan_json_loads_and_matches_the_plan(all_rendered) -> None:
    loaded = 0
    for label, result, rank, arts in all_rendered:
        if "plan.json" not in arts.files:
            continue
        plan = spec.loads(arts.files["plan.json"])
        p = result.plans[rank - 1]
        assert plan.schema_version == spec.SCHEMA_VERSION and plan.kind == "trainplan.plan"
        assert (plan.world.num_nodes, plan.world.gpus_per_node) == (p.layout.num_nodes, p.layout.gpus_per_node)
        par = plan.parallel
        assert (par.tp, par.pp, par.vpp, par.cp, par.ep, par.dp, par.zero_stage) == (
            p.parallel.tp,
            p.parallel.pp,
            p.parallel.vpp,
            p.parallel.cp,
            p.parallel.ep,
            p.parallel.dp,
            p.parallel.zero_stage,
        ), label
        assert par.etp == p.parallel.expert_tp, label
        assert par.gradient_accumulation_steps == p.layout.num_microbatches
        assert "plan.json" not in plan.files and set(plan.files) <= set(arts.files)
        assert plan.prediction is not None and len(plan.prediction.peak_memory_bytes) == p.parallel.pp
        assert json.loads(arts.files["plan.json"]) == plan.to_dict()  # what dump() would write
        # the launcher's grace period (torchrun's --shutdown-timeout, its own SIGKILL) is the plan's graceful-stop
        # margin, as every launch file's: it was torch's 30 s, which killed a save a plan predicts takes minutes
        margin = p.decisions.graceful_stop_s
        assert plan.job.grace_period_s == margin and plan.env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(margin), label
        loaded += 1
    assert loaded >= 35


def test_moe_plan_with_expert_tp_1_gets_a_plan_json() -> None:
    """EP 4 across TP 4 with ETP 1 (tp*cp*dp = 8 = etp 1 * ep 4 * expert-DP 2): Megatron accepts it, so does
    launcher/spec.py, and plan.json carries the ETP that megatron_args.txt sets."""
    request = {
        "model": "mixtral-8x7b",
        "cluster": {"num_nodes": 4, "gpus_per_node": 8, "gpu": "H100-SXM", "hosts": ["a", "b", "c", "d"]},
        "training": {"global_batch_size": 256, "framework": "megatron"},
    }
    arts = render(
        fixed_result(
            request,
            {
                "tp": 4,
                "pp": 4,
                "dp": 2,
                "ep": 4,
                "etp": 1,
                "sequence_parallel": True,
                "distributed_optimizer": True,
                "micro_batch_size": 1,
            },
        )
    )
    assert not any("plan.json not rendered" in n for n in arts.notes), arts.notes
    par = spec.loads(arts.files["plan.json"]).parallel
    assert (par.tp, par.dp, par.ep, par.etp) == (4, 2, 4, 1)
    assert "--expert-tensor-parallel-size 1" in arts.files["megatron_args.txt"].splitlines()


def test_nvidia_405b_layout_gets_a_plan_json() -> None:
    """126 layers on PP16 x VPP8 with the embedding and the loss as pipeline units (NVIDIA's Llama-3.1 405B): the
    launcher took num_layers < pp x vpp for an error, so plan.json was not rendered for this layout."""
    request = {
        "model": "llama-3-405b",
        "cluster": {"num_nodes": 128, "gpus_per_node": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 512, "framework": "megatron"},
    }
    arts = render(
        fixed_result(
            request,
            {"tp": 8, "pp": 16, "vpp": 8, "dp": 8, "account_for_embedding_in_pipeline_split": True,
             "account_for_loss_in_pipeline_split": True, "sequence_parallel": True, "distributed_optimizer": True,
             "micro_batch_size": 1},
        ),
        options=RenderOptions(master_addr="10.0.0.1"),
    )  # fmt: skip
    assert not any("plan.json not rendered" in n for n in arts.notes), arts.notes
    plan = spec.loads(arts.files["plan.json"])
    assert (plan.parallel.pp, plan.parallel.vpp, plan.model.num_layers) == (16, 8, 126)
    assert plan.strategy.account_for_embedding_in_pipeline_split and plan.strategy.account_for_loss_in_pipeline_split
    args = arts.files["megatron_args.txt"].splitlines()
    assert "--account-for-embedding-in-pipeline-split" in args and "--account-for-loss-in-pipeline-split" in args


def test_a_model_with_its_own_head_size_gets_a_plan_json() -> None:
    """hidden 1000 with 16 heads of 64 (--kv-channels 64): Megatron takes it, so plan.json carries the head size
    and the launcher takes it too (before: 'model.hidden_size(1000) is not divisible by ...', no plan.json)."""
    model = {"name": "odd-width", "num_layers": 4, "hidden_size": 1000, "num_attention_heads": 16, "kv_channels": 64,
             "vocab_size": 32000, "seq_length": 2048, "swiglu": True}  # fmt: skip
    request = {"model": model, "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"},
               "training": {"global_batch_size": 64}}  # fmt: skip
    arts = render(fixed_result(request, {"tp": 1, "pp": 1, "dp": 8, "distributed_optimizer": True}))
    assert not any("plan.json not rendered" in n for n in arts.notes), arts.notes
    assert spec.loads(arts.files["plan.json"]).model.head_size == 64
    assert "--kv-channels 64" in arts.files["megatron_args.txt"].splitlines()


def _train_gpt():
    sys.path.insert(0, str(ROOT / "examples"))
    import train_gpt

    return train_gpt


def test_deepspeed_plan_runs_the_example_trainer_with_its_arguments(tmp_path: Path) -> None:
    request = {
        "model": "tiny-gpt",
        "cluster": {"num_nodes": 1, "gpus_per_node": 2, "gpu": "A100-80GB"},
        "training": {"global_batch_size": 8, "framework": "deepspeed"},
    }
    result = fixed_result(request, {"dp": 2, "zero_stage": 2, "micro_batch_size": 2})
    arts = render(result, 1, RenderOptions(workdir=str(ROOT), train_iters=3))
    plan = spec.loads(arts.files["plan.json"])
    assert plan.entrypoint.script == f"{ROOT}/examples/train_gpt.py" and plan.entrypoint.working_dir == str(ROOT)
    run_dir = tmp_path / "run"
    write_artifacts(arts, run_dir)
    argv = [a.replace("{run_dir}", str(run_dir)) for a in plan.entrypoint.args]
    train_gpt = _train_gpt()
    args = train_gpt.parse_args(argv)
    assert args.ignored == [], f"arguments the trainer does not read: {args.ignored}"
    assert (args.num_layers, args.hidden_size, args.vocab_size, args.train_iters) == (4, 256, 4096, 3)
    cfg = train_gpt.ds_config(args, world=plan.world.world_size, on_cuda=False)
    assert (cfg["train_batch_size"], cfg["gradient_accumulation_steps"]) == (8, 2)
    assert cfg["zero_optimization"]["stage"] == 2


@pytest.mark.parametrize(
    ("recompute", "words", "method", "note"),
    [
        (
            "full",
            ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"],
            "uniform",
            False,
        ),
        ("selective", ["--recompute-granularity", "selective"], None, True),
        ("none", [], None, False),
    ],
)
def test_deepspeed_plan_passes_its_recompute_to_the_example_trainer(
    recompute: str, words: list[str], method: str | None, note: bool
) -> None:
    """The trainer recomputes what the memory estimate assumed: Megatron's flags in plan.json and deepspeed.sh,
    read by its argparse (nothing ignored); selective is a documented no-op, said in the notes."""
    request = {
        "model": "tiny-gpt",
        "cluster": {"num_nodes": 1, "gpus_per_node": 2, "gpu": "A100-80GB"},
        "training": {"global_batch_size": 8, "framework": "deepspeed"},
    }
    arts = render(
        fixed_result(request, {"dp": 2, "zero_stage": 1, "recompute": recompute}),
        1,
        RenderOptions(workdir=str(ROOT), train_iters=3),
    )
    args_in_plan = list(spec.loads(arts.files["plan.json"]).entrypoint.args)
    found = [
        w
        for i, w in enumerate(args_in_plan)
        if w.startswith("--recompute") or (i and args_in_plan[i - 1].startswith("--recompute"))
    ]
    assert found == words
    assert all(w in arts.files["deepspeed.sh"] for w in words)
    args = _train_gpt().parse_args([a.replace("{run_dir}", "/tmp") for a in args_in_plan])
    assert args.ignored == []
    assert (args.recompute.method if args.recompute else None) == method
    assert any("recompute=selective" in n for n in arts.notes) == note


def test_the_launcher_builds_its_commands_from_the_plan(tmp_path: Path) -> None:
    from torch.distributed.run import get_args_parser

    from launcher.backends import build
    from launcher.context import make_context

    request = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "H100-SXM", "hosts": ["n0", "n1"]},
        "training": {"global_batch_size": 64, "framework": "megatron"},
    }
    arts = render(fixed_result(request, {"tp": 2, "dp": 8}))
    write_artifacts(arts, tmp_path)
    plan = spec.load(tmp_path / "plan.json")
    ctx = make_context(plan, tmp_path / "plan.json", node_rank=1, caller_env={"PATH": "/usr/bin"})
    _backend, commands = build(ctx)
    (cmd,) = commands
    args = get_args_parser().parse_args(list(cmd.argv[3:]))
    assert (args.nnodes, args.nproc_per_node) == ("2", "8")
    assert args.shutdown_timeout == plan.job.grace_period_s >= 600  # the graceful-stop margin, not torch's 30 s
    assert cmd.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and "NCCL_ALGO" not in cmd.env  # H100: NVLSTree is NCCL's
    assert args.training_script.endswith("pretrain_gpt.py")
    assert "--tensor-model-parallel-size" in args.training_script_args


def test_plan_json_states_the_dtype_deepspeed_reduces_in() -> None:
    """Megatron-DeepSpeed under ZeRO-3 sends bf16 gradients (ds_config.json communication_data_type) whatever fp32
    accumulation was asked for; plan.json said fp32 (QA 2026-12-07). Under ZeRO-1 BF16_Optimizer reduces fp32."""
    import json

    from render_cases import fixed_result

    from app.render import RenderOptions, render

    req = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 2, "gpu": "A100-80GB", "hosts": ["n1", "n2"]},
        "training": {"global_batch_size": 64, "framework": "megatron-deepspeed", "grad_reduce_dtype": "fp32"},
    }
    data = {"data_path": "/d/x_text_document", "tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": "m/l"}
    for stage, dtype in ((3, "bf16"), (1, "fp32")):
        arts = render(fixed_result(req, {"tp": 2, "dp": 8, "zero_stage": stage}), 1, RenderOptions(**data))
        ds = json.loads(arts.files["ds_config.json"])
        strategy = json.loads(arts.files["plan.json"])["strategy"]
        assert (ds["communication_data_type"], strategy["grad_reduce_dtype"]) == (dtype, dtype)
    fp16 = {**req, "training": {"global_batch_size": 64, "framework": "megatron-deepspeed", "precision": "fp16"}}
    arts = render(fixed_result(fp16, {"tp": 2, "dp": 8, "zero_stage": 2}), 1, RenderOptions(**data))
    assert json.loads(arts.files["plan.json"])["strategy"]["grad_reduce_dtype"] == "fp16"  # the launcher takes it


def test_megatron_fp16_plan_says_its_gradients_are_fp16() -> None:
    """Megatron's --fp16 keeps and reduces fp16 gradients (arguments.py turns accumulate_allreduce_grads_in_fp32 on
    only under --bf16); plan.json said fp32, or bf16 when asked, while the job ran fp16 (QA 2026-12-07). A reduce
    dtype asked for with fp16 is refused, naming the field."""
    from app.planner import PlanRequest

    req = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 1, "gpu": "H100-SXM", "hosts": ["n1"]},
        "training": {"global_batch_size": 64, "precision": "fp16"},
    }
    data = {"data_path": "/d/x_text_document", "tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": "m/l"}
    arts = render(fixed_result(req, {"tp": 2, "dp": 4}), 1, RenderOptions(**data))
    assert json.loads(arts.files["plan.json"])["strategy"]["grad_reduce_dtype"] == "fp16"
    assert "--grad-reduce-in-bf16" not in arts.files["megatron_args.txt"]
    for dtype in ("bf16", "fp32"):
        asked = {**req, "training": {**req["training"], "grad_reduce_dtype": dtype}}
        with pytest.raises(ValueError, match=f"grad_reduce_dtype '{dtype}' with precision 'fp16'"):
            PlanRequest.model_validate(asked)
