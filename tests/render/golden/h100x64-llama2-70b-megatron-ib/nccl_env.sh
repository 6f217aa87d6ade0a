# shellcheck shell=bash
# NCCL environment for llama2-70b-pretrain (llama-2-70b on 8 x 8 H100-SXM, megatron, plan #1: TP4 PP4 VPP4 DP4 dist-opt SP mbs 1).
# Sourced by every launch script and by train.sh. Only what the cluster description asks for or the plan
# derives is set here; NCCL's defaults hold for everything else.
export NCCL_IB_HCA='=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7'  # InfiniBand HCAs from cluster.nics; '=' matches the names exactly (mlx5_1 is not mlx5_10)
export NCCL_NET_GDR_LEVEL=PHB  # GPUDirect RDMA between a GPU and an HCA under the same CPU's PCIe host bridge
export NCCL_SOCKET_IFNAME=eth0  # bootstrap and socket traffic on cluster.socket_ifname
export NCCL_ALGO=allreduce:tree  # data-parallel and pipeline traffic crosses 8 nodes: tree all-reduce latency grows with log2(nodes), ring's with nodes; only AllReduce has a tree, so the other collectives keep NCCL's choice (NCCL >= 2.24)
