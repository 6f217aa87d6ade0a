"""Issue 12 defects 2 and 8, and issue 10: the flags an expert adds, each only where it applies, and every new
dimension of the parallel configuration rendered in Megatron-LM's own flag, accepted by megatron-core's config
classes and Megatron-LM's rules, and carried by plan.json."""

from __future__ import annotations

from typing import Any

import pytest
from megatron_check import Flags, args_file_words
from render_cases import DATA, fixed_result
from test_megatron_args import check_megatron

from app.render import RenderOptions, render
from launcher import spec


def rendered(
    model: Any,
    par: dict,
    nodes: int = 1,
    gpu: str = "H100-SXM",
    precision: str = "bf16",
    framework: str = "megatron",
    **options: Any,
) -> tuple[Flags, Any]:
    req = {
        "model": model,
        "cluster": {"num_nodes": nodes, "gpus_per_node": 8, "gpu": gpu, "hosts": [f"n{i}" for i in range(nodes)]},
        "training": {"global_batch_size": 512, "framework": framework, "precision": precision},
    }
    arts = render(fixed_result(req, par), 1, RenderOptions(**options))
    return Flags(args_file_words(arts.files["megatron_args.txt"])), arts


def test_no_dense_attention_mask_in_the_dataloader(golden_rendered) -> None:
    """Defect 2: 128K context would build a 16 GiB seq x seq mask per sample in every worker."""
    fl = Flags(args_file_words(golden_rendered["h100x32-llama3-8b-128k-megatron-cp"][2].files["megatron_args.txt"]))
    assert fl.has("--no-create-attention-mask-in-dataloader") and fl.int("--seq-length") == 131072
    with_data, _ = rendered("llama-2-7b", {"tp": 2, "dp": 4}, **DATA)
    assert with_data.has("--no-create-attention-mask-in-dataloader")


def test_fusions_only_where_they_apply() -> None:
    dense, _ = rendered("llama-2-7b", {"tp": 2, "dp": 4})
    assert dense.has("--cross-entropy-loss-fusion") and not dense.has("--moe-permute-fusion")
    assert not dense.has("--no-rope-fusion")
    moe, arts = rendered(
        "mixtral-8x7b", {"tp": 2, "dp": 32, "ep": 8, "distributed_optimizer": True, "sequence_parallel": True}, nodes=8
    )
    assert moe.has("--moe-permute-fusion")
    check_megatron(arts)
    mla, arts = rendered(
        {"preset": "deepseek-v3-like", "num_layers": 8, "num_experts": 64},
        {"tp": 2, "pp": 2, "dp": 16, "ep": 8, "etp": 1, "distributed_optimizer": True, "sequence_parallel": True},
        nodes=8,
    )
    assert mla.has("--no-rope-fusion") and mla.one("--rope-type") == "rope"
    check_megatron(arts)
    mds, _ = rendered("llama-2-7b", {"tp": 2, "dp": 4, "zero_stage": 1}, framework="megatron-deepspeed", **DATA)
    assert not mds.has("--cross-entropy-loss-fusion")  # Megatron-DeepSpeed has no such flag


def test_manual_gc_at_scale_only() -> None:
    small, _ = rendered("llama-2-7b", {"tp": 2, "dp": 4})
    assert not small.has("--manual-gc")
    big, _ = rendered("llama-2-7b", {"tp": 2, "dp": 32, "distributed_optimizer": True}, nodes=8)
    assert big.has("--manual-gc") and big.int("--manual-gc-interval") == 100


def test_data_cache_path_on_the_shared_checkpoint_storage() -> None:
    fl, _ = rendered("llama-2-7b", {"tp": 2, "dp": 4}, checkpoint_dir="/lustre/ckpt", **DATA)
    assert fl.one("--data-cache-path") == "/lustre/ckpt/data_cache"
    mock, _ = rendered("llama-2-7b", {"tp": 2, "dp": 4}, checkpoint_dir="/lustre/ckpt")
    assert not mock.has("--data-cache-path")
    given, _ = rendered("llama-2-7b", {"tp": 2, "dp": 4}, data_cache_path="/shared/cache", **DATA)
    assert given.one("--data-cache-path") == "/shared/cache"


@pytest.mark.parametrize(
    ("gpu", "par", "expected"),
    [
        ("H100-SXM", {"tp": 2, "dp": 4}, "1"),
        ("B200", {"tp": 2, "dp": 4}, None),  # Megatron asserts it only before Blackwell
        ("H100-SXM", {"tp": 1, "dp": 8}, None),
        ("H100-SXM", {"tp": 2, "dp": 4, "megatron_fsdp": "optim_grads_params"}, None),  # FSDP asserts != 1
    ],
)
def test_cuda_device_max_connections_only_where_megatron_requires_it(
    gpu: str, par: dict, expected: str | None, megatron_core: Any
) -> None:
    _fl, arts = rendered("llama-2-7b", par, gpu=gpu)
    env = {
        e.split("=")[0][7:]: e.split("=")[1].split()[0]
        for e in arts.files["train.sh"].splitlines()
        if e.startswith("export ")
    }
    assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") == expected
    check_megatron(arts)


def test_ep_overlap_gets_more_connections(megatron_core: Any) -> None:
    fl, arts = rendered(
        "mixtral-8x7b",
        {"tp": 1, "pp": 2, "vpp": 2, "dp": 32, "ep": 8, "moe_ep_overlap": True, "distributed_optimizer": True},
        nodes=8,
    )
    assert fl.has("--overlap-moe-expert-parallel-comm")
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=32" in arts.files["train.sh"]
    check_megatron(arts)


LLAMA_405B = {"preset": "llama-3-405b", "seq_length": 8192}
# Every new dimension of ParallelConfig, as an expert would set it; each checked by megatron-core + the rules.
DIMENSIONS = {
    "account-for-embedding-and-loss-vpp": (
        LLAMA_405B,
        {
            "tp": 8,
            "pp": 16,
            "vpp": 4,
            "dp": 1,
            "micro_batch_size": 1,
            "sequence_parallel": True,
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
            "distributed_optimizer": True,
        },
        16,
        {
            "--account-for-embedding-in-pipeline-split": (),
            "--account-for-loss-in-pipeline-split": (),
            "--num-virtual-stages-per-pipeline-rank": ("4",),
        },
    ),
    "layout-string": (
        {"preset": "llama-2-7b"},
        {"tp": 2, "pp": 4, "vpp": 2, "dp": 1, "pipeline_layout": "Et*3|t*4|t*4|t*4|t*4|t*4|t*4|t*5L"},
        1,
        {"--pipeline-model-parallel-layout": ("Et*3|t*4|t*4|t*4|t*4|t*4|t*4|t*5L",)},
    ),
    "mtp-in-the-layout": (  # DeepSeek-V3 on B200 (Megatron-Bridge): the MTP layer beside the loss, one layer there
        {"preset": "deepseek-v3-like", "mtp_num_layers": 1},
        {
            "tp": 1,
            "pp": 8,
            "vpp": 2,
            "dp": 8,
            "ep": 8,
            "etp": 1,
            "pipeline_layout": "Et*4|(t*4|)*14,tmL",
            "distributed_optimizer": True,
        },
        8,
        {"--mtp-num-layers": ("1",), "--pipeline-model-parallel-layout": ("Et*4|(t*4|)*14,tmL",)},
    ),
    "partial-block-recompute": (
        "llama-2-7b",
        {"tp": 2, "pp": 2, "dp": 2, "recompute": "full", "recompute_method": "block", "recompute_num_layers": 4},
        1,
        {"--recompute-method": ("block",), "--recompute-num-layers": ("4",)},
    ),
    "module-recompute": (
        "mixtral-8x7b",
        {
            "tp": 2,
            "dp": 32,
            "ep": 8,
            "recompute": "selective",
            "recompute_modules": ("core_attn", "mlp", "moe_act"),
            "distributed_optimizer": True,
            "sequence_parallel": True,
        },
        8,
        {"--recompute-modules": ("core_attn", "mlp", "moe_act")},
    ),
    "hierarchical-cp": (
        {"preset": "llama-3-8b-128k"},
        {
            "tp": 2,
            "cp": 16,
            "dp": 1,
            "cp_comm_type": "a2a+p2p",
            "hierarchical_cp_sizes": (4, 4),
            "distributed_optimizer": True,
            "sequence_parallel": True,
        },
        4,
        {"--cp-comm-type": ("a2a+p2p",), "--hierarchical-context-parallel-sizes": ("4", "4")},
    ),
    "bf16-grad-reduce": (
        "llama-2-7b",
        {"tp": 2, "dp": 4, "grad_reduce_dtype": "bf16", "distributed_optimizer": True},
        1,
        {"--grad-reduce-in-bf16": ()},
    ),
    "fp8-delayed-primary-weights": (
        "llama-2-7b",
        {"tp": 2, "dp": 4, "fp8_recipe": "delayed", "fp8_param_gather": True, "distributed_optimizer": True},
        1,
        {"--fp8-recipe": ("delayed",), "--fp8-param-gather": (), "--fp8-amax-history-len": ("1024",)},
    ),
    "fp8-blockwise": (
        "llama-2-7b",
        {"tp": 2, "dp": 4, "fp8_recipe": "blockwise", "distributed_optimizer": True},
        1,
        {"--fp8-recipe": ("blockwise",)},
    ),
    "tp-comm-overlap": (
        "llama-2-7b",
        {"tp": 4, "dp": 2, "sequence_parallel": True, "tp_comm_overlap": True, "distributed_optimizer": True},
        1,
        {"--tp-comm-overlap": ()},
    ),
    "activation-offload": (
        "llama-2-7b",
        {"tp": 1, "dp": 8, "cpu_offloading_num_layers": 8, "distributed_optimizer": True},
        1,
        {"--cpu-offloading-num-layers": ("8",)},
    ),
    "megatron-fsdp": (
        "llama-2-7b",
        {"tp": 1, "dp": 8, "megatron_fsdp": "optim_grads_params"},
        1,
        {
            "--use-megatron-fsdp": (),
            "--data-parallel-sharding-strategy": ("optim_grads_params",),
            "--ckpt-format": ("fsdp_dtensor",),
            "--overlap-param-gather": (),
            "--init-model-with-meta-device": (),
        },
    ),
}


def test_bf16_optimizer_states_are_rendered_and_accepted_by_megatron_core(megatron_core: Any) -> None:
    """NVIDIA's large recipes keep Adam's moments in bf16: the flags reach megatron_args.txt and megatron-core's
    OptimizerConfig accepts them with the distributed optimizer and refuses them without it."""
    from megatron_check import build_optimizer_config

    req = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 512, "optimizer_states": "bf16"},
    }
    arts = render(fixed_result(req, {"tp": 2, "dp": 4, "distributed_optimizer": True}), 1, RenderOptions())
    fl = Flags(args_file_words(arts.files["megatron_args.txt"]))
    assert fl.has("--use-precision-aware-optimizer") and fl.has("--use-distributed-optimizer")
    assert fl.one("--exp-avg-dtype") == "bf16" and fl.one("--exp-avg-sq-dtype") == "bf16"
    check_megatron(arts)
    del fl.items["--use-distributed-optimizer"]
    with pytest.raises(AssertionError, match="distributed optimizer"):
        build_optimizer_config(fl)
    plain, _ = rendered("llama-2-7b", {"tp": 2, "dp": 4, "distributed_optimizer": True})
    assert not plain.has("--use-precision-aware-optimizer") and not plain.has("--exp-avg-dtype")


@pytest.mark.parametrize("name", list(DIMENSIONS))
def test_every_new_dimension_is_rendered_and_accepted(name: str, megatron_core: Any) -> None:
    model, par, nodes, expected = DIMENSIONS[name]
    precision = "fp8" if "fp8_recipe" in par else "bf16"
    fl, arts = rendered(model, par, nodes=nodes, precision=precision)
    for flag, values in expected.items():
        assert fl.items.get(flag) == values, (flag, fl.items.get(flag))
    if "megatron_fsdp" in par:  # Megatron-FSDP runs on the distributed optimizer, which Megatron-LM never implies
        assert fl.has("--use-distributed-optimizer")
    check_megatron(arts)
    strategy = spec.loads(arts.files["plan.json"]).strategy
    assert strategy is not None
    for key, value in par.items():
        if hasattr(strategy, key):
            got = getattr(strategy, key)
            assert (tuple(got) if isinstance(got, tuple | list) else got) == value, key


def test_megatron_core_refuses_activation_offload_with_a_pipeline(megatron_core: Any) -> None:
    """The offload check above can fail: megatron-core's TransformerConfig refuses it with PP > 1."""
    from megatron_check import build_core_config

    fl, _ = rendered("llama-2-7b", DIMENSIONS["activation-offload"][1])
    assert not fl.has("--recompute-granularity")
    fl.items["--pipeline-model-parallel-size"] = ("2",)
    with pytest.raises(ValueError, match="Pipeline parallelism with CPU offloading"):
        build_core_config(fl)


def test_megatron_core_refuses_a_broken_layout(megatron_core: Any) -> None:
    """The check above can fail: a layout that does not cover the layers is refused by megatron-core."""
    from megatron_check import build_core_config

    fl, _ = rendered({"preset": "llama-2-7b"}, DIMENSIONS["layout-string"][1])
    fl.items["--pipeline-model-parallel-layout"] = ("Et*3|t*4|t*4|t*4|t*4|t*4|t*4|t*4L",)
    with pytest.raises((ValueError, AssertionError)):
        build_core_config(fl)


def test_megatron_core_refuses_a_layout_without_the_mtp_layer(megatron_core: Any) -> None:
    """The MTP check above can fail: megatron-core wants as many `m` in the layout as --mtp-num-layers."""
    from megatron_check import build_core_config

    model, par, nodes, _ = DIMENSIONS["mtp-in-the-layout"]
    fl, _ = rendered(model, par, nodes=nodes)
    fl.items["--pipeline-model-parallel-layout"] = ("Et*4|(t*4|)*14,ttL",)
    fl.items["--num-layers"] = ("62",)
    with pytest.raises((ValueError, AssertionError), match="mtp"):
        build_core_config(fl)


def test_what_megatron_deepspeed_cannot_run_is_refused() -> None:
    for par, match in (
        (
            {"tp": 2, "pp": 2, "dp": 2, "zero_stage": 1, "partition_method": "uniform"},
            "always partitions by type:transformer",
        ),
        ({"tp": 2, "pp": 2, "dp": 2, "zero_stage": 1, "first_stage_layers": 12}, "first_stage_layers"),
    ):
        with pytest.raises(ValueError, match=match):
            rendered("llama-2-7b", par, framework="megatron-deepspeed", **DATA)


def test_megatron_builds_exactly_the_named_vocabulary(all_rendered) -> None:
    """Megatron-LM pads the tokenizer's vocabulary to a multiple of make_vocab_size_divisible_by x TP
    (tokenizer.py `_vocab_size_with_padding`), and NullTokenizer adds an end-of-document token to --vocab-size
    (`_NullTokenizer.vocab_size`); the rendered flags give exactly the model's rows (the optional Megatron-LM test
    runs Megatron's own build_tokenizer for the same check)."""
    checked = 0
    for label, result, _rank, arts in all_rendered:
        if result.training.framework != "megatron":
            continue
        fl = Flags(args_file_words(arts.files["megatron_args.txt"]))
        multiple = fl.int("--make-vocab-size-divisible-by") * fl.int("--tensor-model-parallel-size")
        tokens = fl.int("--vocab-size") + 1  # NullTokenizer's EOD
        assert -(-tokens // multiple) * multiple == result.model.vocab_size, label
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize(("gpu", "backend"), [("H100-SXM", "deepep"), ("GB200", "hybridep")])
def test_flex_dispatcher_and_its_backend(gpu: str, backend: str, megatron_core: Any) -> None:
    """DeepEP over InfiniBand; HybridEP where the NVLink domain spans trays (only HybridEP runs multi-node NVLink)."""
    fl, arts = rendered(
        "mixtral-8x7b",
        {"dp": 64, "ep": 8, "distributed_optimizer": True, "moe_token_dispatcher": "flex"},
        nodes=8,
        gpu=gpu,
    )
    assert fl.one("--moe-token-dispatcher-type") == "flex"
    assert fl.one("--moe-flex-dispatcher-backend") == backend
    check_megatron(arts)
    assert spec.loads(arts.files["plan.json"]).strategy.moe_token_dispatcher == "flex"
    plain, _ = rendered("mixtral-8x7b", {"dp": 64, "ep": 8, "distributed_optimizer": True}, nodes=8)
    assert plain.one("--moe-token-dispatcher-type") == "alltoall" and not plain.has("--moe-flex-dispatcher-backend")


@pytest.mark.parametrize(("gpu", "skip"), [("H100-PCIe", True), ("A100-80GB", True), ("H100-SXM", False)])
def test_tp_comm_overlap_without_multicast_runs_userbuffers_over_ipc(gpu: str, skip: bool) -> None:
    """Transformer Engine's initialize_ub stops where the GPUs have no CUDA multicast (no Hopper NVSwitch) unless
    UB_SKIPMC=1; a pinned overlap on H100-PCIe was rendered without it (QA, 2026-12-06)."""
    par = {"tp": 2, "dp": 4, "sequence_parallel": True, "tp_comm_overlap": True, "distributed_optimizer": True}
    fl, arts = rendered("llama-2-7b", par, gpu=gpu)
    assert fl.has("--tp-comm-overlap")
    for name in ("train.sh", "torchrun.sh", "sbatch.sh"):
        assert ("export UB_SKIPMC=1" in arts.files[name]) is skip, name
    assert (spec.loads(arts.files["plan.json"]).env.get("UB_SKIPMC") == "1") is skip


def test_a_gb200_cluster_renders_its_four_gpu_trays() -> None:
    """`{"gpu": "GB200"}` without a node size: every launch file runs 4 workers a node on 16 trays (it said 8 on 16
    nodes, 128 GPUs the plan did not have)."""
    req = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 16, "gpu": "GB200", "hosts": [f"n{i}" for i in range(16)]},
        "training": {"global_batch_size": 512},
    }
    arts = render(fixed_result(req, {"tp": 2, "dp": 32}), 1, RenderOptions())
    assert "#SBATCH --gpus-per-node=4" in arts.files["sbatch.sh"] and "NPROC_PER_NODE=4" in arts.files["torchrun.sh"]
    assert 'nprocPerNode: "4"' in arts.files["pytorchjob.yaml"]
    # the NVLink domain the plan counts only holds with the trays of a segment in one rack (Slurm block topology),
    # as NVIDIA's benchmarks ask for it; the PyTorchJob claims an IMEX channel (test_pytorchjob.py) and says what
    # it needs installed
    assert "#SBATCH --segment=16" in arts.files["sbatch.sh"]
    assert any("IMEX channel" in n for n in arts.notes), arts.notes
    h100 = {**req, "cluster": {"num_nodes": 2, "gpu": "H100-SXM"}}
    plain = render(fixed_result(h100, {"tp": 2, "dp": 8}), 1, RenderOptions())
    assert "--segment" not in plain.files["sbatch.sh"] and not any("IMEX" in n for n in plain.notes)


def test_a_pod_that_cannot_have_what_its_offload_and_ranks_want_says_so() -> None:
    """The pod's memory is capped at 90% of the node while the plan lets offloaded states alone reach that: 769 GiB
    of states on a 894 GiB GB200 tray left the four ranks and /dev/shm 35 GiB, unsaid (QA 2026-12-07)."""
    req = {
        "model": {"preset": "llama-3-70b", "num_layers": 94},
        "cluster": {"num_nodes": 2, "gpu": "GB200", "hosts": ["a", "b"]},
        "training": {"global_batch_size": 64, "framework": "deepspeed"},
    }
    par = {"dp": 8, "zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu", "micro_batch_size": 1,
           "recompute": "full"}  # fmt: skip
    arts = render(fixed_result(req, par), 1, RenderOptions())
    note = next(n for n in arts.notes if "the pod gets" in n)
    assert "for each of the 4 ranks' processes" in note and "the pod gets 804 GiB" in note, note
    eight = {**req, "cluster": {**req["cluster"], "gpus_per_node": 8}}
    assert any("> the 4 GPUs a GB200 node" in n for n in plan_notes(eight)), "a tray holds 4"


def plan_notes(request: dict) -> list[str]:
    from app.planner import PlanRequest, plan

    body = {**request, "training": {**request["training"], "max_plans": 1, "search_time_limit_s": 5}}
    return list(plan(PlanRequest(**body)).notes)


def test_a_top1_softmax_router_renders_pre_softmax_and_megatron_core_accepts_it(megatron_core: Any) -> None:
    """A top-1 MoE with a softmax router normalised after the top-k (Mixtral's, or an imported config with
    num_experts_per_tok 1) was rendered without --moe-router-pre-softmax, which megatron-core refuses at start-up
    ("Please use --moe-router-pre-softmax when topk is 1", transformer_config.py L1633-1641; QA 2026-12-07). It is
    rendered, with a note saying how the routing weight changes, and megatron-core's config classes accept it."""
    from megatron_check import build_core_config

    model = {"preset": "mixtral-8x7b", "moe_router_topk": 1}
    fl, arts = rendered(model, {"tp": 1, "dp": 8, "ep": 8})
    assert fl.int("--moe-router-topk") == 1 and fl.has("--moe-router-pre-softmax")
    assert any("moe_router_topk 1" in note for note in arts.notes)
    check_megatron(arts)
    del fl.items["--moe-router-pre-softmax"]
    with pytest.raises(ValueError, match="pre-softmax when topk is 1"):
        build_core_config(fl)
    top2, arts2 = rendered("mixtral-8x7b", {"tp": 1, "dp": 8, "ep": 8})
    assert not top2.has("--moe-router-pre-softmax") and not any("moe_router_topk 1" in n for n in arts2.notes)
