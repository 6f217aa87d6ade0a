"""Memory formulas against hand-worked cases: Korthikanti et al. 2022 Table 2 and Fig. 1, the ZeRO /
distributed-optimizer byte counts, and the pipeline's in-flight micro-batches."""

from __future__ import annotations

import pytest

from app.planner import activations as act
from app.planner.layout import microbatches_in_flight
from app.planner.memory import memory_estimate, state_bytes
from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec

from .conftest import korthikanti_training, preset

GiB = 2**30
S, B, H, A = 2048, 1, 12288, 96  # GPT-3 175B shape


def gpt(**kw: object) -> ModelSpec:
    base = dict(
        num_layers=96,
        hidden_size=H,
        num_attention_heads=A,
        vocab_size=51200,
        seq_length=S,
        position_embedding_type="learned_absolute",
        normalization="LayerNorm",
        add_bias_linear=True,
        hidden_dropout=0.1,
        attention_dropout=0.1,
    )
    return ModelSpec(**{**base, **kw})


def layer(tp: int, sp: bool, recompute: str) -> float:
    par = ParallelConfig(tp=tp, micro_batch_size=B, sequence_parallel=sp, recompute=recompute)
    return act.layer_bytes(gpt(), par, korthikanti_training(8), moe=False)


SBH = S * B * H
T = 8


@pytest.mark.parametrize(
    ("tp", "sp", "recompute", "expected"),
    [
        (1, False, "none", SBH * (34 + 5 * A * S / H)),
        (T, False, "none", SBH * (10 + 24 / T + 5 * A * S / (H * T))),
        (T, True, "none", SBH * (34 / T + 5 * A * S / (H * T))),
        (T, False, "selective", SBH * (10 + 24 / T)),
        (T, True, "selective", SBH * 34 / T),
    ],
    ids=["none", "tp", "tp+sp", "tp+selective", "tp+sp+selective"],
)
def test_korthikanti_table_2(tp: int, sp: bool, recompute: str, expected: float) -> None:
    assert layer(tp, sp, recompute) == pytest.approx(expected, rel=1e-12)


def test_full_recompute_keeps_layer_input_only() -> None:
    par = ParallelConfig(tp=1, micro_batch_size=B, recompute="full")
    assert act.checkpoint_bytes(gpt(), par) == 2 * SBH


def test_flash_attention_drops_the_score_term_and_keeps_softmax_stats() -> None:
    par = ParallelConfig(tp=T, micro_batch_size=B, sequence_parallel=True)
    flash = act.layer_bytes(gpt(), par, TrainingSpec(global_batch_size=8, flash_attention=True), moe=False)
    assert flash == pytest.approx(SBH * 34 / T + 4 * S * B * A / T)


def test_gqa_and_swiglu_generalisation() -> None:
    """Llama-2-70B layer, TP8 + SP, flash: K and V shrink by heads/groups; SwiGLU keeps 3 ffn-wide tensors."""
    m = preset("llama-2-70b")
    par = ParallelConfig(tp=8, micro_batch_size=1, sequence_parallel=True)
    s, h, f, t = m.seq_length, m.hidden_size, m.ffn_hidden_size or 0, 8
    expected = (4 * 2 * s * h) / t + 2 * s * (2 * h + 2 * 1024) / t + 4 * s * 64 / t + 2 * s * 3 * f / t
    assert act.layer_bytes(m, par, TrainingSpec(global_batch_size=8), moe=False) == pytest.approx(expected)


# Korthikanti et al. 2022, Fig. 1 activation memory in GiB (as transcribed by Calculon's validation.py);
# the first pipeline stage holds p micro-batches of L/p layers (x (1 + (p-1)/(p v)) when interleaved).
FIG1 = [
    ("megatron-22b", 1, 1, 4, 59.25, 9.5625),
    ("gpt3-175b", 8, 3, 1, 66.84375, 12.3515625),
    ("megatron-530b", 35, 3, 1, 114.0234375, 23.076171875),
    ("megatron-1t", 64, 1, 1, 131.25, 26.5625),
]


@pytest.mark.parametrize(("name", "pp", "vpp", "mbs", "none_gib", "seqsel_gib"), FIG1)
def test_korthikanti_figure_1_activations(
    name: str, pp: int, vpp: int, mbs: int, none_gib: float, seqsel_gib: float
) -> None:
    m = preset(name, hidden_dropout=0.1, attention_dropout=0.1)
    training = korthikanti_training(gbs=mbs * pp * 8)
    for recompute, sp, expected in (("none", False, none_gib), ("selective", True, seqsel_gib)):
        par = ParallelConfig(tp=8, pp=pp, vpp=vpp, micro_batch_size=mbs, recompute=recompute, sequence_parallel=sp)
        in_flight = microbatches_in_flight(par, 0, training.global_batch_size // mbs)
        got = act.layer_bytes(m, par, training, moe=False) * m.num_layers // pp * in_flight
        assert got / GiB == pytest.approx(expected, rel=2e-3), (recompute, got / GiB)


def test_in_flight_microbatches() -> None:
    one_f_one_b = ParallelConfig(pp=4)
    assert [microbatches_in_flight(one_f_one_b, r, 16) for r in range(4)] == [4, 3, 2, 1]
    assert microbatches_in_flight(one_f_one_b, 0, 2) == 2  # fewer micro-batches than stages
    interleaved = ParallelConfig(pp=4, vpp=2)
    # Megatron: rank 0 warms up (p-1)*2 + (v-1)*p chunks, +1 in flight: (6 + 4 + 1)/2 = 5.5 stage-equivalents,
    # which is p * (1 + (p-1)/(p*v)) = 4 * 1.375.
    assert microbatches_in_flight(interleaved, 0, 16) == pytest.approx(4 * (1 + 3 / 8))


@pytest.mark.parametrize(
    ("framework", "precision", "fields", "shard", "expected"),
    [
        ("megatron", "bf16", {}, 8, (2, 4, 12)),
        ("megatron", "bf16", {"distributed_optimizer": True}, 8, (2, 4, 12 / 8)),
        ("megatron", "fp16", {}, 8, (2, 2, 16)),
        ("megatron", "fp16", {"distributed_optimizer": True}, 8, (2, 2, 16 / 8)),
        ("deepspeed", "bf16", {"zero_stage": 1}, 8, (2, 2, 16 / 8)),
        ("deepspeed", "bf16", {"zero_stage": 2}, 8, (2, 2 / 8, 16 / 8)),
        ("deepspeed", "bf16", {"zero_stage": 3}, 8, (2 / 8, 2 / 8, 16 / 8)),
        ("megatron-deepspeed", "bf16", {"zero_stage": 1}, 8, (2, 4, 12 / 8)),
    ],
)
def test_model_state_bytes_per_parameter(
    framework: str, precision: str, fields: dict[str, object], shard: int, expected: tuple[float, float, float]
) -> None:
    training = TrainingSpec(global_batch_size=8, framework=framework, precision=precision)  # type: ignore[arg-type]
    sb = state_bytes(training, ParallelConfig(dp=shard, **fields), shard)  # type: ignore[arg-type]
    assert (sb.weights, sb.grads, sb.optimizer) == pytest.approx(expected)
    # ZeRO paper totals: 16 (baseline fp16 K=12) ... 2 + 2 + 16/N for stage 1 (the fp32 grad partition included)
    assert sum(expected) <= 20


def test_offload_moves_states_to_host() -> None:
    training = TrainingSpec(global_batch_size=8, framework="deepspeed")
    sb = state_bytes(training, ParallelConfig(dp=4, zero_stage=3, offload_optimizer="cpu", offload_param="cpu"), 4)
    assert (sb.weights, sb.optimizer) == (0, 0) and sb.cpu == pytest.approx(16 / 4 + 2 / 4)


def test_first_stage_holds_most_activations_last_holds_logits() -> None:
    m = preset("llama-3-8b")
    cluster = ClusterSpec(num_nodes=1, gpu="H100-SXM")
    mem = memory_estimate(
        m, cluster, TrainingSpec(global_batch_size=64), ParallelConfig(tp=2, pp=4, sequence_parallel=True)
    )
    acts = [s.activations_bytes for s in mem.stages]
    assert acts[0] > acts[1] > acts[2]  # 4, 3, 2 micro-batches in flight
    # the last stage holds one micro-batch plus the logits of the 128K vocabulary (fp32 copy included)
    par = ParallelConfig(tp=2, pp=4, sequence_parallel=True)
    assert acts[3] - acts[2] / 2 == pytest.approx(act.output_stage_bytes(m, par), abs=2)
    assert mem.peak_bytes == max(s.total_bytes for s in mem.stages)
    for s in mem.stages:
        parts = s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + s.activations_bytes + s.other_bytes
        assert parts == pytest.approx(s.total_bytes, abs=8)
