"""Hugging Face sparse MoE models (Mixtral, Qwen3-MoE) under DeepSpeed ZeRO and FSDP: every expert on each GPU, the
experts run one after another in eager PyTorch, each behind a host sync. The kept tensors are checked against what
autograd really saves in transformers' own blocks; the time and state terms by hand."""

from __future__ import annotations

import pytest

from app.planner import PlanRequest, plan, stack, uncertainty
from app.planner import activations as act
from app.planner.compute import HF_EXPERT_OPS, layer_time, sparse_block_waits
from app.planner.layout import StageShape
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from app.planner.states import stage_params, stage_states

H, F, E, K, S = 256, 512, 8, 2, 256  # a small shape, run for real on the CPU below


def spec(**extra: object) -> ModelSpec:
    return ModelSpec(
        num_layers=2,
        hidden_size=H,
        ffn_hidden_size=F,
        num_attention_heads=4,
        num_query_groups=2,
        vocab_size=1000,
        seq_length=S,
        swiglu=True,
        normalization="RMSNorm",
        position_embedding_type="rope",
        untie_embeddings_and_output_weights=True,
        **extra,
    )


def deepspeed(stack: str | None = None) -> TrainingSpec:
    return TrainingSpec(global_batch_size=8, framework="deepspeed", stack=stack)


TRANSFORMERS_4 = "deepspeed-hf-transformers4"  # the experts' Python loop (transformers 4.x)


def planned_block(stack: str | None) -> float:
    """The planner's MoE layer less the dense one of the same width (the attention and norms cancel)."""
    par, training = ParallelConfig(micro_batch_size=1), deepspeed(stack)
    moe = spec(num_experts=E, moe_router_topk=K, moe_ffn_hidden_size=F)
    return act.layer_bytes(moe, par, training, moe=True) - act.layer_bytes(spec(), par, training, moe=False)


def _saved_per_layer(cls: type, config: object) -> int:
    """Bytes autograd saves for backward per decoder layer (two layers less one), parameters excluded."""
    import torch

    totals = []
    for layers in (1, 2):
        config.num_hidden_layers = layers  # type: ignore[attr-defined]
        torch.manual_seed(0)
        model = cls(config).to(torch.bfloat16).train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        saved: dict[int, int] = {}

        def pack(t: torch.Tensor, saved: dict[int, int] = saved, params: set[int] = params) -> torch.Tensor:
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                saved[storage.data_ptr()] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(input_ids=torch.randint(0, 1000, (1, S)))
        totals.append(sum(saved.values()))
    return totals[1] - totals[0]


def test_a_sparse_moe_block_keeps_what_autograd_saves_in_transformers() -> None:
    """Mixtral's and Qwen3-MoE's blocks against a dense SwiGLU MLP of the same width (the attention, norms and
    residuals are the same in both), run by the installed transformers (4.x: the experts' loop; 5.x: grouped_mm, its
    default): the planner's difference is autograd's to the byte (the routing draws which expert gets which token,
    but not how many pairs there are). Qwen3's q_norm / k_norm likewise."""
    transformers = pytest.importorskip("transformers")
    common = dict(
        hidden_size=H,
        intermediate_size=F,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        attn_implementation="sdpa",
        max_position_embeddings=4096,
    )
    llama = _saved_per_layer(transformers.LlamaForCausalLM, transformers.LlamaConfig(**common))
    mixtral = _saved_per_layer(
        transformers.MixtralForCausalLM,
        transformers.MixtralConfig(**common, num_local_experts=E, num_experts_per_tok=K),
    )
    qwen3 = _saved_per_layer(transformers.Qwen3ForCausalLM, transformers.Qwen3Config(**common, head_dim=64))
    qwen3_moe = _saved_per_layer(
        transformers.Qwen3MoeForCausalLM,
        transformers.Qwen3MoeConfig(
            **common, head_dim=64, num_experts=E, num_experts_per_tok=K, moe_intermediate_size=F, norm_topk_prob=True
        ),
    )
    grouped = int(transformers.__version__.split(".")[0]) >= 5
    planned = planned_block(None if grouped else TRANSFORMERS_4)
    assert planned == mixtral - llama
    # Qwen3-MoE casts the routing weights to bf16 before grouped_mm's weighting: 2 B less per pair there
    assert qwen3_moe - qwen3 == planned - (2 * S * K if grouped else 0)
    qk = spec(qk_layernorm=True)
    par, training = ParallelConfig(micro_batch_size=1), deepspeed()
    planned_qk = act.layer_bytes(qk, par, training, moe=False) - act.layer_bytes(spec(), par, training, moe=False)
    assert planned_qk == qwen3 - llama


def test_both_expert_implementations_match_what_transformers_measured() -> None:
    """The same probe as above, run with each transformers on this VM (2026-12-06, CPU, torch 2.13): 4.57.6's loop
    saved 1,859,584 B more than the dense layer; 5.25.0's grouped_mm 1,602,592 B (its eager loop 1,860,608)."""
    assert planned_block(TRANSFORMERS_4) == 1_859_584
    assert planned_block(None) == 1_602_592


def test_each_expert_waits_for_the_host() -> None:
    """Hand-worked: 128 experts, 45 us per launch, 10 launches per expert (450 us) against 50 us of kernels each:
    129 segments each start with one exposed launch (5.8 ms) and each expert leaves the GPU idle 400 us (51.2 ms)."""
    model = spec(num_experts=128, moe_router_topk=8, moe_ffn_hidden_size=F)
    costs = stack.get(TRANSFORMERS_4).generation("hopper").model_copy(update={"host_op_s": 45e-6})
    assert HF_EXPERT_OPS == 10
    assert sparse_block_waits(model, costs, 128 * 50e-6) == pytest.approx(129 * 45e-6 + 128 * 400e-6)
    # kernels longer than the launches: only the segments' first launches are exposed
    assert sparse_block_waits(model, costs, 128 * 1e-3) == pytest.approx(129 * 45e-6)


def test_the_waits_are_in_the_forward_and_in_what_full_recompute_repeats() -> None:
    """The syncs are in forward only (backward's splits are known): the layer's forward carries them; the backward
    is the same as without them; a recomputed forward pays them again."""
    model = spec(num_experts=64, moe_router_topk=8, moe_ffn_hidden_size=F)
    gpu = ClusterSpec(num_nodes=1, gpus_per_node=8, gpu="H100-SXM").gpu
    loop = deepspeed(TRANSFORMERS_4)
    costs = loop.software.generation("hopper")
    plain = layer_time(model, ParallelConfig(micro_batch_size=1), loop, gpu, costs, moe=True)
    full = layer_time(model, ParallelConfig(micro_batch_size=1, recompute="full"), loop, gpu, costs, moe=True)
    waits = 65 * costs.host_op_s  # at least every segment's first launch
    assert plain.fwd > waits and plain.mlp_fwd > waits
    assert plain.bwd < plain.fwd * 3  # the waits did not reach the backward (2x the forward's kernels)
    assert full.recompute == pytest.approx(full.fwd)
    # transformers 5's grouped_mm: no sync, two grouped GEMMs whose fixed kernel cost is paid once each
    grouped = layer_time(model, ParallelConfig(micro_batch_size=1), deepspeed(), gpu, costs, moe=True)
    assert grouped.fwd < plain.fwd - waits and grouped.bwd < plain.bwd


def test_zero3_gathers_the_whole_sparse_block_at_once() -> None:
    """DeepSpeed treats transformers' sparse MoE blocks as ZeRO-3 leaf modules (zero_optimization.leaf_module's
    defaults): all experts of a layer are gathered together, so the live parameters hold the whole block."""
    model = spec(num_experts=E, moe_router_topk=K, moe_ffn_hidden_size=F)
    par = ParallelConfig(dp=8, zero_stage=3, micro_batch_size=1)
    shape = StageShape((2,), True, True)
    sp = stage_params(model, par, shape, 0, 2)
    assert sp.largest_module >= E * 3 * H * F
    dense = stage_states(spec(), deepspeed(), par, shape, 2, 0)
    sparse = stage_states(model, deepspeed(), par, shape, 0, 2)
    assert sparse.buffers - dense.buffers >= 2 * 2.0 * (E - 1) * 3 * H * F  # gathered block + its full gradient


def test_deepspeed_and_fsdp_plan_a_mixtral_and_torchtitan_still_refuses_it() -> None:
    for training in ({"framework": "deepspeed"}, {"framework": "pytorch-fsdp", "stack": "hf-fsdp"}):
        result = plan(
            PlanRequest(
                model="mixtral-8x7b",
                cluster={"num_nodes": 8, "gpu": "H100-SXM"},
                training={"global_batch_size": 256, **training},
            )
        )
        assert result.plans, result.suggestions
        assert all(p.parallel.ep == 1 and p.parallel.tp == 1 for p in result.plans)  # every expert on each GPU
        assert any("training.stack deepspeed-hf-transformers4" in n for n in result.notes)  # the other transformers
    refused = plan(
        PlanRequest(
            model="mixtral-8x7b",
            cluster={"num_nodes": 8, "gpu": "H100-SXM"},
            training={"global_batch_size": 256, "framework": "pytorch-fsdp", "stack": "torchtitan"},
        )
    )
    assert not refused.plans
    message = refused.rejected[0].message
    assert (
        "planned with training.stack megatron-core, deepspeed-hf, deepspeed-hf-transformers4, hf-fsdp, not" in message
    )


def test_many_small_experts_make_the_transformers_4_loop_host_bound() -> None:
    """Qwen3-30B-A3B (128 experts of 768) under DeepSpeed: transformers 4's loop makes the GPU wait for the host in
    every expert, several times slower than megatron-core's grouped GEMMs on the same GPUs; transformers 5's
    grouped_mm has no per-expert launches and is much closer."""
    cluster = {"num_nodes": 2, "gpu": "H100-SXM"}

    def step(**training: object) -> float:
        result = plan(
            PlanRequest(model="qwen3-30b-a3b", cluster=cluster, training={"global_batch_size": 128, **training})
        )
        assert result.plans, result.suggestions
        return result.plans[0].estimate.time.step_s

    megatron = step()
    loop = step(framework="deepspeed", stack=TRANSFORMERS_4)
    grouped = step(framework="deepspeed")
    assert loop > 4 * megatron and loop > 3 * grouped > 3 * megatron


def test_the_transformers_4_stack_takes_the_measured_runs_of_the_same_dense_code_path() -> None:
    """Dense models run the same code under both transformers stacks: the H200 runs' spread, named as theirs; an MoE
    is outside what those runs cover, so its interval is the widest and says why."""
    dense = uncertainty.spread(TRANSFORMERS_4, "hopper", "time", TRANSFORMERS_4, spec())
    assert dense == uncertainty.spread("deepspeed-hf", "hopper", "time", "deepspeed-hf (the same code path)", spec())
    assert dense.runs == 9 and "deepspeed-hf (the same code path)" in dense.basis
    moe = uncertainty.spread(
        TRANSFORMERS_4, "hopper", "time", TRANSFORMERS_4, spec(num_experts=E, moe_ffn_hidden_size=F)
    )
    assert moe.runs == 0 and "no MoE runs" in moe.basis
