# shellcheck shell=bash
# NCCL environment for mixtral-8x7b (mixtral-8x7b on 4 x 8 H100-SXM, megatron, plan #1: TP2 PP4 DP4 EP4 dist-opt SP mbs1).
# Sourced by every launch script and by train.sh. Only what the cluster description asks for or the plan
# derives is set here; NCCL's defaults hold for everything else.
export NCCL_IB_HCA='=mlx5_0,mlx5_1'  # InfiniBand HCAs from cluster.nics; '=' matches the names exactly (mlx5_1 is not mlx5_10)
