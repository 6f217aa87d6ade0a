"""Step-time formulas against hand-worked cases: every cost term is pinned, so a changed constant or formula fails."""

from __future__ import annotations

import math

import pytest

from app.planner import EstimateRequest, PlanRequest, comm, compute, estimate, layout, plan, stack
from app.planner.estimate import evaluate, time_estimate
from app.planner.layout import StageShape, stage_layer_kinds, stage_shapes
from app.planner.pipeline import pipeline_time
from app.planner.specs import ClusterSpec, ParallelConfig, TrainingSpec
from app.planner.states import stage_params
from app.planner.step import OPTIMIZER_BYTES, ZERO_STEP_BYTES, StageTime, optimizer_times, stage_time
from app.planner.traffic import zero3_regathered_fraction

from .conftest import preset

H100 = ClusterSpec(num_nodes=1, gpu="H100-SXM")
MEGATRON = stack.get("megatron-core").generation("hopper")


def test_nccl_tests_bus_factors() -> None:
    assert comm.bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert comm.bus_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert comm.bus_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert comm.bus_factor("send_recv", 2) == 1.0


def test_collective_time_inside_a_node() -> None:
    cluster = ClusterSpec(num_nodes=1, gpu="A100-80GB")
    eff = cluster.gpu.efficiency
    size = 100e6
    g = comm.group(8, 1, cluster)
    latency = eff.collective_latency_s + 14 * eff.intra_step_latency_s  # ring: 2(n-1) NVLink steps
    expected = latency + size * 2 * 7 / 8 / (300e9 * eff.nvlink)
    assert comm.collective_time("all_reduce", size, g, cluster) == pytest.approx(expected)


def test_a_group_leaves_each_node_through_as_many_nics_as_it_has_ranks_there() -> None:
    """Rail-optimised: 8 ranks of a group per node run 8 rings through 8 NICs (capped by NVLink); one rank per
    node (DP across TP=8 groups) has one NIC."""
    cluster = ClusterSpec(num_nodes=16, gpu="H100-SXM")
    eff = cluster.gpu.efficiency
    dense = comm.group(128, 1, cluster)  # 8 per node
    sparse = comm.group(16, 8, cluster)  # 1 per node
    assert (dense.per_domain, dense.domains, sparse.per_domain, sparse.domains) == (8, 16, 1, 16)
    assert comm.bus_bandwidth(dense, cluster) == pytest.approx(min(8 * 50e9 * eff.network, 450e9 * eff.nvlink))
    assert comm.bus_bandwidth(sparse, cluster) == pytest.approx(50e9 * eff.network)
    two_per_node = comm.group(32, 4, cluster)
    assert comm.bus_bandwidth(two_per_node, cluster) == pytest.approx(2 * 50e9 * eff.network)


def test_ring_latency_pays_the_network_only_on_inter_node_steps() -> None:
    """NCCL's tuning model (src/graph/tuning.cc): (n-1-(N-1)) NVLink steps + (N-1) network steps for an
    all-gather over n ranks on N nodes."""
    cluster = ClusterSpec(num_nodes=64, gpu="A100-80GB")
    eff = cluster.gpu.efficiency
    g = comm.group(512, 1, cluster)
    expected = eff.collective_latency_s + (511 - 63) * eff.intra_step_latency_s + 63 * eff.network_hop_latency_s
    assert comm.latency("all_gather", g, cluster) == pytest.approx(expected)
    tree = eff.collective_latency_s + 2 * ((512 // 64 - 1) * eff.intra_step_latency_s + 6 * eff.network_hop_latency_s)
    assert comm.latency("all_reduce", g, cluster) == pytest.approx(tree)  # the tree beats the ring here


def test_overlap_is_a_bound_with_contention() -> None:
    assert comm.exposed(3.0, 5.0, 0.1) == pytest.approx(0.3)  # fully hidden, 10% still paid
    assert comm.exposed(5.0, 3.0, 0.1) == pytest.approx(2.0 + 0.3)  # the excess is exposed
    assert comm.exposed(5.0, 0.0, 0.1) == pytest.approx(5.0)


def test_halving_bandwidth_doubles_the_bandwidth_term() -> None:
    fast = ClusterSpec(num_nodes=2, gpu="H100-SXM", inter_node_GBps=50)
    slow = ClusterSpec(num_nodes=2, gpu="H100-SXM", inter_node_GBps=25)
    g = comm.group(2, 8, fast)
    size = 1e9
    lat = comm.latency("all_reduce", g, fast)
    t_fast = comm.collective_time("all_reduce", size, g, fast) - lat
    t_slow = comm.collective_time("all_reduce", size, g, slow) - lat
    assert t_slow == pytest.approx(2 * t_fast)


def test_pipeline_schedule_and_bubble() -> None:
    groups = [(1.0, 1), (1.0, 6), (1.0, 1)]
    p = pipeline_time(groups, ParallelConfig(pp=8), microbatches=32)
    assert (p.total_s, p.bubble_s) == pytest.approx((32 + 7, 7))  # (m + p - 1) micro-batch times
    p = pipeline_time(groups, ParallelConfig(pp=8, vpp=2), microbatches=32)
    assert p.bubble_s == pytest.approx(7 / 2) and p.total_s == pytest.approx(32 + 3.5)
    p = pipeline_time([(1.0, 1), (1.0, 6), (1.5, 1)], ParallelConfig(pp=8), microbatches=32)
    assert p.busiest == 2 and p.total_s == pytest.approx(32 * 1.5 + 7 * (7 + 1.5) / 8)


def test_gpt_model_flops_match_megatron_closed_form() -> None:
    """72 B s L h^2 (1 + s/(12h) + V/(12 L h)) for an MHA GPT with ffn = 4h (rules.md sec. 5)."""
    m = preset("gpt3-175b")
    L, h, s, V = m.num_layers, m.hidden_size, m.seq_length, m.vocab_size
    per_token = 72 * L * h**2 * (1 + s / (12 * h) + V / (12 * L * h))
    assert compute.model_flops_per_token(m) == pytest.approx(per_token)


def test_gemm_roofline_with_the_stack_rate_and_tile_efficiency() -> None:
    gpu = H100.gpu
    big = compute.Gemm(8192, 8192, 8192)
    rate = gpu.peak_flops("bf16") * gpu.efficiency.gemm * MEGATRON.gemm_fraction  # 989 x 0.80 x 0.743
    assert rate / 1e12 == pytest.approx(588.1, abs=0.5)
    assert compute.gemm_time(big, gpu, MEGATRON, "bf16") == pytest.approx(
        2 * 8192**3 / rate + MEGATRON.kernel_overhead_s
    )
    small_k = compute.Gemm(8192, 8192, 768)
    kh = gpu.efficiency.gemm_k_half
    factor = (768 / (768 + kh)) / (8192 / (8192 + kh))
    assert compute.gemm_time(small_k, gpu, MEGATRON, "bf16") == pytest.approx(
        2 * 8192 * 8192 * 768 / (rate * factor) + MEGATRON.kernel_overhead_s
    )
    skinny = compute.Gemm(8, 8192, 8192)  # a GEMV: bound by reading the 8192^2 weight
    t = compute.gemm_time(skinny, gpu, MEGATRON, "bf16") - MEGATRON.kernel_overhead_s
    assert t == pytest.approx(2 * (8 * 8192 + 8192**2 + 8 * 8192) / (gpu.hbm_bw * gpu.efficiency.hbm))
    assert compute.gemm_time(big, gpu, MEGATRON, "fp8") < compute.gemm_time(big, gpu, MEGATRON, "bf16")


def test_flash_attention_rate_and_backward_factor() -> None:
    """TE fused attention on Hopper: forward at 0.569 of peak, backward 2.5x the FLOPs at 0.471, scaled by
    s/(s + 512) and the head factor (d = 128: 1). Changing either rate or the 2.5 fails this test."""
    m = preset("llama-3-8b")  # s 8192, d 128, 32 heads
    par = ParallelConfig(micro_batch_size=1)
    training = TrainingSpec(global_batch_size=8)
    fwd, bwd = compute.attention_times(m, par, training, H100.gpu, MEGATRON)
    flops = 2.0 * 8192 * 8192 * 32 * (128 + 128) * 0.5
    peak = 989.4e12 * 8192 / (8192 + 512)
    assert fwd == pytest.approx(flops / (peak * 0.569) + MEGATRON.kernel_overhead_s)
    assert bwd == pytest.approx(2.5 * flops / (peak * 0.471) + 2 * MEGATRON.kernel_overhead_s)


def test_te_ring_attention_runs_s_over_ring_chunks_and_merges_every_step() -> None:
    """Transformer Engine's ring (p2p) over CP 2: the kernel runs on 4,096-long chunks (half the FLOPs, at a
    4096/(4096+512) span), and each of the 2 steps merges its partial output (6 B per output element, 2 kernels a
    step) and adds its dQ, dK, dV into the running ones in backward (6 B per element of Q, K and V: Llama-3 8B has 8
    K/V heads to 32 query heads, 3 kernels a step). Under a2a+p2p (2 x 2) only the ring level merges, over chunks
    of s/2; a2a alone runs whole sequences and merges nothing."""
    m = preset("llama-3-8b")
    training = TrainingSpec(global_batch_size=8)
    over, hbm = MEGATRON.kernel_overhead_s, H100.gpu.hbm_bw * H100.gpu.efficiency.hbm
    flops = 2.0 * 8192 * 8192 * 32 * (128 + 128) * 0.5

    def kernel(cp: int, ring: int) -> tuple[float, float]:
        peak = 989.4e12 * (8192 / ring) / (8192 / ring + 512)
        return flops / cp / (peak * 0.569) + over, 2.5 * flops / cp / (peak * 0.471) + 2 * over

    tokens = 8192 / 2
    out, qkv = tokens * 4096, tokens * (4096 + 1024 + 1024)
    f, b = kernel(2, 2)
    ring2 = compute.attention_times(m, ParallelConfig(micro_batch_size=1, cp=2), training, H100.gpu, MEGATRON)
    assert ring2 == pytest.approx((f + 6 * 2 * out / hbm + 4 * over, b + 6 * 2 * qkv / hbm + 6 * over), rel=1e-12)
    tokens = 8192 / 4
    out, qkv = tokens * 4096, tokens * (4096 + 1024 + 1024)
    f, b = kernel(4, 2)
    hier = ParallelConfig(micro_batch_size=1, cp=4, cp_comm_type="a2a+p2p", hierarchical_cp_sizes=(2, 2))
    got = compute.attention_times(m, hier, training, H100.gpu, MEGATRON)
    assert got == pytest.approx((f + 6 * 2 * out / hbm + 4 * over, b + 6 * 2 * qkv / hbm + 6 * over), rel=1e-12)
    a2a = ParallelConfig(micro_batch_size=1, cp=4, cp_comm_type="a2a")
    assert compute.attention_times(m, a2a, training, H100.gpu, MEGATRON) == pytest.approx(kernel(4, 1), rel=1e-12)


def test_sliding_window_layers_score_the_window_over_a_short_span() -> None:
    """Mistral-7B-v0.1's 4,096-token window at 32K, every other layer global (skip frequency 2): a windowed layer
    scores each query against the window plus a 128-row query block, 4,224 keys (the first 4,224 queries their
    causal prefix), at the rate of a 4,224-key span (4224/(4224+512)); global layers are unchanged, and each layer
    is charged the mean of the two. A kernel that takes the window as a mask (SDPA) scores all s x s; one that skips
    blocks never does more than without a window (a 64-token window at 256 tokens: its short span would cost more)."""
    m = preset("llama-3-8b").model_copy(update={"seq_length": 32768, "sliding_window": 4096})
    par, training = ParallelConfig(micro_batch_size=1), TrainingSpec(global_batch_size=8)
    per_key = 2.0 * 32768 * 32 * (128 + 128)
    over = MEGATRON.kernel_overhead_s

    def rates(keys: float, span: float) -> tuple[float, float]:
        peak = 989.4e12 * span / (span + 512)
        return per_key * keys / (peak * 0.569) + over, 2.5 * per_key * keys / (peak * 0.471) + 2 * over

    full = rates(32768 * 0.5, 32768)
    local = rates((4096 + 128) * (1 - (4096 + 128) * 0.5 / 32768), 4096 + 128)
    every = compute.attention_times(m, par, training, H100.gpu, MEGATRON)
    assert every == pytest.approx(local)
    alternate = m.model_copy(update={"window_attn_skip_freq": 2})
    assert alternate.windowed_layers == 16
    mean = compute.attention_times(alternate, par, training, H100.gpu, MEGATRON)
    assert mean == pytest.approx(((full[0] + local[0]) / 2, (full[1] + local[1]) / 2))
    assert every[0] < 0.3 * full[0]
    short = preset("llama-3-8b").model_copy(update={"seq_length": 256})
    plain = compute.attention_times(short, par, training, H100.gpu, MEGATRON)
    windowed_short = short.model_copy(update={"sliding_window": 64})
    assert compute.attention_times(windowed_short, par, training, H100.gpu, MEGATRON) == plain
    hf = TrainingSpec(global_batch_size=8, framework="deepspeed")
    sdpa = stack.attention_kernel("sdpa-flash")
    assert not sdpa.window  # the window is a mask: every query against every key
    r = sdpa.rate("hopper")
    head = compute._head_factor(128, r.head_dim_half)
    peak = 989.4e12 * 32768 / (32768 + r.seq_half) * head
    costs = hf.software.generation("hopper")
    masked = compute.attention_times(m, par, hf, H100.gpu, costs)
    assert masked[0] == pytest.approx(per_key * 32768 / (peak * r.forward) + costs.kernel_overhead_s)


def _stage(m_name: str, training: TrainingSpec, cluster: ClusterSpec, **par: object) -> object:
    m = preset(m_name)
    p = ParallelConfig(**par)  # type: ignore[arg-type]
    shape = layout.stage_shapes(m, training, p)[0]
    dense, moe = layout.stage_layer_kinds(m, training, p)[0]
    return stage_time(m, cluster, training, p, shape, dense, moe)


def test_tp_comm_overlap_hides_behind_the_layer_gemms() -> None:
    """Without overlap, TP8 + SP pays 2 (all-gather + reduce-scatter) forward and 3 all-gathers + 2
    reduce-scatters backward; with TE userbuffers the same traffic runs beside the GEMMs and only the
    contention share (0.108) of it stays."""
    training = TrainingSpec(global_batch_size=8)
    cluster = ClusterSpec(num_nodes=1, gpu="H100-SXM")
    plain = _stage("llama-3-70b", training, cluster, tp=8, sequence_parallel=True)
    overlap = _stage("llama-3-70b", training, cluster, tp=8, sequence_parallel=True, tp_comm_overlap=True)
    m = preset("llama-3-70b")
    size = 2 * m.seq_length * m.hidden_size
    g = comm.group(8, 1, cluster)
    ag, rs = (
        comm.collective_time("all_gather", size, g, cluster),
        comm.collective_time("reduce_scatter", size, g, cluster),
    )
    per_layer = 2 * (ag + rs) + 2 * (ag + rs) + 2 * ag
    assert plain.tp_comm == pytest.approx(m.num_layers * per_layer)  # type: ignore[attr-defined]
    assert overlap.tp_comm == pytest.approx(0.108 * plain.tp_comm, rel=1e-6)  # type: ignore[attr-defined]


def test_ring_context_parallel_exchange_hides_behind_attention() -> None:
    m = preset("llama-3-8b-128k")
    training = TrainingSpec(global_batch_size=8)
    cluster = ClusterSpec(num_nodes=2, gpu="H100-SXM")
    st = _stage("llama-3-8b-128k", training, cluster, tp=8, cp=2, sequence_parallel=True)
    kv = 2 * (m.seq_length // 2) * (1024 + 1024) / 8  # K and V of the local chunk, 8 KV heads x 128, split by TP
    step = comm.collective_time("send_recv", kv, comm.Group(2, 1, 2), cluster)  # tp*cp = 16 spans two nodes
    lt = compute.layer_time(
        m, ParallelConfig(tp=8, cp=2, sequence_parallel=True), training, cluster.gpu, MEGATRON, False
    )
    c = MEGATRON.overlap_contention
    per_layer = comm.exposed(step, lt.attention_fwd, c) + comm.exposed(2 * step, lt.attention_bwd, c)
    assert st.cp_comm == pytest.approx(m.num_layers * per_layer)  # type: ignore[attr-defined]


def test_host_floor_at_micro_batch_1_on_hugging_face() -> None:
    """DeepSpeed + HF on one H200: every layer dispatches ~its operators forward, twice backward, at 45 us each;
    at micro-batch 1 the CPU takes longer than the GPU and the step waits for it (measured 0.19 s)."""
    m = preset(
        "llama-3-8b",
        num_layers=22,
        hidden_size=2048,
        num_attention_heads=32,
        num_query_groups=4,
        ffn_hidden_size=5632,
        vocab_size=32000,
        seq_length=2048,
    )
    cluster = ClusterSpec(num_nodes=1, gpus_per_node=1, gpu="H200")
    training = TrainingSpec(global_batch_size=1, framework="deepspeed")
    par = ParallelConfig(zero_stage=1, micro_batch_size=1)
    t = time_estimate(m, cluster, training, par)
    assert t.host_bound and t.breakdown["host_s"] > 0
    costs = stack.get("deepspeed-hf").generation("hopper")
    lt = compute.layer_time(m, par, training, cluster.gpu, costs, False)
    host = 22 * lt.ops_fwd * 3 * costs.host_op_s + 12 * costs.host_op_s
    st = stage_time(m, cluster, training, par, StageShape((22,), True, True), 22, 0)
    assert st.host == pytest.approx(host)
    assert st.total == pytest.approx(max(st.device, host))


def test_zero3_module_hooks_cost_host_time_even_on_one_gpu() -> None:
    m = preset(
        "llama-3-8b",
        num_layers=22,
        hidden_size=2048,
        num_attention_heads=32,
        num_query_groups=4,
        ffn_hidden_size=5632,
        vocab_size=32000,
        seq_length=2048,
    )
    cluster = ClusterSpec(num_nodes=1, gpus_per_node=1, gpu="H200")
    training = TrainingSpec(global_batch_size=4, framework="deepspeed")
    shape = StageShape((22,), True, True)
    z1 = stage_time(m, cluster, training, ParallelConfig(zero_stage=1, micro_batch_size=4), shape, 22, 0)
    z3 = stage_time(m, cluster, training, ParallelConfig(zero_stage=3, micro_batch_size=4), shape, 22, 0)
    hook = stack.get("deepspeed-hf").costs.zero3_module_hook_s
    assert z3.host - z1.host == pytest.approx(22 * 9 * hook * 2)  # 9 modules per layer, forward and backward


def _llama(**par: object) -> tuple[float, dict[str, float], float]:
    m = preset("llama-2-7b")
    cluster = ClusterSpec(num_nodes=2, gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=128, **par.pop("training", {}))  # type: ignore[arg-type]
    t = time_estimate(m, cluster, training, ParallelConfig(**par))  # type: ignore[arg-type]
    return t.step_s, t.breakdown, t.mfu


def test_breakdown_adds_up_to_step_time() -> None:
    for par in (
        {"tp": 2, "pp": 2, "dp": 4, "sequence_parallel": True},
        {"tp": 1, "pp": 4, "vpp": 2, "dp": 4, "recompute": "full"},
        {"dp": 16, "distributed_optimizer": True},
    ):
        step, breakdown, _ = _llama(**dict(par))
        assert sum(breakdown.values()) == pytest.approx(step)


def test_full_recompute_costs_a_forward() -> None:
    base, b0, _ = _llama(dp=16, micro_batch_size=2)
    full, b1, _ = _llama(dp=16, micro_batch_size=2, recompute="full")
    assert b1["recompute_s"] == pytest.approx(b0["compute_s"] / 3, rel=0.06)
    assert full > base


def test_block_recompute_pays_for_its_layers_only() -> None:
    _, full, _ = _llama(dp=16, micro_batch_size=2, recompute="full")
    _, block, _ = _llama(dp=16, micro_batch_size=2, recompute="full", recompute_method="block", recompute_num_layers=8)
    assert block["recompute_s"] == pytest.approx(full["recompute_s"] * 8 / 32)


def test_overlapping_gradient_reduction_hides_communication() -> None:
    overlapped, b_on, _ = _llama(dp=16, training={"overlap_grad_reduce": True})
    exposed, b_off, _ = _llama(dp=16, training={"overlap_grad_reduce": False})
    assert b_on["dp_comm_s"] < b_off["dp_comm_s"] and overlapped < exposed


def test_a_data_parallel_collective_runs_beside_the_pass_wall_time() -> None:
    """The gradient reduce hides behind the backward as it runs: its compute, its share of the host waits, and for a
    collective over the NICs the pass's exposed communication inside the NVLink domain; not communication on its
    own link."""
    st = StageTime(compute=3.0, fwd=1.0, bwd=2.0, host_wait=0.3, fwd_side=0.2, bwd_side=0.5)
    assert st.window(True, over_nics=True) == pytest.approx(2.0 + 0.5 + 0.3 * 2 / 3)
    assert st.window(True, over_nics=False) == pytest.approx(2.0 + 0.3 * 2 / 3)
    assert st.window(False, over_nics=True) == pytest.approx(1.0 + 0.2 + 0.3 * 1 / 3)
    # TP8 + SP without userbuffers on two nodes: its exposed backward traffic stays in the node, beside DP's
    m = preset("llama-2-7b")
    cluster = ClusterSpec(num_nodes=2, gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=16)
    par = ParallelConfig(tp=8, dp=2, sequence_parallel=True, distributed_optimizer=True)
    g = comm.group(8, 1, cluster)
    size = 2 * m.seq_length * m.hidden_size
    ag, rs = (
        comm.collective_time("all_gather", size, g, cluster),
        comm.collective_time("reduce_scatter", size, g, cluster),
    )
    shape = StageShape((m.num_layers,), True, True)
    st = stage_time(m, cluster, training, par, shape, m.num_layers, 0)
    assert st.bwd_side == pytest.approx(m.num_layers * (2 * (ag + rs) + 2 * ag))
    assert st.fwd_side == pytest.approx(m.num_layers * 2 * (ag + rs))


def test_a_faster_gpu_never_makes_a_step_slower_where_the_gradient_reduce_is_exposed() -> None:
    """Tiny GPT on 128 H200, PP4 x DP32 at micro-batch 8: the GPU waits on the CPU for part of each micro-batch, and
    the gradient reduce over the NICs is partly exposed. A faster GPU leaves the CPU's pace, so the backward's wall
    time shrinks less than its compute; timed against the compute alone, the reduce's window shrank by more than the
    step gained (with `bf16_TFLOPs` x 1.5 the step was 0.04 % slower)."""
    m = preset("tiny-gpt")
    training = TrainingSpec(global_batch_size=256)
    par = ParallelConfig(pp=4, dp=32, distributed_optimizer=True, micro_batch_size=8)
    steps = []
    for factor in (1.0, 1.5, 2.0, 4.0):
        gpu = {"preset": "H200", "bf16_TFLOPs": 989.0 * factor, "fp16_TFLOPs": 989.0 * factor}
        t = time_estimate(m, ClusterSpec(num_nodes=16, gpu=gpu), training, par)  # type: ignore[arg-type]
        assert t.breakdown["host_s"] > 0 and t.breakdown["dp_comm_s"] > 0
        steps.append(t.step_s)
    assert steps == sorted(steps, reverse=True)


def test_zero3_traffic_is_paid_per_microbatch() -> None:
    m = preset("llama-2-13b")
    cluster = ClusterSpec(num_nodes=8, gpu="A100-80GB")
    one = time_estimate(
        m,
        cluster,
        TrainingSpec(global_batch_size=64, framework="deepspeed"),
        ParallelConfig(dp=64, zero_stage=3, micro_batch_size=1),
    ).breakdown["zero_comm_s"]
    four = time_estimate(
        m,
        cluster,
        TrainingSpec(global_batch_size=256, framework="deepspeed"),
        ParallelConfig(dp=64, zero_stage=3, micro_batch_size=1),
    ).breakdown["zero_comm_s"]
    assert four == pytest.approx(4 * one, rel=1e-6) and one > 0


def test_deepspeed_bf16_optimizer_all_reduces_fp32_gradients_then_gathers_the_parameters() -> None:
    """Megatron-DeepSpeed in bf16 with ZeRO-1 runs DeepSpeed's BF16_Optimizer: the pipeline engine all-reduces
    the fp32 gradients whole (pipe/engine.py _bf16_reduce_grads -> buffered_allreduce_fallback), each rank steps its
    partition and all-gathers the bf16 parameters; in fp16 the ZeRO-1 optimizer reduce-scatters fp16 gradients.
    Hand-worked: DP groups of 8 over 4 nodes, 2 ranks in each (TP 4, PP 2), nothing overlapped (PipelineEngine)."""
    m = preset("llama-2-13b")
    cluster = ClusterSpec(num_nodes=8, gpu="A100-80GB")
    par = ParallelConfig(tp=4, pp=2, dp=8, zero_stage=1, micro_batch_size=1)
    g = layout.dp_group(par, cluster)
    assert (g.size, g.per_domain, g.domains) == (8, 2, 4)

    def dp_s(precision: str) -> tuple[float, float]:
        """(the plan's exposed DP time, the parameters of its largest stage)"""
        training = TrainingSpec(global_batch_size=64, framework="megatron-deepspeed", precision=precision)
        shapes, kinds = stage_shapes(m, training, par), stage_layer_kinds(m, training, par)
        params = max(stage_params(m, par, shape, *kind).dense for shape, kind in zip(shapes, kinds, strict=True))
        return time_estimate(m, cluster, training, par).breakdown["dp_comm_s"], params

    bf16, n = dp_s("bf16")
    assert bf16 == pytest.approx(
        comm.collective_time("all_reduce", 4.0 * n, g, cluster)
        + comm.collective_time("all_gather", 2.0 * n, g, cluster),
        rel=0.02,  # the tied embedding's first-last all-reduce rides on top
    )
    fp16, n16 = dp_s("fp16")
    assert fp16 == pytest.approx(
        comm.collective_time("reduce_scatter", 2.0 * n16, g, cluster)
        + comm.collective_time("all_gather", 2.0 * n16, g, cluster),
        rel=0.02,
    )


def test_zero3_gathers_again_for_a_recomputed_forward_only_what_it_released() -> None:
    """DeepSpeed keeps a parameter gathered when it comes back within stage3_max_reuse_distance (1e9) elements of
    the module order. GPT-3 175B (h 12288, ffn 4h): the recomputed forward then the backward bring each linear back
    after twice the linears behind it: fc2 at once (kept); fc1 after 2 x 604M (gathered again), the projection
    and QKV later still: 1208M of 1812M per layer. At TP 2 fc1 comes back after 2 x 302M and is kept too. A
    Llama-2 7B layer (202M) keeps everything: no third gather."""
    gpt3 = preset("gpt3-175b")
    h = gpt3.hidden_size
    assert zero3_regathered_fraction(gpt3, ParallelConfig(dp=8)) == pytest.approx(
        (3 * h * h + h * h + 4 * h * h) / (12 * h * h),
        rel=1e-4,  # QKV biases
    )
    assert zero3_regathered_fraction(gpt3, ParallelConfig(tp=2, dp=8)) == pytest.approx(4 / 12, rel=1e-4)
    assert zero3_regathered_fraction(preset("llama-2-7b"), ParallelConfig(dp=8)) == 0.0
    m = preset("llama-2-7b")
    cluster = ClusterSpec(num_nodes=8, gpu="A100-80GB")
    training = TrainingSpec(global_batch_size=64, framework="deepspeed")
    zero3 = {"dp": 64, "zero_stage": 3, "micro_batch_size": 1}
    plain = time_estimate(m, cluster, training, ParallelConfig(**zero3)).breakdown
    redone = time_estimate(m, cluster, training, ParallelConfig(**zero3, recompute="full")).breakdown
    assert redone["recompute_s"] > 0 and redone["zero_comm_s"] <= plain["zero_comm_s"]  # no more traffic


def test_expert_compute_with_etp1_is_counted_once() -> None:
    """Mixtral TP2 EP8: with expert-TP 1 each GPU's experts see the sequence-parallel half of the tokens at full
    width; with expert-TP 2 all tokens at half width: the same expert FLOPs per GPU."""
    m = preset("mixtral-8x7b")
    training = TrainingSpec(global_batch_size=64)
    gpu = ClusterSpec(num_nodes=2, gpu="H100-SXM").gpu
    etp1 = ParallelConfig(tp=2, dp=8, ep=8, etp=1, sequence_parallel=True)
    etp2 = ParallelConfig(tp=2, dp=8, ep=8, sequence_parallel=True)
    f1 = sum(2 * g.m * g.n * g.k * g.count for g in compute._mlp_part_gemms(m, etp1, training, m.seq_length, True)[1:])
    f2 = sum(2 * g.m * g.n * g.k * g.count for g in compute._mlp_part_gemms(m, etp2, training, m.seq_length, True)[1:])
    assert f1 == pytest.approx(f2)
    t1 = compute.layer_time(m, etp1, training, gpu, MEGATRON, True).mlp_fwd
    t2 = compute.layer_time(m, etp2, training, gpu, MEGATRON, True).mlp_fwd
    assert t1 == pytest.approx(t2, rel=0.1)


def test_mfu_is_model_flops_over_peak() -> None:
    m = preset("llama-2-7b")
    cluster = ClusterSpec(num_nodes=1, gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=64)
    est = evaluate(m, cluster, training, ParallelConfig(dp=8, distributed_optimizer=True))
    t = est.time
    assert t.flops_per_step == pytest.approx(compute.model_flops_per_token(m) * 64 * m.seq_length)
    assert t.mfu == pytest.approx(t.flops_per_step / t.step_s / 8 / (989.4e12))
    assert t.tokens_per_s == pytest.approx(64 * m.seq_length / t.step_s)
    iv = t.step_interval
    assert iv is not None and iv.low < t.step_s < iv.high and "measured runs" in iv.basis
    assert not math.isnan(iv.low)


def test_zero3_hides_each_unit_s_gather_only_behind_the_unit_before_it_in_its_own_phase() -> None:
    """Hand-worked: GPT-3 175B layers (QKV 3h², projection h², fc1 4h², fc2 4h²; DeepSpeed's prefetch bucket
    0.9h² holds one linear, so each is its own unit) on 64 A100s with ZeRO-3, no recomputation. With K = one
    layer's gather / 12 per element-h² and the forward lasting exactly one pass of gathers, unit i computes
    s_i K while the gather of the unit after it moves s_next K: QKV (3) hides the projection's 1, the
    projection (1) leaves 3 of fc1's 4 exposed, fc1 (4) hides fc2's 4, fc2 (4) hides the next QKV's 3: 3 K exposed
    and 9 K hidden at the contention gamma. A backward long enough to hide everything exposes gamma x its traffic
    (the second gather and the reduce-scatter); the first unit's gather (3 K of one layer) is exposed. The step's
    pooled form would have hidden the forward's gathers behind the backward: only gamma x traffic."""
    from app.planner.step import StageTime
    from app.planner.traffic import _gather_per_layer_traffic, gather_per_layer_exposed

    gpt3 = preset("gpt3-175b").model_copy(update={"add_bias_linear": False})
    cluster = ClusterSpec(num_nodes=8, gpu="A100-80GB")
    training = TrainingSpec(global_batch_size=64, framework="deepspeed")
    par = ParallelConfig(dp=64, zero_stage=3, micro_batch_size=1)
    shape = stage_shapes(gpt3, training, par)[0]
    layers = shape.layers
    gather, rest = _gather_per_layer_traffic(gpt3, cluster, training, par, shape, layers, 0)
    gamma = training.software.generation(cluster.gpu.generation).overlap_contention
    k = gather / 12
    st = StageTime(fwd=gather, bwd=100 * (gather + rest), recompute=0.0)
    exposed = gather_per_layer_exposed(gpt3, cluster, training, par, shape, layers, 0, st)
    assert exposed == pytest.approx(3 * k + 9 * k * gamma + gamma * (gather + rest) + 3 * k / layers, rel=1e-9)
    pooled = comm.exposed(2 * gather + rest, st.fwd + st.bwd, gamma)
    assert exposed > pooled + 3 * k * (1 - gamma)  # the projection is too short to hide 3 K of fc1's gather


@pytest.mark.parametrize(("stage", "held_per_gpu"), [(1, 1.0), (2, 1 / 4), (3, 1 / 4)])
def test_the_optimizer_step_reads_the_gradients_each_gpu_holds(stage: int, held_per_gpu: float) -> None:
    """Hand case: the step streams its optimizer bytes over the shard and reads and zeroes 8 B per gradient the GPU
    holds: every one under ZeRO-1 (param.grad), a quarter of them under ZeRO-2/3 on DP 4. It charged the whole
    stage's everywhere (QA, 2026-12-06: 80 % of a 70B ZeRO-3 step's optimizer time)."""
    m = preset("llama-2-7b")
    cluster = ClusterSpec(num_nodes=1, gpus_per_node=4, gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=8, framework="deepspeed")
    par = ParallelConfig(dp=4, zero_stage=stage)
    n = 1_000_000_000
    gpu, offload = optimizer_times(m, cluster, training, par, [(n, 0)])
    per_param = OPTIMIZER_BYTES[training.software.costs.optimizer] + ZERO_STEP_BYTES
    hbm = cluster.gpu.hbm_bw * cluster.gpu.efficiency.hbm
    host = training.software.generation("hopper").host_step_s
    assert offload == 0.0
    assert gpu == pytest.approx((per_param * n / 4 + 8.0 * n * held_per_gpu) / hbm + host, rel=1e-12)


def test_parameters_on_nvme_are_read_from_the_drives_every_pass() -> None:
    """ZeRO-Infinity swaps each GPU's 16-bit partition in from the node's NVMe for the forward and the backward:
    Llama-3-70B on 8 H100 reads 2 x 141 GB per micro-batch through 6 GB/s, about 47 s; it was timed as host copies
    only, and the optimizer alone on NVMe (the weights staying on the GPUs) was never offered (QA, 2026-12-06)."""
    cluster = {"num_nodes": 1, "gpu": "H100-SXM", "nvme_path": "/nvme"}
    training = {"global_batch_size": 64, "framework": "deepspeed"}
    base = {"dp": 8, "zero_stage": 3, "micro_batch_size": 1, "recompute": "full", "offload_optimizer": "nvme"}
    on, off = (
        estimate(
            EstimateRequest(
                model="llama-3-70b", cluster=cluster, training=training, parallel={**base, "offload_param": where}
            )
        )
        for where in ("nvme", "none")
    )
    n = 70.6e9  # every parameter, the 8 GPUs' partitions together (within 10 %: the gathers move the layers')
    per_microbatch = 2 * 2 * n / 6e9  # forward and backward, 2 B each, the node's 6 GB/s
    extra = on.time.breakdown["zero_comm_s"] - off.time.breakdown["zero_comm_s"]
    assert extra == pytest.approx(8 * per_microbatch, rel=0.1)  # 8 micro-batches
    best = plan(PlanRequest(model="llama-3-70b", cluster=cluster, training=training)).plans[0].parallel
    assert (best.offload_optimizer, best.offload_param) == ("nvme", "none")


@pytest.mark.parametrize(("stage", "gbs", "pcie_per_param"), [(1, 4, 6.0), (1, 8, 10.0), (2, 8, 6.0), (3, 8, 6.0)])
def test_the_offloaded_optimizer_step_moves_fp32_gradients_down_and_16_bit_parameters_up(
    stage: int, gbs: int, pcie_per_param: float
) -> None:
    """Hand case on DP 4: ZeRO-1/2 cast each gradient to fp32 on the GPU and copy it to the host (4 B,
    `async_inplace_copy_grad_to_fp32_buffer_from_gpu`), ZeRO-3 copies its 16-bit partition to fp32 on the GPU at
    the boundary (`_offload_grad_partition_at_boundary`, 4 B); the parameters come back in 16 bits (2 B, cast on
    the host). ZeRO-1 with two micro-batches (GBS 8) brings its host-accumulated gradient back, adds and copies it
    out at the boundary: 4 B more. It charged 4 B everywhere (QA, 2026-12-06)."""
    m = preset("llama-2-7b")
    cluster = ClusterSpec(num_nodes=1, gpus_per_node=4, gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=gbs, framework="deepspeed")
    par = ParallelConfig(dp=4, zero_stage=stage, micro_batch_size=1, offload_optimizer="cpu")
    n = 1_000_000_000
    _gpu, offload = optimizer_times(m, cluster, training, par, [(n, 0)])
    cpu = n / 4 * 4 / cluster.cpu_adam_params_per_s  # the node's 4 GPUs share its CPU Adam
    assert offload == pytest.approx(pcie_per_param * n / 4 / cluster.h2d_bw + cpu, rel=1e-12)


@pytest.mark.parametrize(("stage", "gbs", "per_param"), [(2, 4, 4 - 2 / 4), (2, 1, 0.0), (3, 4, 4.0), (3, 1, 4.0)])
def test_offloaded_gradients_make_a_host_round_trip_in_every_micro_batch(
    stage: int, gbs: int, per_param: float
) -> None:
    """Hand case, Llama-2-7B on one H100 (no reduce-scatter): ZeRO-2 with the optimizer offloaded keeps a
    16-bit copy of its gradients on the host between micro-batches: out in the first (2 B), back and out again in
    every later one (4 B) - 3.5 B per micro-batch over 4 (`async_accumulate_grad_in_cpu_via_gpu`), none with one.
    ZeRO-3 copies its gradient partition out and back in every micro-batch (`partition_grads`). Behind the backward
    on the reduction stream: with a backward of 0 s all of it is exposed. It was not timed (QA, 2026-12-06)."""
    from app.planner.traffic import _gather_per_layer_traffic, _zero2_traffic, host_accumulation_bytes

    m = preset("llama-2-7b")
    cluster = ClusterSpec(num_nodes=1, gpus_per_node=1, gpu="H100-SXM")
    training = TrainingSpec(global_batch_size=gbs, framework="deepspeed")
    par = ParallelConfig(dp=1, zero_stage=stage, micro_batch_size=1, offload_optimizer="cpu")
    assert host_accumulation_bytes(training, par) == pytest.approx(per_param)
    shape = stage_shapes(m, training, par)[0]
    n = stage_params(m, par, shape, shape.layers, 0).total
    if stage == 2:
        traffic = _zero2_traffic(m, cluster, training, par, shape, shape.layers, 0)
        assert traffic == pytest.approx(per_param * n / cluster.h2d_bw, rel=1e-12)
        st = stage_time(m, cluster, training, par, shape, shape.layers, 0)
        gamma = training.software.generation("hopper").overlap_contention
        assert st.zero_comm == pytest.approx(comm.exposed(traffic, st.window(True, False), gamma), rel=1e-12)
        assert per_param == 0 or st.zero_comm > 0
    else:
        _gather, rest = _gather_per_layer_traffic(m, cluster, training, par, shape, shape.layers, 0)
        assert rest == pytest.approx(per_param * n / cluster.h2d_bw, rel=1e-12)  # no reduce-scatter on one GPU


def test_selective_modules_recompute_only_the_layers_megatron_applies_them_to() -> None:
    """Megatron's "mlp" module recomputes dense MLPs only (transformer_layer.py: `if not self.is_moe_layer`), "moe",
    "moe_act" and "shared_experts" the MoE block's parts only, and "moe" already re-runs the experts' activation.
    DeepSeek-V3 with mla_up_proj+mlp was charged the whole MoE block's recompute on every MoE layer (3.0 s a step on
    256 GB200, as much as mla_up_proj+moe) while its memory dropped only the 3 dense layers' MLPs."""
    m = preset("deepseek-v3-like")
    training = TrainingSpec(global_batch_size=64)
    base = {"tp": 1, "ep": 8, "dp": 8, "micro_batch_size": 1}

    def extra(modules: tuple[str, ...], moe: bool) -> float:
        par = ParallelConfig(**base, recompute="selective", recompute_modules=modules)  # type: ignore[arg-type]
        gpu = ClusterSpec(num_nodes=8, gpu="H100-SXM").gpu
        costs = training.software.generation(gpu.generation)
        return compute.layer_time(m, par, training, gpu, costs, moe).recompute

    up = extra(("mla_up_proj",), True)
    assert extra(("mla_up_proj", "mlp"), True) == pytest.approx(up)  # no dense MLP in an MoE layer
    assert extra(("mla_up_proj", "moe"), True) > 2 * up
    assert extra(("moe",), False) == extra(("moe_act",), False) == extra(("shared_experts",), False) == 0.0
    assert extra(("mlp",), False) > 0.0
    assert extra(("moe", "moe_act"), True) == pytest.approx(extra(("moe",), True))  # moe covers the activation
    # the shared expert's share is its own GEMMs' and SwiGLU's time, not a fixed quarter of the block
    shared = extra(("shared_experts",), True)
    assert 0.0 < shared < extra(("moe",), True) / 4


def test_model_flops_count_the_attention_a_sliding_window_needs() -> None:
    """MFU is the FLOPs the model needs over the time and the peak. A windowed layer's query attends to at most w
    keys, on average `w - w^2 / 2s` of a causal prefix (s/2 at w = s, Megatron's convention for full layers); counted
    as full causal attention (Megatron's `num_floating_point_operations`), a 128-token window at 512K tokens showed
    MFU 366 % (QA, 2026-12-07)."""
    s, w = 524_288, 128
    full = preset("llama-3-8b", seq_length=s)
    windowed = preset("llama-3-8b", seq_length=s, sliding_window=w)
    shape = compute.attention_shape(full)
    per_key = full.num_attention_heads * (shape.score_dim + shape.value_dim)
    saved = 6.0 * full.num_layers * per_key * (s / 2 - (w - w * w / (2 * s)))
    assert compute.model_flops_per_token(windowed) == pytest.approx(compute.model_flops_per_token(full) - saved)
    every_other = preset("llama-3-8b", seq_length=s, sliding_window=w, window_attn_skip_freq=2)
    assert compute.model_flops_per_token(every_other) == pytest.approx(compute.model_flops_per_token(full) - saved / 2)
    result = plan(
        PlanRequest.model_validate(
            {
                "model": {"preset": "llama-3-8b", "sliding_window": w, "seq_length": s},
                "cluster": {"num_nodes": 8, "gpu": "H100-SXM"},
                "training": {"global_batch_size": 64},
            }
        )
    )
    assert result.plans and all(0.0 < p.estimate.time.mfu < 1.0 for p in result.plans)
