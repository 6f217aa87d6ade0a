#!/usr/bin/env bash
# torchrun.sh: start llama-2-7b (llama-2-7b on 1 x 8 A100-80GB, megatron, plan #1: TP2 PP1 DP4 dist-opt SP mbs2 recompute=selective).
# One node, 8 workers: run ./torchrun.sh on it.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NNODES=1
NPROC_PER_NODE=8
# shellcheck source=nccl_env.sh
source "${HERE}/nccl_env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS=1  # tp(2) > 1: Megatron asserts one CUDA connection before Blackwell, so that its TP/CP communication kernels are scheduled in issue order
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # the caching allocator maps what it needs instead of fixed blocks: next to no fragmentation, as NVIDIA's Megatron-Bridge memory guide advises and the planner's memory model for Megatron assumes (2% + 1 GiB over allocated)
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600  # after SIGTERM torchrun waits this long for the ranks to save a checkpoint before SIGKILL (Megatron's --exit-signal-handler, the example trainer's SIGTERM handler; torch's default is 30 s)
exec python -m torch.distributed.run \
  --nnodes "${NNODES}" \
  --nproc-per-node "${NPROC_PER_NODE}" \
  --standalone \
  --max-restarts 0 \
  --no-python "${HERE}/train.sh"
