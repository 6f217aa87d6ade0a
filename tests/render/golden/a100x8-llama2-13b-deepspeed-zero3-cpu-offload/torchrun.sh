#!/usr/bin/env bash
# torchrun.sh: start llama-2-13b (llama-2-13b on 1 x 8 A100-40GB, deepspeed, plan #1: TP1 PP1 DP8 ZeRO-3 opt->cpu param->cpu mbs1).
# One node, 8 workers: run ./torchrun.sh on it.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NNODES=1
NPROC_PER_NODE=8
# shellcheck source=nccl_env.sh
source "${HERE}/nccl_env.sh"
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600  # after SIGTERM torchrun waits this long for the ranks to save a checkpoint before SIGKILL (Megatron's --exit-signal-handler, the example trainer's SIGTERM handler; torch's default is 30 s)
exec python -m torch.distributed.run \
  --nnodes "${NNODES}" \
  --nproc-per-node "${NPROC_PER_NODE}" \
  --standalone \
  --max-restarts 0 \
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
