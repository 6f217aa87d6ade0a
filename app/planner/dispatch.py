"""MoE token dispatch: what one dispatch (or combine) all-to-all of each megatron-core dispatcher moves, and where.

- `alltoall` (megatron-core `MoEAlltoAllTokenDispatcher`): the permutation makes one copy of a token per chosen
  expert (`moe_utils.permute`) and sends every copy whose expert lives on another rank: top-k copies per token, of
  which `(n-1)/n` leave the rank and `(n-k)/n` its NVLink domain under balanced routing (`comm.collective_time`).
- `flex` (`MoEFlexTokenDispatcher` over DeepEP or HybridEP, megatron-core `transformer/moe/fused_a2a.py`): a token
  goes once to each GPU that holds any of its experts (the receiver expands it to its local experts), and across
  domains once to each *domain* it reaches: an RDMA write to the same-rank GPU there, which forwards it over NVLink
  (deepseek-ai/DeepEP `csrc/kernels/internode.cu`, `num_tokens_per_rdma_rank`; `csrc/config.hpp` sizes its NVLink
  and RDMA buffers per destination node, not per expert). Combine reduces the expert outputs inside the domain before
  the RDMA write back, so it moves the same counts the other way. Megatron dispatches in the activation dtype
  (`fused_a2a.py` passes `fp8_dispatch=False`).

How many GPUs and domains a token reaches follows from routing that is uniform over the experts (what the auxiliary
loss or expert bias aims at, and what `--moe-router-force-load-balancing` benchmarks run): a unit holding `e` of `E`
experts is reached unless none of the token's `k` choices lands on it, `1 - C(E - e, k) / C(E, k)` (without
replacement). Group-limited routing (`--moe-router-num-groups G --moe-router-group-topk g`, megatron-core
`moe_utils.group_limited_topk`) first picks `g` of the `G` groups, so a unit holding `m` whole groups is reached with
`1 - sum_j C(m, j) C(G - m, g - j) / C(G, g) x C(P - j E/G, k) / C(P, k)` (j of its groups chosen, the top-k uniform
over the P = g E/G experts of the chosen groups), and a unit inside one group with `g/G` times the hypergeometric
term within the chosen groups' experts. Experts are laid out in rank order (rank r holds experts [rE/n, (r+1)E/n)),
so a domain of the EP group holds a contiguous block.
"""

from __future__ import annotations

from functools import cache
from math import comb

from app.planner import comm
from app.planner.specs import ClusterSpec, ModelSpec


@cache
def reach(experts: int, held: int, topk: int, groups: int | None = None, group_topk: int | None = None) -> float:
    """Probability that a token's top-k reaches a unit (GPU or NVLink domain) holding `held` contiguous experts."""
    held = min(held, experts)
    if held >= experts:
        return 1.0
    if groups and group_topk and groups > 1 and experts % groups == 0:
        per_group = experts // groups
        pool = group_topk * per_group  # the experts of the chosen groups, among which the top-k fall
        if held % per_group == 0:  # the unit holds m whole groups, j of them chosen
            m = held // per_group
            missed = sum(
                comb(m, j) * comb(groups - m, group_topk - j) * comb(pool - j * per_group, topk)
                for j in range(min(m, group_topk) + 1)
            )
            return 1.0 - missed / (comb(groups, group_topk) * comb(pool, topk))
        if per_group % held == 0:  # the unit sits inside one group: chosen, then hit among the chosen experts
            return group_topk / groups * (1.0 - comb(pool - held, topk) / comb(pool, topk))
    return 1.0 - comb(experts - held, topk) / comb(experts, topk)


def flex_copies(model: ModelSpec, g: comm.Group) -> tuple[float, float]:
    """(other GPUs, other NVLink domains) one token reaches in the EP group `g` under the flex dispatcher."""
    experts, topk = model.num_experts or 1, model.moe_router_topk or 1
    groups, group_topk = model.moe_router_num_groups, model.moe_router_group_topk
    gpus = (g.size - 1) * reach(experts, experts // g.size, topk, groups, group_topk)
    domains = (g.domains - 1) * reach(experts, experts // g.domains, topk, groups, group_topk) if g.crosses else 0.0
    return gpus, domains


def all_to_all_time(
    model: ModelSpec, dispatcher: str, tokens: float, token_bytes: float, g: comm.Group, cluster: ClusterSpec
) -> float:
    """Seconds of one dispatch (or combine) over the EP group `g` for `tokens` entering tokens per rank (the busiest
    rank's, load imbalance included) of `token_bytes` each. DeepEP runs its NVLink forwarding and RDMA channels side
    by side, so the longer of the two bounds the call; each GPU writes through its own NIC (rail-aligned)."""
    if g.size <= 1:
        return 0.0
    if dispatcher != "flex":
        return comm.collective_time("all_to_all", tokens * (model.moe_router_topk or 1) * token_bytes, g, cluster)
    gpus, domains = flex_copies(model, g)
    nvlink = tokens * token_bytes * gpus / (cluster.intra_bw * cluster.gpu.efficiency.nvlink)
    nic_bw = cluster.inter_bw * cluster.gpu.efficiency.network * g.nics / g.per_domain
    network = tokens * token_bytes * domains / nic_bw if g.crosses else 0.0
    return comm.latency("all_to_all", g, cluster) + max(nvlink, network)


DEEPEP_SMS = 20  # megatron-core TransformerConfig.moe_deepep_num_sms; DeepEP runs one channel per two SMs
NVL_PEERS = 8  # DeepEP NUM_MAX_NVL_PEERS: ranks beyond eight are RDMA peers
MAX_TOPK = MAX_SCALES = 128  # kNumMaxTopK, kNumMaxScales of the buffer size hints


def flex_buffer_bytes(model: ModelSpec, ep: int, expert_tp: int) -> float:
    """Device bytes of DeepEP's communication buffer, as megatron-core's `fused_a2a.get_buffer` sizes it (DeepEP
    `csrc/config.hpp` size hints over its dispatch/combine configs: 256 NVLink receive tokens per channel and peer up
    to 8 ranks, 288 above, 128 RDMA receive tokens, doubled for the send side). Outside PyTorch's allocator
    (cudaMalloc for NVLink IPC, nvshmem_malloc for RDMA)."""
    ranks = ep * expert_tp  # the flex dispatcher communicates over the TP x EP group
    if ranks <= 1:
        return 0.0
    channels = DEEPEP_SMS // 2
    slot = 2 * model.hidden_size + MAX_TOPK * (8 + 4) + MAX_SCALES * 4  # token + top-k indices, weights + scales
    nvl_tokens = 256 if ranks <= NVL_PEERS else 288
    nvl = channels * min(ranks, NVL_PEERS) * nvl_tokens * slot
    rdma = 0.0
    if ranks > NVL_PEERS:
        rdma = channels * (ranks // NVL_PEERS) * 128 * 2 * (slot + 16) + 2**20
    return float(nvl + rdma)


FLEX_MIN_SAVING = 0.05  # below this the flex dispatcher buys nothing worth its dependency (deep_ep, NVSHMEM)


def flex_saves(model: ModelSpec, g: comm.Group) -> bool:
    """Whether the flex dispatcher moves at least `FLEX_MIN_SAVING` less than alltoall over the EP group `g`, across
    the network where the group leaves its NVLink domain, else over NVLink: Mixtral's top-2 of 8 on EP8 inside a node
    sends the same two copies either way; DeepSeek-V3's top-8 of 256 on EP8 3.2 instead of 7 (its 8 groups, 4
    chosen; 4.6 without groups), and Kimi-K2's 384 experts on EP64 over eight nodes 4.6 copies across the network
    instead of 7."""
    if g.size <= 1 or not model.is_moe:
        return False
    topk = model.moe_router_topk or 1
    gpus, domains = flex_copies(model, g)
    if g.crosses:
        return domains < (1 - FLEX_MIN_SAVING) * topk * (g.size - g.per_domain) / g.size
    return gpus < (1 - FLEX_MIN_SAVING) * topk * (g.size - 1) / g.size
