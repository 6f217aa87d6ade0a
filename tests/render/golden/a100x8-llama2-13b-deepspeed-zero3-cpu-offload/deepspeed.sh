#!/usr/bin/env bash
# deepspeed.sh: start llama-2-13b with DeepSpeed's launcher (llama-2-13b on 1 x 8 A100-40GB, deepspeed, plan #1: TP1 PP1 DP8 ZeRO-3 opt->cpu param->cpu mbs1).
# One node, 8 workers: run ./deepspeed.sh on it.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=nccl_env.sh
source "${HERE}/nccl_env.sh"
exec python -m deepspeed.launcher.runner \
  --hostfile "${HERE}/hostfile" \
  --num_nodes 1 \
  --num_gpus 8 \
  --master_port 29500 \
  --no_local_rank \
  examples/train_gpt.py \
  --num-layers 40 \
  --hidden-size 5120 \
  --ffn-hidden-size 13824 \
  --num-attention-heads 40 \
  --seq-length 4096 \
  --max-position-embeddings 4096 \
  --position-embedding-type rope \
  --normalization RMSNorm \
  --swiglu \
  --untie-embeddings-and-output-weights \
  --vocab-size 32000 \
  --micro-batch-size 1 \
  --global-batch-size 64 \
  --train-iters 1000 \
  --lr 0.0003 \
  --weight-decay 0.1 \
  --seed 1234 \
  --log-interval 10 \
  --deepspeed_config "${HERE}/ds_config.json"
