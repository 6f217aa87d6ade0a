"""What the files said wrong (QA of 2026-12-07, rendered and checked against Megatron-LM, Megatron-DeepSpeed and
DeepSpeed): each test names its finding."""

from __future__ import annotations

import pytest
from render_cases import fixed_result

from app.planner import PlanRequest, plan
from app.planner.errors import InputError
from app.planner.goodput import checkpoint_bytes, storage_bandwidth
from app.render import RenderOptions, render

H100 = {"num_nodes": 8, "gpus_per_node": 8, "gpu": "H100-SXM"}


def test_delayed_fp8_is_never_planned_with_layernorm_or_moe_act_recompute() -> None:
    """Every one of Mixtral's top plans under fp8_recipe delayed recomputed layernorm and moe_act, which megatron-core
    0.16.1's TransformerConfig refuses ("Delayed scaling does not support moe_act and layernorm recompute")."""
    training = {"global_batch_size": 256, "precision": "fp8", "fp8_recipe": "delayed", "max_plans": 30}
    result = plan(PlanRequest(model="mixtral-8x22b", cluster=H100, training=training))
    assert result.plans
    for p in result.plans:
        assert not {"layernorm", "moe_act"} & set(p.parallel.recompute_modules or ()), p.parallel
    tensorwise = plan(PlanRequest(model="mixtral-8x22b", cluster=H100, training={**training, "fp8_recipe": None}))
    assert any("moe_act" in (p.parallel.recompute_modules or ()) for p in tensorwise.plans)  # the rule is the recipe's
    pinned = {**training, "pinned": {"recompute_modules": ["layernorm"]}}
    with pytest.raises(InputError, match="fp8_recipe delayed does not support"):
        plan(PlanRequest(model="llama-3-8b", cluster={**H100, "num_nodes": 1}, training=pinned))


def test_megatron_deepspeed_is_planned_without_sequence_parallelism() -> None:
    """Under --deepspeed Megatron-DeepSpeed skips the layer-norm gradient all-reduce SP needs (training.py:731-732)
    and DeepSpeed's pipeline partitions activations across the TP group (DeepSpeed#4196): its TP plans carried
    --sequence-parallel. None does now, and a pinned SP is refused by name."""
    cluster = {"num_nodes": 4, "gpus_per_node": 8, "gpu": "A100-80GB"}
    training = {"global_batch_size": 256, "framework": "megatron-deepspeed", "max_plans": 30}
    result = plan(PlanRequest(model="llama-2-70b", cluster=cluster, training={**training, "pinned": {"tp": 4}}))
    assert result.plans and not any(p.parallel.sequence_parallel for p in result.plans)
    data = RenderOptions(data_path="/d/x_text_document", tokenizer_type="HuggingFaceTokenizer", tokenizer_model="m/l")
    for p in result.plans[:3]:
        assert "--sequence-parallel" not in render(result, p.rank, data).files["megatron_args.txt"]
    pinned = plan(PlanRequest(model="llama-2-70b", cluster=cluster, training={**training, "pinned": {"tp": 4,
                              "sequence_parallel": True}}))  # fmt: skip
    assert not pinned.plans and any("no Megatron sequence parallelism" in r.message for r in pinned.rejected)
    with pytest.raises(InputError, match="recomputes every layer or none"):
        plan(PlanRequest(model="llama-2-70b", cluster=cluster, training={**training, "pinned": {"pp": 4, "tp": 8,
                         "recompute": "full", "recompute_num_layers": 5}}))  # fmt: skip


def test_the_graceful_stop_leaves_time_for_the_predicted_checkpoint_save() -> None:
    """On 0.5 GB/s storage a 70B checkpoint takes ~33 min to write, and sbatch's --signal, torchrun's shutdown
    timeout and --exit-duration-in-mins left 600 s: the final save was cut off."""
    request = {
        "model": "llama-3-70b",
        "cluster": {**H100, "hosts": [f"n{i}" for i in range(8)], "checkpoint_storage_GBps": 0.5},
        "training": {"global_batch_size": 512},
    }
    result = fixed_result(request, {"tp": 8, "pp": 2, "dp": 4, "distributed_optimizer": True})
    req = PlanRequest(**request)
    save = checkpoint_bytes(req.model) / storage_bandwidth(req.cluster)
    step = result.plans[0].estimate.time.step_s
    grace = result.plans[0].decisions.graceful_stop_s
    assert save > 1800 and grace >= save + 2 * step + 300 > 600
    files = render(result, 1, RenderOptions(slurm_time_limit="2-00:00:00")).files
    assert f"#SBATCH --signal=TERM@{grace}" in files["sbatch.sh"]
    assert f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT={grace}" in files["train.sh"]
    fast = fixed_result({**request, "cluster": {**request["cluster"], "checkpoint_storage_GBps": 500}},
                        {"tp": 8, "pp": 2, "dp": 4, "distributed_optimizer": True})  # fmt: skip
    assert fast.plans[0].decisions.graceful_stop_s == 600  # the floor where the save is short


def test_file_headers_name_the_plan_as_the_plan_table_does() -> None:
    """The headers and plan.json's meta.summary called Megatron-FSDP "dist-opt" and left out activation offload and
    FP8 weights that the arguments set."""
    par = {"tp": 1, "dp": 8, "distributed_optimizer": True, "megatron_fsdp": "optim_grads", "micro_batch_size": 1,
           "cpu_offloading_num_layers": 4}  # fmt: skip
    request = {"model": "llama-3-8b", "cluster": {**H100, "num_nodes": 1}, "training": {"global_batch_size": 64}}
    files = render(fixed_result(request, par)).files
    header = files["megatron_args.txt"].splitlines()[0]
    assert "M-FSDP(optim_grads)" in header and "act-offload(4 layers)" in header, header
    assert "--use-megatron-fsdp" in files["megatron_args.txt"]


def test_the_tree_all_reduce_reason_counts_the_nodes_one_group_spans() -> None:
    """TP2 PP2 DP8 on 4 nodes: each stage's DP group spans 2 nodes (tp-cp-ep-dp-pp order), and the reason said 4."""
    request = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 4, "gpus_per_node": 8, "gpu": "A100-80GB", "hosts": ["a", "b", "c", "d"]},
        "training": {"global_batch_size": 256},
    }
    result = fixed_result(request, {"tp": 2, "pp": 2, "dp": 8})
    reason = result.plans[0].decisions.nccl.reason
    assert "cross 2 nodes" in reason, reason


def test_megatron_deepspeed_zero2_asks_deepspeed_for_the_fp32_accumulation_it_is_planned_with(
    deepspeed_config,  # type: ignore[no-untyped-def]
) -> None:
    """The memory model counted ZeRO-2's fp32 partition buffer (Megatron-DeepSpeed accumulates in fp32) while the
    ds_config asked for fp32 accumulation under BF16_Optimizer only: DeepSpeed then accumulated in bf16."""
    import json

    request = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "A100-80GB", "hosts": ["a", "b"]},
        "training": {"global_batch_size": 128, "framework": "megatron-deepspeed"},
    }
    result = fixed_result(request, {"tp": 1, "pp": 1, "dp": 16, "zero_stage": 2, "micro_batch_size": 2})
    data = RenderOptions(data_path="/d/x_text_document", tokenizer_type="HuggingFaceTokenizer", tokenizer_model="m/l")
    config = json.loads(render(result, 1, data).files["ds_config.json"])
    assert config["data_types"] == {"grad_accum_dtype": "fp32"}
    assert deepspeed_config(config, 16, 1).grad_accum_dtype == "fp32"  # DeepSpeed's own reading of it


def test_plan_json_goodput_is_that_of_the_interval_the_files_save_at() -> None:
    """--save-interval 20 beside a goodput of 0.9907, Daly's interval's (964 steps); at 20 steps it is 0.818."""
    import json

    from app.planner.goodput import goodput

    request = {
        "model": "llama-2-70b",
        "cluster": {**H100, "hosts": [f"n{i}" for i in range(8)]},
        "training": {"global_batch_size": 512, "max_plans": 1},
    }
    result = plan(PlanRequest(**request))
    p = result.plans[0]
    assert p.checkpoint is not None and p.checkpoint.interval_steps > 20
    chosen = render(result, 1, RenderOptions(checkpoint_dir="/ckpt", save_interval=20)).files["plan.json"]
    prediction = json.loads(chosen)["prediction"]
    cp = p.checkpoint
    assert prediction["checkpoint_interval_steps"] == 20
    assert prediction["goodput"] == pytest.approx(
        goodput(20 * p.estimate.time.step_s, cp.save_s, cp.restart_s, cp.mtbf_s)
    )
    assert prediction["goodput"] < cp.goodput
    daly = json.loads(render(result, 1, RenderOptions(checkpoint_dir="/ckpt")).files["plan.json"])["prediction"]
    assert daly["goodput"] == cp.goodput and daly["checkpoint_interval_steps"] == cp.interval_steps
