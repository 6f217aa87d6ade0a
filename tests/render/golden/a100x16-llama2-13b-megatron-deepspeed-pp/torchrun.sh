#!/usr/bin/env bash
# torchrun.sh: start llama-2-13b (llama-2-13b on 2 x 8 A100-80GB, megatron-deepspeed, plan #1: TP2 PP2 DP4 ZeRO-1 mbs2 recompute=full).
# One torchrun agent per node, 8 workers each: run it on all 2 nodes with that
# node's index, e.g. NODE_RANK=0 ./torchrun.sh on node 0 (the rendezvous host), NODE_RANK=1 ./torchrun.sh on the next.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NNODES=2
NPROC_PER_NODE=8
NODE_RANK="${NODE_RANK:?set NODE_RANK to the index of this node, 0 to 1}"
MASTER_ADDR=dgx1
MASTER_PORT=29500
# shellcheck source=nccl_env.sh
source "${HERE}/nccl_env.sh"
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600  # after SIGTERM torchrun waits this long for the ranks to save a checkpoint before SIGKILL (Megatron's --exit-signal-handler, the example trainer's SIGTERM handler; torch's default is 30 s)
cd /opt/Megatron-DeepSpeed
exec python -m torch.distributed.run \
  --nnodes "${NNODES}" \
  --nproc-per-node "${NPROC_PER_NODE}" \
  --node-rank "${NODE_RANK}" \
  --master-addr "${MASTER_ADDR}" \
  --master-port "${MASTER_PORT}" \
  --max-restarts 0 \
  --no-python "${HERE}/train.sh"
