"""Every artifact of a plan describes the same job: world size, nodes, GPUs per node, batch sizes, parallel sizes
and environment, each read back from the file the way its tool reads it (scripts run with recorders)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from render_consistency import check, observe

from app.planner import PlanRequest, plan
from app.render import RenderOptions, render
from app.render.support import unsupported


def test_golden_cases_agree(golden_rendered, tmp_path: Path) -> None:
    workdir = tmp_path / "checkout"  # the scripts cd into options.workdir: make it exist here
    workdir.mkdir()
    for name, (case, result, _arts) in golden_rendered.items():
        p = result.plans[0]
        options = {**case.options, "workdir": str(workdir)} if "workdir" in case.options else case.options
        arts = render(result, 1, RenderOptions(**options))
        facts = check(observe(arts, tmp_path / name))
        assert facts["world"] == p.layout.world_size and facts["nodes"] == p.layout.num_nodes
        assert facts["dp"] == p.parallel.dp and facts["gbs"] == result.training.global_batch_size


def test_searched_plans_agree(searched_rendered, tmp_path: Path) -> None:
    for i, (label, result, rank, arts) in enumerate(searched_rendered):
        p = result.plans[rank - 1]
        facts = check(observe(arts, tmp_path / f"p{i}"))
        assert (facts["world"], facts["dp"], facts["mbs"]) == (
            p.layout.world_size,
            p.parallel.dp,
            p.parallel.micro_batch_size,
        ), label


DENSE = ("tiny-gpt", "llama-2-7b", "llama-3-8b", "gpt3-175b")
MOE = ("mixtral-8x7b", "qwen3-30b-a3b")
GPUS = ("A100-80GB", "H100-SXM", "H200")


@st.composite
def requests(draw: st.DrawFn) -> dict:
    framework = draw(st.sampled_from(("megatron", "megatron-deepspeed", "deepspeed")))
    nodes = draw(st.sampled_from((1, 2, 4)))
    cluster = {"num_nodes": nodes, "gpus_per_node": draw(st.sampled_from((4, 8))), "gpu": draw(st.sampled_from(GPUS))}
    if draw(st.booleans()):
        cluster["nics"] = [f"mlx5_{i}" for i in range(draw(st.integers(1, 4)))]
    if draw(st.booleans()):
        cluster["hosts"] = [f"host{i}" for i in range(nodes)]
    fp8 = framework == "megatron" and cluster["gpu"] != "A100-80GB"  # FP8 on a GPU without it is an input error
    precision = draw(st.sampled_from(("bf16", "fp16", "fp8") if fp8 else ("bf16", "fp16")))
    training = {
        "global_batch_size": draw(st.sampled_from((32, 64, 256))),
        "framework": framework,
        "precision": precision,
        "max_plans": 4,
        "search_time_limit_s": 5,
    }
    if framework == "deepspeed":  # the search also proposes pipeline stages for it: pin the plain engine's layout
        training["pinned"] = {"pp": 1}
    models = DENSE + MOE if framework == "megatron" else DENSE  # MoE is planned for Megatron-LM only
    return {"model": draw(st.sampled_from(models)), "cluster": cluster, "training": training}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests(), pick=st.integers(0, 3))
def test_any_searched_plan_agrees(request: dict, pick: int, tmp_path: Path) -> None:
    from render_cases import options_for

    result = plan(PlanRequest(**request))
    if not result.plans:
        event("no plan fits")
        return
    p = result.plans[pick % len(result.plans)]
    reasons = unsupported(
        result.model,
        result.training,
        p,
        "examples/train_gpt.py" if result.training.framework == "deepspeed" else "pretrain_gpt.py",
    )
    if reasons:  # the planner proposed what the tools cannot run: render must refuse it, saying why
        event("refused: " + reasons[0].split(":")[0])
        with pytest.raises(ValueError, match=r"only|trains data parallel|ALiBi"):
            render(result, p.rank, options_for(result))
        return
    event(f"rendered {result.training.framework}")
    arts = render(result, p.rank, options_for(result))
    facts = check(observe(arts, tmp_path / f"r{p.rank}-{abs(hash(str(request)))}"))
    assert facts["world"] == p.layout.world_size
    assert facts["gbs"] == result.training.global_batch_size
