# shellcheck shell=bash
# NCCL environment for deepseek-v3-like (deepseek-v3-like on 8 x 8 H100-SXM, megatron, plan #1: TP2 PP4 layers 3/../3 DP8 EP8 ETP1 dist-opt SP mbs1 recompute=full).
# Sourced by every launch script and by train.sh. Only what the cluster description asks for or the plan
# derives is set here; NCCL's defaults hold for everything else.
export NCCL_IB_HCA='=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7'  # InfiniBand HCAs from cluster.nics; '=' matches the names exactly (mlx5_1 is not mlx5_10)
