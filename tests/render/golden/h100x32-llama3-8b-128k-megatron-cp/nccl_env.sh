# shellcheck shell=bash
# NCCL environment for llama-3-8b-128k (llama-3-8b-128k on 4 x 8 H100-SXM, megatron, plan #1: TP2 PP2 VPP2 DP1 CP8 dist-opt SP mbs1).
# Sourced by every launch script and by train.sh. Only what the cluster description asks for or the plan
# derives is set here; NCCL's defaults hold for everything else.
export NCCL_IB_HCA='=mlx5_0'  # InfiniBand HCAs from cluster.nics; '=' matches the names exactly (mlx5_1 is not mlx5_10)
export NCCL_ALGO=Ring  # set by the render option nccl_algo
