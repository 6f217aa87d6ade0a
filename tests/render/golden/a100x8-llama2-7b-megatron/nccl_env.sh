# shellcheck shell=bash
# NCCL environment for llama-2-7b (llama-2-7b on 1 x 8 A100-80GB, megatron, plan #1: TP2 PP1 DP4 dist-opt SP mbs2 recompute=selective).
# Sourced by every launch script and by train.sh. Only what the cluster description asks for or the plan
# derives is set here; NCCL's defaults hold for everything else.
# (nothing to set here: no NICs, socket interface or NCCL algorithm to name)
