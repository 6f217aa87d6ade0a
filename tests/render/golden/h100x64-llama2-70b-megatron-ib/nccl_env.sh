# shellcheck shell=bash
# NCCL environment for llama2-70b-pretrain (llama-2-70b on 8 x 8 H100-SXM, megatron, plan #1: TP4 PP4 VPP4 DP4 dist-opt SP mbs1).
# Sourced by every launch script and by train.sh. Only what the cluster description asks for or the plan
# derives is set here; NCCL's defaults hold for everything else.
export NCCL_IB_HCA='=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7'  # InfiniBand HCAs from cluster.nics; '=' matches the names exactly (mlx5_1 is not mlx5_10)
export NCCL_SOCKET_IFNAME='=eth0'  # bootstrap and socket traffic on eth0 exactly ('=': not every interface it prefixes)
export GLOO_SOCKET_IFNAME=eth0  # the gloo groups Megatron and DeepSpeed create use it too
