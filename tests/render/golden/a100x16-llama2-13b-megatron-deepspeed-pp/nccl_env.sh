# shellcheck shell=bash
# NCCL environment for llama-2-13b (llama-2-13b on 2 x 8 A100-80GB, megatron-deepspeed, plan #1: TP2 PP2 DP4 ZeRO-1 mbs2 recompute=full).
# Sourced by every launch script and by train.sh. Only what the cluster description asks for or the plan
# derives is set here; NCCL's defaults hold for everything else.
export NCCL_SOCKET_IFNAME='=ens1f0'  # bootstrap and socket traffic on ens1f0 exactly ('=': not every interface it prefixes)
export GLOO_SOCKET_IFNAME=ens1f0  # the gloo groups Megatron and DeepSpeed create use it too
