"""The checkpoint interval the planner chose (Plan.checkpoint, app/planner/goodput.py) is what the rendered Megatron
arguments, the DeepSpeed trainer's arguments and plan.json carry; an explicit render option still wins. And a
repeated flag in extra_args is refused in its `--flag=value` form too."""

from __future__ import annotations

import json
import shlex

import pytest
from render_cases import DATA, fixed_result

from app.planner.goodput import checkpoint_plan
from app.planner.results import PlanResult
from app.render import RenderOptions, render

ONE_NODE = {"num_nodes": 1, "gpus_per_node": 8, "gpu": "A100-80GB"}


def with_checkpoint(framework: str, parallel: dict[str, object], step_s: float = 2.0) -> PlanResult:
    req = {"model": "llama-2-7b", "cluster": ONE_NODE, "training": {"global_batch_size": 64, "framework": framework}}
    result = fixed_result(req, parallel)
    plan = result.plans[0]
    cp = checkpoint_plan(result.model, result.cluster, 8, step_s)
    return result.model_copy(update={"plans": [plan.model_copy(update={"checkpoint": cp})]})


def words(text: str) -> list[str]:
    return shlex.split(text, comments=True)


def after(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_megatron_args_use_the_planned_interval() -> None:
    result = with_checkpoint("megatron", {"tp": 2, "dp": 4})
    interval = result.plans[0].checkpoint.interval_steps  # type: ignore[union-attr]
    assert interval > 1
    arts = render(result, 1, RenderOptions(checkpoint_dir="/ckpt"))
    assert after(words(arts.files["megatron_args.txt"]), "--save-interval") == str(interval)
    plan = json.loads(arts.files["plan.json"])
    assert plan["prediction"]["checkpoint_interval_steps"] == interval
    cp = result.plans[0].checkpoint
    assert plan["prediction"]["checkpoint_save_s"] == pytest.approx(cp.save_s)  # type: ignore[union-attr]
    assert plan["prediction"]["checkpoint_bytes"] == cp.size_bytes  # type: ignore[union-attr]
    assert plan["prediction"]["goodput"] == pytest.approx(cp.goodput)  # type: ignore[union-attr]
    explicit = render(result, 1, RenderOptions(checkpoint_dir="/ckpt", save_interval=250))
    assert after(words(explicit.files["megatron_args.txt"]), "--save-interval") == "250"  # the option wins


def test_the_deepspeed_trainer_gets_the_planned_interval() -> None:
    result = with_checkpoint("deepspeed", {"dp": 8, "zero_stage": 1}, step_s=0.5)
    interval = result.plans[0].checkpoint.interval_steps  # type: ignore[union-attr]
    arts = render(result, 1, RenderOptions(checkpoint_dir="/ckpt"))
    args = json.loads(arts.files["plan.json"])["entrypoint"]["args"]
    assert after(args, "--save-interval") == str(interval)


def test_plans_without_a_checkpoint_field_keep_the_option() -> None:
    result = fixed_result(
        {"model": "llama-2-7b", "cluster": ONE_NODE, "training": {"global_batch_size": 64}}, {"tp": 2, "dp": 4}
    )
    assert result.plans[0].checkpoint is None  # as stored before the field existed
    arts = render(result, 1, RenderOptions(checkpoint_dir="/ckpt"))
    assert after(words(arts.files["megatron_args.txt"]), "--save-interval") == "1000"


@pytest.mark.parametrize("extra", [("--lr=0.5",), ("--tensor-model-parallel-size=1",)])
def test_a_repeated_flag_is_refused_in_its_equals_form(extra: tuple[str, ...]) -> None:
    name = extra[0].split("=")[0]
    megatron = fixed_result(
        {"model": "llama-2-7b", "cluster": ONE_NODE, "training": {"global_batch_size": 64}}, {"tp": 2, "dp": 4}
    )
    with pytest.raises(ValueError, match=f"extra_args: {name}=[^ ]* is already set by the plan"):
        render(megatron, 1, RenderOptions(extra_args=extra))
    if name == "--lr":
        ds = fixed_result(
            {
                "model": "llama-2-7b",
                "cluster": ONE_NODE,
                "training": {"global_batch_size": 64, "framework": "deepspeed"},
            },
            {"dp": 8, "zero_stage": 1},
        )
        with pytest.raises(ValueError, match=r"extra_args: --lr=0\.5 is already set by the plan"):
            render(ds, 1, RenderOptions(**DATA, extra_args=extra))
