"""Activation offload to the host (megatron-core `--cpu-offloading-num-layers`, Transformer Engine's offload
handler): what stays on the GPU, what the copies cost, the rules megatron-core enforces, and the search choosing it
where recomputation would otherwise be needed."""

from __future__ import annotations

import pytest

from app.planner import PlanRequest, plan, rules
from app.planner.activations import layer_bytes
from app.planner.estimate import evaluate, time_estimate
from app.planner.layout import stage_layer_kinds, stage_shapes
from app.planner.memory import stage_parts
from app.planner.specs import ClusterSpec, ParallelConfig, TrainingSpec
from tests.planner.conftest import preset

MODEL = preset("llama-3-8b")  # 32 layers
NODE = ClusterSpec(num_nodes=1, gpu="H100-SXM")
TRAINING = TrainingSpec(global_batch_size=64)
BASE = ParallelConfig(dp=8, distributed_optimizer=True, micro_batch_size=2)


def activations(par: ParallelConfig) -> float:
    shape, kinds = stage_shapes(MODEL, TRAINING, par)[0], stage_layer_kinds(MODEL, TRAINING, par)[0]
    return stage_parts(MODEL, NODE, TRAINING, par, shape, *kinds, 0).activations


@pytest.mark.parametrize("offloaded", [8, 16, 31])
def test_offloaded_layers_leave_the_gpu_but_one_in_transit(offloaded: int) -> None:
    """The kept layers' tensors stay; of the offloaded ones only the layer whose copy is still running does."""
    per_layer = layer_bytes(MODEL, BASE, TRAINING, moe=False)
    full, part = activations(BASE), activations(BASE.model_copy(update={"cpu_offloading_num_layers": offloaded}))
    assert full - part == pytest.approx((offloaded - 1) * per_layer, rel=1e-9)


def test_copies_hide_behind_the_compute_unless_the_host_link_is_slower() -> None:
    """A link like Grace's NVLink-C2C hides the copies; H100's PCIe (16 layers of 8K x 2 tokens, ~30 GB each way
    per micro-batch) does not quite; a slow link exposes all but the compute it runs beside."""
    par = BASE.model_copy(update={"cpu_offloading_num_layers": 16})
    fast = NODE.model_copy(update={"host_to_device_GBps": 450.0})
    hidden = time_estimate(MODEL, fast, TRAINING, par)
    assert hidden.breakdown["offload_s"] == 0.0
    assert hidden.step_s == pytest.approx(time_estimate(MODEL, fast, TRAINING, BASE).step_s)
    assert time_estimate(MODEL, NODE, TRAINING, par).breakdown["offload_s"] > 0
    slow = NODE.model_copy(update={"host_to_device_GBps": 0.5})
    t = time_estimate(MODEL, slow, TRAINING, par)
    # 16 layers' tensors over 0.5 GB/s, once each way, less the forward (down) and the backward (up) they run beside
    transfer = 16 * layer_bytes(MODEL, par, TRAINING, moe=False) / 0.5e9
    assert transfer > 10 * hidden.breakdown["compute_s"]  # the copies dominate: the exposed part is checkable
    per_mb = t.breakdown["offload_s"] / (64 // 8 // 2)
    assert transfer * 2 - per_mb == pytest.approx(hidden.breakdown["compute_s"] / 4, rel=0.05)


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"cpu_offloading_num_layers": 32}, "must be < num_layers"),
        ({"cpu_offloading_num_layers": 8, "pp": 2, "dp": 4}, "needs pp 1"),
        ({"cpu_offloading_num_layers": 8, "recompute": "full"}, "does not run with recompute"),
    ],
)
def test_megatron_core_rules_for_offload(update: dict[str, object], message: str) -> None:
    bad = rules.check(MODEL, NODE, TRAINING, BASE.model_copy(update=update), 8)
    assert any(v.code == "activation_offload" and message in v.message for v in bad), bad


def test_offload_does_not_run_beside_ep_overlap() -> None:
    """The EP-overlap schedule runs each layer's parts itself and never enters TransformerBlock.forward's offload
    context (model_chunk_schedule_plan.py, fine_grained_callables.py): the pair offloads nothing. Mixtral 8x7B on
    64 H100 ranked it #1 at 73.3 GiB; the same layout without the offload needs 88.5 (QA, 2026-12-06)."""
    moe, training = preset("mixtral-8x7b"), TrainingSpec(global_batch_size=256)
    cluster = ClusterSpec(num_nodes=8, gpu="H100-SXM")
    par = ParallelConfig(dp=64, ep=8, distributed_optimizer=True, micro_batch_size=2, moe_ep_overlap=True)
    bad = rules.check(moe, cluster, training, par.model_copy(update={"cpu_offloading_num_layers": 8}), 64)
    assert [v.code for v in bad] == ["activation_offload"] and "moe_ep_overlap" in bad[0].message
    result = plan(PlanRequest(model="mixtral-8x7b", cluster={"num_nodes": 8, "gpu": "H100-SXM"},
                              training={"global_batch_size": 256}))  # fmt: skip
    assert result.plans
    assert not any(p.parallel.cpu_offloading_num_layers and p.parallel.moe_ep_overlap for p in result.plans)


def test_the_search_offloads_where_it_beats_recomputation() -> None:
    """Llama-3 70B at 8K on 64 GB200 as NVIDIA's Megatron-FSDP recipe: TP1 PP1, micro-batch 2, no recomputation
    does not fit (about 280 GiB of activations); offloading 40 of 80 layers to the Grace memory does, and is
    faster than recomputing; the search generates such plans."""
    model = preset("llama-3-70b").model_copy(update={"seq_length": 8192})
    cluster = ClusterSpec(num_nodes=16, gpus_per_node=4, gpu="GB200")
    training = TrainingSpec(global_batch_size=256, precision="fp8", fp8_recipe="tensorwise", grad_reduce_dtype="bf16")
    par = ParallelConfig(
        dp=64, distributed_optimizer=True, megatron_fsdp="optim_grads_params", micro_batch_size=2,
        fp8_param_gather=True, fp8_recipe="tensorwise", grad_reduce_dtype="bf16",
    )  # fmt: skip
    assert not evaluate(model, cluster, training, par).feasible
    offloaded = par.model_copy(update={"cpu_offloading_num_layers": 40})
    assert evaluate(model, cluster, training, offloaded).feasible
    pins = {"tp": 1, "pp": 1, "cp": 1, "micro_batch_size": 2, "megatron_fsdp": "optim_grads_params"}
    result = plan(PlanRequest(model=model, cluster=cluster, training={**training.model_dump(), "pinned": pins}))
    best = result.plans[0]
    assert best.parallel.cpu_offloading_num_layers and best.parallel.recompute == "none"
    assert any("go to host memory instead of being recomputed" in line for line in best.why)
    recomputed = [p for p in result.plans if p.parallel.recompute == "full"]
    assert all(best.estimate.time.step_s < p.estimate.time.step_s for p in recomputed)
    # over H100's PCIe the same search offers only a few layers (their copies take longer than the forward)
    pcie = plan(
        PlanRequest(
            model=model,
            cluster={"num_nodes": 8, "gpu": "H100-SXM"},
            training={"global_batch_size": 256, "pinned": pins},
        )
    )
    assert {p.parallel.cpu_offloading_num_layers for p in pcie.plans} <= {None, 5, 10, 20}


def test_offloaded_activations_are_counted_in_host_memory() -> None:
    """Transformer Engine's offload handler copies each offloaded layer's saved tensors into pinned host memory
    (cpu_offload.py), one micro-batch in flight (PP 1): every GPU of a node puts its offloaded layers there. It was
    never counted (0 bytes), so 8 offloaded 8B layers at 128K were planned on a 64 GiB host (QA, 2026-12-07)."""
    model = preset("llama-3-8b", seq_length=131072)
    par = ParallelConfig(cp=8, dp=4, distributed_optimizer=True, cpu_offloading_num_layers=8)
    cluster = ClusterSpec(num_nodes=4, gpu="H100-SXM", cpu_memory_GiB=64)
    training = TrainingSpec(global_batch_size=32)
    per_layer = layer_bytes(model, par, training, moe=False)
    est = evaluate(model, cluster, training, par)
    none = evaluate(model, cluster, training, par.model_copy(update={"cpu_offloading_num_layers": None}))
    moved = est.memory.cpu_bytes_per_node - none.memory.cpu_bytes_per_node
    assert moved == pytest.approx(8 * 8 * per_layer, rel=1e-6)
    assert any("host memory per node" in r for r in est.reasons), est.reasons


def test_the_search_keeps_offloaded_activations_within_the_host() -> None:
    """The search's own memory check counts the host bytes too: on a 64 GiB host no ranked plan offloads more than
    fits there."""
    result = plan(
        PlanRequest.model_validate(
            {
                "model": {"preset": "llama-3-8b", "seq_length": 131072},
                "cluster": {"num_nodes": 4, "gpu": "H100-SXM", "cpu_memory_GiB": 64},
                "training": {"global_batch_size": 32},
            }
        )
    )
    assert result.plans
    for p in result.plans:
        mem = p.estimate.memory
        assert mem.cpu_bytes_per_node <= 0.9 * mem.cpu_capacity_bytes_per_node, (p.parallel, mem.cpu_bytes_per_node)
