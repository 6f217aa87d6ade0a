"""The public API (render, RenderOptions, Artifacts, ARTIFACT_NAMES, write_artifacts), which files apply to which
framework, the environment decisions, and the plans the renderer refuses with a reason."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from render_cases import DATA, fixed_result

from app.render import ARTIFACT_NAMES, Artifacts, RenderOptions, render, write_artifacts
from app.render.render import environment

ONE_NODE = {"num_nodes": 1, "gpus_per_node": 8, "gpu": "A100-80GB"}


def request(framework: str = "megatron", model: object = "llama-2-7b", **cluster: object) -> dict:
    return {
        "model": model,
        "cluster": {**ONE_NODE, **cluster},
        "training": {"global_batch_size": 64, "framework": framework},
    }


def exports(text: str) -> dict[str, str]:
    return dict(re.findall(r"^export (\w+)=(\S+)", text, re.M))


def test_files_per_framework_in_artifact_order() -> None:
    expected = {
        "megatron": [
            "megatron_args.txt",
            "train.sh",
            "nccl_env.sh",
            "torchrun.sh",
            "sbatch.sh",
            "pytorchjob.yaml",
            "plan.json",
        ],
        "deepspeed": [
            "ds_config.json",
            "nccl_env.sh",
            "torchrun.sh",
            "hostfile",
            "deepspeed.sh",
            "sbatch.sh",
            "pytorchjob.yaml",
            "plan.json",
        ],
        "megatron-deepspeed": list(ARTIFACT_NAMES),
    }
    pars = {
        "megatron": {"tp": 2, "dp": 4},
        "deepspeed": {"dp": 8, "zero_stage": 2},
        "megatron-deepspeed": {"tp": 2, "dp": 4, "zero_stage": 1},
    }
    for framework, names in expected.items():
        options = RenderOptions(**(DATA if framework == "megatron-deepspeed" else {}))
        arts = render(fixed_result(request(framework), pars[framework]), 1, options)
        assert isinstance(arts, Artifacts) and list(arts.files) == names, framework


def test_write_artifacts_makes_scripts_executable(tmp_path: Path) -> None:
    arts = render(fixed_result(request(), {"tp": 2, "dp": 4}))
    paths = write_artifacts(arts, tmp_path / "out")
    assert [p.name for p in paths] == list(arts.files)
    for p in paths:
        executable = bool(p.stat().st_mode & stat.S_IXUSR)
        assert executable == p.name.endswith(".sh"), p.name
        assert p.read_text() == arts.files[p.name]


def test_unknown_rank_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"rank\(3\) is not among the result's plans \(ranks \[1\]\)"):
        render(fixed_result(request(), {"tp": 2, "dp": 4}), rank=3)


def test_templates_refuse_undefined_values() -> None:
    from jinja2 import UndefinedError

    with pytest.raises(UndefinedError):
        environment().from_string("{{ missing }}").render()


def test_sequence_parallel_only_with_tp() -> None:
    arts = render(fixed_result(request(), {"tp": 1, "dp": 8, "sequence_parallel": True}))
    assert "--sequence-parallel" not in arts.files["megatron_args.txt"]


@pytest.mark.parametrize(
    ("recompute", "flags"),
    [
        ("full", ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]),
        ("selective", ["--recompute-granularity selective"]),
        ("none", []),
    ],
)
def test_recompute_flags(recompute: str, flags: list[str]) -> None:
    text = render(fixed_result(request(), {"tp": 2, "dp": 4, "recompute": recompute})).files["megatron_args.txt"]
    assert [line for line in text.splitlines() if line.startswith("--recompute")] == flags


def test_fp16_writes_megatron_loss_scaling_matching_deepspeed() -> None:
    req = request()
    req["training"]["precision"] = "fp16"
    text = render(fixed_result(req, {"tp": 2, "dp": 4})).files["megatron_args.txt"]
    assert "--fp16\n--initial-loss-scale 65536\n--min-loss-scale 1.0\n" in text and "--bf16" not in text


@pytest.mark.parametrize(
    ("req", "par", "message"),
    [
        (request(model="bloom-176b", num_nodes=8), {"tp": 8, "pp": 8}, "ALiBi"),
        (
            request("megatron-deepspeed", model="mixtral-8x7b", num_nodes=4),
            {"tp": 8, "dp": 4, "zero_stage": 1},
            "mixture-of-experts models are rendered for Megatron-LM only",
        ),
        (
            request("deepspeed", model="llama-2-7b"),
            {"pp": 2, "dp": 4, "zero_stage": 1},
            r"plain DeepSpeed engine trains data parallel \+ ZeRO only",
        ),
    ],
)
def test_plans_the_tools_cannot_run_are_refused(req: dict, par: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render(fixed_result(req, par), 1, RenderOptions(**DATA))


def test_megatron_deepspeed_needs_a_dataset() -> None:
    with pytest.raises(ValueError, match="data_path: Megatron-DeepSpeed has no mock data"):
        render(fixed_result(request("megatron-deepspeed"), {"tp": 2, "dp": 4, "zero_stage": 1}))


@pytest.mark.parametrize(
    ("extra", "par", "message"),
    [
        (("--fp16",), {"tp": 2, "dp": 4}, "--fp16 contradicts the plan's --bf16 (the precision)"),
        (("--fp8-format", "e4m3"), {"tp": 2, "dp": 4}, "--fp8-format contradicts the plan's --bf16 (the precision)"),
        (("--data-path", "/d"), {"tp": 2, "dp": 4}, "--data-path contradicts the plan's --mock-data (the data)"),
        (
            ("--recompute-activations",),
            {"tp": 2, "dp": 4, "recompute": "full"},
            "--recompute-activations contradicts the plan's --recompute-granularity, --recompute-method, "
            "--recompute-num-layers (the recomputation)",
        ),
        (
            ("--num-virtual-stages-per-pipeline-rank", "2"),
            {"tp": 2, "pp": 2, "vpp": 2, "dp": 2},
            "--num-virtual-stages-per-pipeline-rank contradicts the plan's --num-layers-per-virtual-pipeline-stage "
            "(the interleaving)",
        ),
        (("--log-timers-to-tensorboard",) * 2, {"tp": 2, "dp": 4}, "--log-timers-to-tensorboard is given twice"),
    ],
)
def test_extra_args_may_not_set_what_the_plan_sets_under_another_name(extra: tuple, par: dict, message: str) -> None:
    """Megatron's validate_args aborted at start-up on these, or (--fp8-format on a bf16 plan) silently trained
    another plan; a flag given twice in extra_args was reported as set by the plan (QA, 2026-12-06)."""
    with pytest.raises(ValueError, match=re.escape(f"extra_args: {message}")):
        render(fixed_result(request(), par), 1, RenderOptions(extra_args=extra))


def test_extra_args_may_not_repeat_a_planned_flag() -> None:
    result = fixed_result(request(), {"tp": 2, "dp": 4})
    with pytest.raises(ValueError, match="extra_args: --tensor-model-parallel-size is already set by the plan"):
        render(result, 1, RenderOptions(extra_args=("--tensor-model-parallel-size", "1")))
    ds = fixed_result(request("deepspeed"), {"dp": 8, "zero_stage": 1})
    with pytest.raises(ValueError, match="extra_args: --lr is already set by the plan"):
        render(ds, 1, RenderOptions(extra_args=("--lr", "1e-3")))
    text = render(ds, 1, RenderOptions(extra_args=("--metrics-dir", "/tmp/m"))).files["torchrun.sh"]
    assert text.rstrip().endswith('--deepspeed_config "${HERE}/ds_config.json" \\\n  --metrics-dir /tmp/m')


def test_multi_node_without_an_address_says_what_is_missing() -> None:
    arts = render(fixed_result(request("deepspeed", num_nodes=2), {"dp": 16, "zero_stage": 1}))
    assert "plan.json" not in arts.files
    assert any("hostfile lists placeholder names" in n for n in arts.notes)
    assert 'MASTER_ADDR="${MASTER_ADDR:?' in arts.files["torchrun.sh"]
    assert "replace-with-host-1 slots=8" in arts.files["hostfile"]


def test_renderer_imports_no_web_framework_and_no_training_stack() -> None:
    code = (
        "import sys, app.render; bad = [m for m in ('fastapi', 'starlette', 'torch', 'deepspeed', 'megatron') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2], env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
