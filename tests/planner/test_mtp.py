"""Multi-token prediction (DeepSeek-V3's MTP, Megatron's --mtp-num-layers): each MTP layer is one more layer of
the decoder's last kind with two norms, a 2h x h projection and its own logits, on one stage (the last without a
layout string; where the layout's `m` is otherwise); the parameters, FLOPs, memory and time of that stage carry
it, and the rules are megatron-core's."""

from __future__ import annotations

import pytest

from app.planner import PlanRequest, plan, space, splits
from app.planner import params as pc
from app.planner.compute import model_flops_per_token
from app.planner.estimate import evaluate
from app.planner.layout import stage_layer_kinds, stage_shapes
from app.planner.specs import ModelSpec, ParallelConfig

LAYOUT = "Et*4|(t*4|)*14,tmL"  # Megatron-Bridge's DeepSeek-V3 on 256 B200 (PP8 x VP2)


def request(mtp: int, nodes: int = 32, **training: object) -> PlanRequest:
    model = {"preset": "deepseek-v3-like", "mtp_num_layers": mtp}
    return PlanRequest(model=model, cluster={"num_nodes": nodes, "gpu": "B200"},
                       training={"global_batch_size": 4096, "precision": "fp8", **training})  # fmt: skip


def test_parameters_by_hand() -> None:
    """One MTP layer of DeepSeek-V3: a MoE layer (its last layer is MoE) + enorm, hnorm, final norm (RMSNorm:
    7168 each) + eh_proj 2 x 7168 x 7168 = 102,760,448; the embedding and output layer are shared."""
    with_mtp, without = request(1).model, request(0).model
    extra = with_mtp.num_parameters - without.num_parameters
    assert extra == pc.moe_layer_params(without) + 3 * 7168 + 2 * 7168 * 7168
    assert 11.0e9 < extra < 12.5e9  # the report's 14B MTP module holds its own embedding and head copies besides


def test_the_preset_counts_the_mtp_module() -> None:
    """Hugging Face's DeepSeek-V3 is 685B: 671B of the main model and 14B of MTP, whose module stores its own copy
    of the embedding and of the output head (V x h each); Megatron shares those, so the planner's count is 685B
    less two V x h matrices (to the report's rounding)."""
    cluster = {"num_nodes": 1, "gpu": "H100-SXM"}
    m = PlanRequest(model="deepseek-v3-like", cluster=cluster, training={"global_batch_size": 8}).model
    assert m.mtp_num_layers == 1
    assert m.num_parameters == pytest.approx(685e9 - 2 * m.vocab_size * m.hidden_size, rel=0.002)


def test_flops_as_megatron_counts_them() -> None:
    """Megatron-LM's num_floating_point_operations: one more MoE layer, 3h + 2h^2 of norms and eh_proj and one more
    logits GEMM per MTP layer, each x 6 (forward and backward, multiply-add)."""
    m0, m1 = request(0).model, request(1).model
    h, v = m0.hidden_size, m0.vocab_size
    moe = m0.model_copy(update={"moe_first_dense_layers": 0})  # every layer MoE: one layer's FLOPs by division
    moe_layer = (model_flops_per_token(moe) - 6.0 * h * v) / moe.num_layers
    assert moe_layer > 6.0 * h * (8 + 1) * 2048 * 3  # top-8 + the shared expert, SwiGLU, besides attention
    assert model_flops_per_token(m1) - model_flops_per_token(m0) == pytest.approx(
        moe_layer + 6.0 * (3 * h + 2 * h * h) + 6.0 * h * v, rel=1e-12
    )


def test_without_a_layout_the_mtp_layer_is_on_the_last_stage() -> None:
    r = request(1)
    par = ParallelConfig(tp=1, pp=8, vpp=1, dp=32, ep=32, etp=1, first_stage_layers=7, last_stage_layers=6,
                         distributed_optimizer=True)  # fmt: skip
    shapes = stage_shapes(r.model, r.training, par)
    assert [s.mtp for s in shapes] == [0] * 7 + [1]
    kinds = stage_layer_kinds(r.model, r.training, par)
    assert kinds[-1] == (0, 7)  # six decoder layers and the MTP layer, all MoE
    assert kinds[0] == (3, 4)


def test_the_stage_with_the_mtp_layer_holds_its_memory_and_time() -> None:
    """Against the same model without MTP, only the last stage changes: by one MoE layer's shard, the norms and
    eh_proj and (as the first stage is elsewhere) a copy of the word embedding split by TP; its step is longer."""
    par = ParallelConfig(tp=1, pp=8, vpp=2, dp=32, ep=32, etp=1, pipeline_layout=LAYOUT, distributed_optimizer=True)
    plain = par.model_copy(update={"pipeline_layout": LAYOUT.replace("tmL", "tL")})
    r1, r0 = request(1), request(0)
    a = evaluate(r1.model, r1.cluster, r1.training, par)
    b = evaluate(r0.model, r0.cluster, r0.training, plain)
    assert [s.params for s in a.memory.stages[:-1]] == [s.params for s in b.memory.stages[:-1]]
    shard = pc.layer_shard(r0.model, 1, 32, 1, moe=True).total
    embedding_copy = r0.model.vocab_size * r0.model.hidden_size
    assert a.memory.stages[-1].params - b.memory.stages[-1].params == shard + pc.mtp_shard(r0.model, 1) + embedding_copy
    assert a.memory.stages[-1].activations_bytes > b.memory.stages[-1].activations_bytes
    assert a.time.step_s > b.time.step_s


def test_generated_layouts_carry_the_mtp_layer() -> None:
    """Megatron wants every MTP layer in a layout string; the search writes it beside the loss, and lightens the
    last virtual stage for it as NVIDIA does."""
    r = request(1)
    layouts = [s.layout for s in splits.split_options(r.model, r.training, 8, 2) if s.layout]
    assert layouts and all(x.endswith("mL") and x.count("m") == 1 for x in layouts)
    assert "Et*4|(t*4|)*14tmL" in layouts  # NVIDIA's, commas aside


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("Et*4|(t*4|)*14,tL", "has 0 MTP layers"),
        ("Et*4|(t*4|)*6,t*3m|(t*4|)*7,t*2L", "before the MTP"),
        ("Et*8|(t*8|)*6,t*5m|(|)*7L", "last one of its pipeline rank"),  # rank 7's first chunk
    ],
)
def test_megatron_core_layout_rules(layout: str, message: str) -> None:
    r = request(1)
    par = ParallelConfig(tp=1, pp=8, vpp=2, dp=32, ep=32, etp=1, pipeline_layout=layout, distributed_optimizer=True)
    ev = evaluate(r.model, r.cluster, r.training, par)
    assert not ev.feasible
    assert any(message in reason for reason in ev.reasons), ev.reasons


def test_stacks_and_positions_without_mtp_are_refused() -> None:
    dense = ModelSpec(name="gpt-mtp", num_layers=8, hidden_size=1024, num_attention_heads=8, vocab_size=32000,
                      seq_length=2048, mtp_num_layers=1, position_embedding_type="learned_absolute")  # fmt: skip
    r = PlanRequest(model=dense, cluster={"num_nodes": 1, "gpu": "H100-SXM"}, training={"global_batch_size": 64})
    ev = evaluate(r.model, r.cluster, r.training, ParallelConfig(tp=1, pp=1, dp=8, distributed_optimizer=True))
    assert any("rope or no position embedding" in reason for reason in ev.reasons)
    rope = dense.model_copy(update={"position_embedding_type": "rope"})
    ds = PlanRequest(model=rope, cluster={"num_nodes": 1, "gpu": "H100-SXM"},
                     training={"global_batch_size": 64, "framework": "megatron-deepspeed"})  # fmt: skip
    ev = evaluate(ds.model, ds.cluster, ds.training, ParallelConfig(tp=1, pp=1, dp=8, zero_stage=1))
    assert any("--mtp-num-layers" in reason for reason in ev.reasons)


def test_deepseek_v3_with_mtp_is_planned() -> None:
    r = request(1)
    result = plan(r)
    assert result.plans
    for p in result.plans:
        assert sum(s.mtp for s in stage_shapes(r.model, r.training, p.parallel)) == 1
        assert p.parallel.pipeline_layout is None or p.parallel.pipeline_layout.count("m") == 1


def test_hf_import_reads_the_mtp_depth() -> None:
    from app.planner.hf_import import from_hf_config

    from .hf_configs import DEEPSEEK_V3

    assert ModelSpec(**from_hf_config({**DEEPSEEK_V3, "num_nextn_predict_layers": 1})).mtp_num_layers == 1
    assert ModelSpec(**from_hf_config({**DEEPSEEK_V3, "num_nextn_predict_layers": 0})).mtp_num_layers == 0


def _small_moe(mtp: int) -> ModelSpec:
    return ModelSpec(name="moe-mtp", num_layers=8, hidden_size=1024, num_attention_heads=8, vocab_size=32000,
                     seq_length=4096, swiglu=True, num_experts=16, moe_router_topk=2, moe_ffn_hidden_size=1024,
                     mtp_num_layers=mtp)  # fmt: skip


@pytest.mark.parametrize(("mtp", "pp", "vpp", "allowed"), [(0, 1, 1, True), (1, 1, 1, False), (1, 2, 2, True),
                                                           (2, 2, 2, False), (2, 1, 1, False)])  # fmt: skip
def test_ep_overlap_only_where_megatron_core_takes_it_with_mtp(mtp: int, pp: int, vpp: int, allowed: bool) -> None:
    """megatron-core 0.16 TransformerConfig.__post_init__ asserts at most one MTP layer under
    overlap_moe_expert_parallel_comm, and PP > 1 with it: the search never offers the overlap elsewhere, so the
    candidates without full recomputation are not all refused for it."""
    r = PlanRequest(model=_small_moe(mtp), cluster={"num_nodes": 1, "gpu": "H100-SXM"},
                    training={"global_batch_size": 64})  # fmt: skip
    overlap = space.overlap_options(r.model, r.training, r.cluster, 1, 8, pp, vpp, "none")
    assert overlap["moe_ep_overlap"] is allowed


def test_two_mtp_layers_plan_without_recomputation() -> None:
    """Before, every level but full recomputation broke the EP-overlap rule; the search took that for running out
    of memory, counted the larger micro-batches as out of memory without any message, and the result failed to
    build (KeyError 'out_of_memory')."""
    r = PlanRequest(model=_small_moe(2), cluster={"num_nodes": 1, "gpu": "H100-SXM"},
                    training={"global_batch_size": 64})  # fmt: skip
    result = plan(r)
    assert result.plans
    assert result.plans[0].parallel.recompute == "none"
    assert not any(p.parallel.moe_ep_overlap for p in result.plans)
    assert all(g.message for g in result.rejected)


@pytest.mark.parametrize(
    ("mtp", "pp", "vpp", "message"),
    [
        (1, 1, 1, "needs pp > 1 (not 1)"),
        (2, 2, 2, "needs mtp_num_layers 1 (not 2)"),
        (2, 1, 1, "needs mtp_num_layers 1 (not 2) and pp > 1 (not 1)"),
    ],
)
def test_the_ep_overlap_refusal_names_only_what_is_wrong(mtp: int, pp: int, vpp: int, message: str) -> None:
    """It read "needs mtp_num_layers 1 (not 1) and pp > 1 (pp 1)" for one MTP layer without a pipeline (QA,
    2026-12-07): the part that was right, named as wrong."""
    r = PlanRequest(model=_small_moe(mtp), cluster={"num_nodes": 2, "gpu": "H100-SXM"},
                    training={"global_batch_size": 64})  # fmt: skip
    par = ParallelConfig(pp=pp, vpp=vpp, dp=16 // pp, ep=8, moe_ep_overlap=True, distributed_optimizer=True)
    est = evaluate(r.model, r.cluster, r.training, par)
    assert [m for m in est.reasons if "multi-token" in m] == [f"EP overlap with multi-token prediction {message}"]
