# shellcheck shell=bash
# NCCL environment for llama-2-13b (llama-2-13b on 1 x 8 A100-40GB, deepspeed, plan #1: TP1 PP1 DP8 ZeRO-3 opt->cpu param->cpu mbs1).
# Sourced by every launch script and by train.sh. Only what the cluster description asks for or the plan
# derives is set here; NCCL's defaults hold for everything else.
# (nothing to set here: no NICs, socket interface or NCCL algorithm to name)
