"""Every rendered ds_config.json is accepted by DeepSpeed's own configuration classes with the plan's data-parallel
world size, uses only keys DeepSpeed reads, and selects the optimizer path the planner's memory model assumed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from render_cases import fixed_result

from app.planner import PlanRequest, plan
from app.planner.errors import InputError
from app.planner.states import deepspeed_uses_bf16_optimizer, zero_buckets
from app.render import RenderOptions, render

VARIANTS = (  # (request changes, parallel): every ZeRO stage, both 16-bit types, CPU and NVMe offload, DeepSpeed PP
    ("deepspeed", "bf16", {"dp": 8, "zero_stage": 1, "micro_batch_size": 2}),
    ("deepspeed", "fp16", {"dp": 8, "zero_stage": 2, "micro_batch_size": 1}),
    ("deepspeed", "fp16", {"dp": 8, "zero_stage": 0, "micro_batch_size": 1}),
    ("deepspeed", "bf16", {"dp": 8, "zero_stage": 2, "offload_optimizer": "cpu", "micro_batch_size": 1}),
    ("deepspeed", "bf16", {"dp": 8, "zero_stage": 3, "offload_optimizer": "nvme", "offload_param": "nvme"}),
    ("deepspeed", "bf16", {"dp": 8, "zero_stage": 3, "offload_optimizer": "cpu", "recompute": "full"}),
    ("megatron-deepspeed", "bf16", {"tp": 2, "pp": 2, "dp": 2, "zero_stage": 1, "sequence_parallel": True}),
    (
        "megatron-deepspeed",
        "bf16",
        {"tp": 2, "dp": 4, "zero_stage": 3, "offload_param": "cpu", "offload_optimizer": "cpu"},
    ),
    ("megatron-deepspeed", "fp16", {"tp": 4, "pp": 2, "zero_stage": 0, "recompute": "full"}),
)
DATA = {"data_path": "/data/d", "tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": "org/tok"}


def variant(framework: str, precision: str, parallel: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    request = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "A100-80GB", "nvme_path": "/nvme"},
        "training": {"global_batch_size": 64, "framework": framework, "precision": precision},
    }
    result = fixed_result(request, parallel)
    options = RenderOptions(**(DATA if framework == "megatron-deepspeed" else {}))
    return result, json.loads(render(result, 1, options).files["ds_config.json"])


def _all_configs(all_rendered) -> list[tuple[str, Any, int, dict[str, Any]]]:
    out = [
        (label, result, rank, json.loads(arts.files["ds_config.json"]))
        for label, result, rank, arts in all_rendered
        if "ds_config.json" in arts.files
    ]
    for fw, precision, par in VARIANTS:
        result, cfg = variant(fw, precision, par)
        out.append((f"{fw}/{precision}/{par}", result, 1, cfg))
    return out


def test_deepspeed_accepts_every_config_with_the_plans_dp(deepspeed_config, all_rendered) -> None:
    configs = _all_configs(all_rendered)
    assert len(configs) >= 15
    for label, result, rank, cfg in configs:
        par = result.plans[rank - 1].parallel
        ds = deepspeed_config(cfg, par.dp, par.tp * par.pp)
        assert ds.world_size == par.dp, label
        assert ds.train_batch_size == ds.train_micro_batch_size_per_gpu * ds.gradient_accumulation_steps * par.dp
        assert ds.train_batch_size == result.training.global_batch_size, label
        assert ds.zero_optimization_stage == par.zero_stage, label
        assert ds.gradient_clipping == 1.0


def test_optimizer_and_scheduler_blocks_build_with_deepspeeds_classes(all_rendered) -> None:
    """DeepSpeedConfig does not look inside them; the scheduler class itself validates its parameters."""
    import torch
    from deepspeed.runtime.lr_schedules import WarmupCosineLR

    built = 0
    for label, _result, _rank, cfg in _all_configs(all_rendered):
        if "optimizer" not in cfg:
            continue
        assert cfg["optimizer"]["type"] == "AdamW"
        params = {k: v for k, v in cfg["optimizer"]["params"].items() if k != "torch_adam"}  # DeepSpeed's key
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], **params)
        assert cfg["scheduler"]["type"] == "WarmupCosineLR", label
        WarmupCosineLR(opt, **cfg["scheduler"]["params"])
        built += 1
    assert built >= 5
    short = variant_with_options({"train_iters": 3})  # a warm-up of train_iters // 10 = 0 steps: DeepSpeed needs 1
    WarmupCosineLR(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))]), **short["scheduler"]["params"])


def variant_with_options(options: dict[str, Any]) -> dict[str, Any]:
    request = {
        "model": "tiny-gpt",
        "cluster": {"num_nodes": 1, "gpus_per_node": 2, "gpu": "A100-80GB"},
        "training": {"global_batch_size": 8, "framework": "deepspeed"},
    }
    result = fixed_result(request, {"dp": 2, "zero_stage": 1, "micro_batch_size": 2})
    return json.loads(render(result, 1, RenderOptions(**options)).files["ds_config.json"])


def test_deepspeed_rejects_a_broken_batch_identity(deepspeed_config) -> None:
    """The check above can fail: DeepSpeed itself refuses a config whose batch identity is off by one GPU."""
    _result, cfg = variant("deepspeed", "bf16", {"dp": 8, "zero_stage": 1, "micro_batch_size": 2})
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        deepspeed_config(cfg, 7, 1)


def _deepspeed_keys() -> str:
    import deepspeed

    root = Path(deepspeed.__file__).parent / "runtime"
    return "".join(p.read_text() for p in root.rglob("*.py"))


def test_every_top_level_key_is_one_deepspeed_reads(all_rendered) -> None:
    """DeepSpeed ignores unknown top-level keys silently (only its pydantic sections forbid extras)."""
    source = _deepspeed_keys()
    keys = {k for _l, _r, _k, cfg in _all_configs(all_rendered) for k in cfg}
    keys |= {k for _l, _r, _k, cfg in _all_configs(all_rendered) for k in cfg.get("pipeline", {})}
    unknown = [k for k in keys if f'"{k}"' not in source and f"'{k}'" not in source]
    assert not unknown, f"keys DeepSpeed's runtime never names: {unknown}"


def test_buckets_and_offload_are_the_memory_models(all_rendered) -> None:
    for label, result, rank, cfg in _all_configs(all_rendered):
        par = result.plans[rank - 1].parallel
        zero, buckets = cfg["zero_optimization"], zero_buckets(result.model, par.zero_stage)
        if par.zero_stage:
            assert zero["reduce_bucket_size"] == buckets.reduce_bucket_size, label
            assert zero["overlap_comm"] == (par.zero_stage >= 2), label  # memory.py doubles buckets for >= 2
        if par.zero_stage == 3:
            assert zero["stage3_prefetch_bucket_size"] == buckets.prefetch_bucket_size
            assert zero["stage3_param_persistence_threshold"] == buckets.param_persistence_threshold
            assert zero["stage3_max_live_parameters"] == buckets.max_live_parameters
        for key, device in (("offload_optimizer", par.offload_optimizer), ("offload_param", par.offload_param)):
            block = zero.get(key)
            assert (block or {}).get("device", "none") == device, label
            if block:
                assert block["pin_memory"] is True
                assert ("nvme_path" in block) == (block["device"] == "nvme"), label
                assert block["device"] != "nvme" or "aio" in cfg, label
        assert "zero_force_ds_cpu_optimizer" not in cfg, "production keeps DeepSpeedCPUAdam for offload"
        assert ("fp16" in cfg) == (result.training.precision == "fp16")
        assert ("bf16" in cfg) == (result.training.precision == "bf16")
        assert ("pipeline" in cfg) == (result.training.framework == "megatron-deepspeed" and par.pp > 1)


class EngineView:
    """DeepSpeedEngine's own dtype and optimizer-path methods, run on a config without building an engine."""

    def __init__(self, config: Any, pipeline: bool) -> None:
        self._config, self.pipeline_parallelism, self.global_rank = config, pipeline, 0

    @staticmethod
    def bind() -> None:
        from deepspeed.runtime.engine import DeepSpeedEngine as E

        for name in (
            "fp16_enabled",
            "bfloat16_enabled",
            "get_data_types",
            "zero_optimization",
            "zero_optimization_stage",
            "zero_cpu_offload",
            "zero_compute_grad_norm",
            "zero_allow_untested_optimizer",
            "_do_optimizer_sanity_check",
        ):
            setattr(EngineView, name, getattr(E, name))


def test_optimizer_path_is_the_one_the_memory_model_assumed(deepspeed_config, all_rendered) -> None:
    """BF16_Optimizer (full fp32 gradients) exactly when memory.deepspeed_uses_bf16_optimizer says so."""
    import torch
    from deepspeed.runtime.constants import BFLOAT16

    EngineView.bind()
    adam = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    for label, result, rank, cfg in _all_configs(all_rendered):
        par = result.plans[rank - 1].parallel
        ds = deepspeed_config(cfg, par.dp, par.tp * par.pp)
        view = EngineView(ds, pipeline=result.training.framework == "megatron-deepspeed" and par.pp > 1)
        path = view._do_optimizer_sanity_check(adam)  # type: ignore[attr-defined]
        assert (path == BFLOAT16) == deepspeed_uses_bf16_optimizer(result.training, par), (label, path)
        expected_wire = "fp32" if path == BFLOAT16 else result.training.precision
        assert cfg["communication_data_type"] == expected_wire, label


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(
    framework=st.sampled_from(["deepspeed", "megatron-deepspeed"]),
    model=st.sampled_from(["tiny-gpt", "llama-2-7b"]),
    gpus=st.sampled_from([(1, 1), (1, 2), (1, 8), (2, 4), (2, 8)]),
    batch=st.sampled_from([1, 8, 24, 64, 256]),
    precision=st.sampled_from(["bf16", "fp16"]),
    pins=st.sampled_from(
        [
            {},
            {"zero_stage": 3},
            {"zero_stage": 2},
            {"recompute": "full"},
            {"micro_batch_size": 2},
            {"offload_optimizer": "cpu", "zero_stage": 3},
            {"tp": 2},
            {"pp": 2},
        ]
    ),
)
def test_deepspeed_accepts_the_config_of_every_plan_the_search_returns(
    deepspeed_config: Any,
    framework: str,
    model: str,
    gpus: tuple[int, int],
    batch: int,
    precision: str,
    pins: dict[str, Any],
) -> None:
    """Random DeepSpeed and Megatron-DeepSpeed requests, planned by the search (not a fixed layout): each of the top
    plans' ds_config.json builds DeepSpeed's own DeepSpeedConfig with the plan's DP, and keeps the batch identity."""
    request = {
        "model": model,
        "cluster": {"num_nodes": gpus[0], "gpus_per_node": gpus[1], "gpu": "A100-80GB"},
        "training": {"global_batch_size": batch, "framework": framework, "precision": precision, "pinned": pins,
                     "search_time_limit_s": 5.0},
    }  # fmt: skip
    try:
        result = plan(PlanRequest(**request))
    except (InputError, ValidationError):
        return
    options = RenderOptions(**(DATA if framework == "megatron-deepspeed" else {}), master_addr="10.0.0.1")
    for rank in range(1, min(3, len(result.plans)) + 1):
        par = result.plans[rank - 1].parallel
        cfg = json.loads(render(result, rank, options).files["ds_config.json"])
        ds = deepspeed_config(cfg, par.dp, par.tp * par.pp)
        assert ds.world_size == par.dp
        assert (
            ds.train_batch_size == batch == ds.train_micro_batch_size_per_gpu * ds.gradient_accumulation_steps * par.dp
        )
        assert ds.zero_optimization_stage == par.zero_stage


def test_a_hugging_face_moe_under_zero3_names_its_sparse_blocks_as_deepspeeds_own_leaf_modules(
    deepspeed_config,
) -> None:
    """A Mixtral plan under ZeRO-3 with the user's own Hugging Face script: ds_config.json builds DeepSpeed's own
    config, and its leaf modules are DeepSpeed's defaults (the sparse blocks the planner counts as gathered whole);
    the example trainer builds the transformers network (`--model-impl hf`), but not a block with shared experts."""
    from deepspeed.runtime.zero.leaf_module_config import DEFAULT_LEAF_MODULE_CLASSES

    request = {
        "model": "mixtral-8x7b",
        "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 64, "framework": "deepspeed"},
    }
    result = fixed_result(request, {"dp": 8, "zero_stage": 3, "recompute": "full"})
    cfg = json.loads(render(result, 1, RenderOptions(entrypoint="train_hf.py")).files["ds_config.json"])
    built = deepspeed_config(cfg, 8, 1)
    assert built.zero_config.leaf_module.classes == DEFAULT_LEAF_MODULE_CLASSES
    assert cfg["zero_optimization"]["leaf_module"]["classes"] == DEFAULT_LEAF_MODULE_CLASSES
    dense = fixed_result({**request, "model": "llama-2-7b"}, {"dp": 8, "zero_stage": 3})
    dense_cfg = json.loads(render(dense, 1, RenderOptions()).files["ds_config.json"])
    assert "leaf_module" not in dense_cfg["zero_optimization"]
    assert "--model-impl hf" in render(result, 1, RenderOptions()).files["torchrun.sh"]
    assert "--model-impl" not in render(result, 1, RenderOptions(entrypoint="train_hf.py")).files["torchrun.sh"]
    shared = fixed_result({**request, "model": "qwen2-57b-a14b"}, {"dp": 8, "zero_stage": 3, "recompute": "full"})
    with pytest.raises(ValueError, match="builds transformers' Mixtral and Qwen3-MoE blocks, not shared experts"):
        render(shared, 1, RenderOptions())


def test_the_optimizer_deepspeed_builds_is_the_one_the_planner_timed(all_rendered) -> None:
    """A Hugging Face model under DeepSpeed is timed with torch's AdamW (multi-tensor: a group-sized temporary,
    ~80 B of traffic a parameter), as the measured H200 runs ran it; the config asked DeepSpeed for FusedAdam (in
    place, ~30 B, and a JIT-compiled op). Now DeepSpeed's own code picks torch's AdamW from the rendered block, and
    under optimizer offload still DeepSpeedCPUAdam (the planner times that one at the CPU Adam rate)."""
    import torch
    from deepspeed.runtime.config import TORCH_ADAM_PARAM
    from deepspeed.runtime.engine import DeepSpeedEngine

    seen = set()
    for label, result, _rank, cfg in _all_configs(all_rendered):
        if "optimizer" not in cfg:
            continue
        params = cfg["optimizer"]["params"]
        offloaded = cfg["zero_optimization"].get("offload_optimizer", {}).get("device", "none") != "none"
        timed_torch = result.training.software.costs.optimizer == "torch-adamw"
        assert params.get(TORCH_ADAM_PARAM, False) == (timed_torch and not offloaded), label
        if params.get(TORCH_ADAM_PARAM):  # the branch of DeepSpeed's choice that reads nothing else of the engine
            chosen, _kwargs = DeepSpeedEngine.get_optimizer_configuration(None, dict(params), True)  # type: ignore[arg-type]
            assert chosen is torch.optim.AdamW, label
        seen.add((timed_torch, offloaded))
    assert (True, False) in seen and (True, True) in seen
