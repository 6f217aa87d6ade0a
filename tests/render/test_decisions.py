"""Issue 12, defects 3 and 9: the plan carries its decisions and the renderer only formats them; ZeRO-3 with NVMe
offload pins the host buffers the memory model counts (sub_group_size), not DeepSpeed's 1e9-element default."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from render_cases import fixed_result

from app.planner import PlanRequest, plan
from app.planner.decisions import decide
from app.planner.results import PlanResult
from app.planner.states import ZERO3_NVME_SUB_GROUP_SIZE
from app.render import render

RENDER = Path(__file__).resolve().parents[2] / "app" / "render"
NVME = {
    "model": "llama-2-7b",
    "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "A100-40GB", "nvme_path": "/local_nvme"},
    "training": {"global_batch_size": 64, "framework": "deepspeed"},
}
NVME_PAR = {"dp": 16, "zero_stage": 3, "offload_optimizer": "nvme", "offload_param": "nvme"}


def test_the_renderer_never_imports_the_cost_model() -> None:
    for path in RENDER.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module not in ("app.planner.memory", "app.planner.step", "app.planner.estimate"), path


def test_every_searched_plan_carries_its_decisions() -> None:
    result = plan(PlanRequest(**{**NVME, "training": {**NVME["training"], "max_plans": 3}}))
    assert result.plans and all(p.decisions is not None for p in result.plans)
    for p in result.plans:
        assert p.decisions == decide(result.model, result.cluster, result.training, p.parallel, p.estimate)


def test_files_follow_the_stored_decisions_not_newer_code() -> None:
    """A stored plan whose decisions differ from what today's code would decide renders its own decisions."""
    result = fixed_result({**NVME, "cluster": {**NVME["cluster"], "num_nodes": 1}}, {"dp": 8, "zero_stage": 2})
    p = result.plans[0]
    assert p.decisions is not None and p.decisions.deepspeed is not None
    zero = p.decisions.deepspeed.zero.model_copy(update={"reduce_bucket_size": 123_456, "overlap_comm": False})
    old = p.decisions.model_copy(
        update={"deepspeed": p.decisions.deepspeed.model_copy(update={"zero": zero}), "distributed_timeout_minutes": 77}
    )
    stored = PlanResult.model_validate_json(
        result.model_copy(update={"plans": [p.model_copy(update={"decisions": old})]}).model_dump_json()
    )
    cfg = json.loads(render(stored).files["ds_config.json"])["zero_optimization"]
    assert (cfg["reduce_bucket_size"], cfg["overlap_comm"]) == (123_456, False)


def test_a_plan_stored_before_decisions_existed_still_renders_and_says_so() -> None:
    result = fixed_result({**NVME, "cluster": {**NVME["cluster"], "num_nodes": 1}}, {"dp": 8, "zero_stage": 2})
    legacy = result.model_copy(update={"plans": [result.plans[0].model_copy(update={"decisions": None})]})
    arts = render(legacy)
    assert arts.files == render(result).files
    assert any("stored without its decisions" in n for n in arts.notes)


def test_nvme_offload_pins_what_the_memory_model_counts(deepspeed_config) -> None:
    """DeepSpeed's optimizer swapper pins buffer_count host buffers of the largest sub-group (optimizer_utils.py
    SwapBufferManager); the memory model counts 4 x 1e8 fp32 elements (memory._offload_buffers)."""
    from app.planner import memory

    result = fixed_result(NVME, NVME_PAR)
    cfg = json.loads(render(result).files["ds_config.json"])
    zero = cfg["zero_optimization"]
    ds = deepspeed_config(cfg, 16, 1)
    assert ds.zero_config.sub_group_size == zero["sub_group_size"] == ZERO3_NVME_SUB_GROUP_SIZE
    opt = ds.zero_config.offload_optimizer
    pinned = opt.buffer_count * ds.zero_config.sub_group_size * 4
    assert pinned == 1_600_000_000 < 1e9 * 4  # DeepSpeed's default sub-group would pin 16 GB per rank
    counted = memory._offload_buffers(result.plans[0].parallel)
    assert counted == pinned + 5 * ds.zero_config.offload_param.buffer_size * 2


def test_zero3_without_nvme_writes_deepspeeds_sub_group_explicitly() -> None:
    result = fixed_result(NVME, {"dp": 16, "zero_stage": 3, "offload_optimizer": "cpu"})
    zero = json.loads(render(result).files["ds_config.json"])["zero_optimization"]
    assert zero["sub_group_size"] == 1_000_000_000 and zero["offload_optimizer"] == {
        "device": "cpu",
        "pin_memory": True,
    }


def test_the_timeout_follows_the_predicted_step() -> None:
    result = fixed_result(
        {
            "model": "gpt3-175b",
            "cluster": {"num_nodes": 16, "gpus_per_node": 8, "gpu": "A100-80GB"},
            "training": {"global_batch_size": 1536, "framework": "megatron"},
        },
        {"tp": 8, "pp": 16, "dp": 1, "micro_batch_size": 1, "recompute": "full"},
    )
    d = result.plans[0].decisions
    step = result.plans[0].estimate.time.step_s
    assert d.distributed_timeout_minutes == max(10, -(-5 * step // 60)) and step > 120
    assert d.distributed_timeout_minutes > 10
    args = render(result).files["megatron_args.txt"].splitlines()
    assert f"--distributed-timeout-minutes {d.distributed_timeout_minutes}" in args
