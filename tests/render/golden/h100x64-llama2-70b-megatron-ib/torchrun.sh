#!/usr/bin/env bash
# torchrun.sh: start llama2-70b-pretrain (llama-2-70b on 8 x 8 H100-SXM, megatron, plan #1: TP4 PP4 VPP4 DP4 dist-opt SP mbs1).
# One torchrun agent per node, 8 workers each: run it on all 8 nodes with that
# node's index, e.g. NODE_RANK=0 ./torchrun.sh on node 0 (the rendezvous host), NODE_RANK=1 ./torchrun.sh on the next.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NNODES=8
NPROC_PER_NODE=8
NODE_RANK="${NODE_RANK:?set NODE_RANK to the index of this node, 0 to 7}"
MASTER_ADDR=gpu001
MASTER_PORT=29500
# torchrun restarts failed workers (2 times): a c10d rendezvous regroups them; node 0 hosts its store.
RDZV_ENDPOINT="${MASTER_ADDR}:${MASTER_PORT}"
RDZV_CONF="is_host=$(( NODE_RANK == 0 ? 1 : 0 ))"
# shellcheck source=nccl_env.sh
source "${HERE}/nccl_env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS=1  # tp(4) > 1: Megatron asserts one CUDA connection before Blackwell, so that its TP/CP communication kernels are scheduled in issue order
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # the caching allocator maps what it needs instead of fixed blocks: next to no fragmentation, as NVIDIA's Megatron-Bridge memory guide advises and the planner's memory model for Megatron assumes (2% + 1 GiB over allocated)
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600  # after SIGTERM torchrun waits this long for the ranks to save a checkpoint before SIGKILL (Megatron's --exit-signal-handler, the example trainer's SIGTERM handler; torch's default is 30 s)
cd /opt/Megatron-LM
exec python -m torch.distributed.run \
  --nnodes "${NNODES}" \
  --nproc-per-node "${NPROC_PER_NODE}" \
  --rdzv-backend c10d \
  --rdzv-endpoint "${RDZV_ENDPOINT}" \
  --rdzv-id llama2-70b-pretrain \
  --rdzv-conf "${RDZV_CONF}" \
  --max-restarts 2 \
  --no-python "${HERE}/train.sh"
