#!/usr/bin/env bash
# train.sh: one training process of mixtral-8x7b (mixtral-8x7b on 4 x 8 H100-SXM, megatron, plan #1: TP2 PP4 DP4 EP4 dist-opt SP mbs1).
# torchrun.sh, sbatch.sh, deepspeed.sh and the PyTorchJob start it once per GPU; it reads megatron_args.txt
# and nccl_env.sh from its own directory and passes any extra arguments on to the training script.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=nccl_env.sh
source "${HERE}/nccl_env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS=1  # tp(2) > 1: Megatron asserts one CUDA connection before Blackwell, so that its TP/CP communication kernels are scheduled in issue order
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # the caching allocator maps what it needs instead of fixed blocks: next to no fragmentation, as NVIDIA's Megatron-Bridge memory guide advises and the planner's memory model for Megatron assumes (2% + 1 GiB over allocated)
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600  # after SIGTERM torchrun waits this long for the ranks to save a checkpoint before SIGKILL (Megatron's --exit-signal-handler, the example trainer's SIGTERM handler; torch's default is 30 s)
ARGS=()
while read -r -a words; do
  if [[ -z "${words[*]:-}" || "${words[0]}" == \#* ]]; then
    continue
  fi
  ARGS+=("${words[@]}")
done < "${HERE}/megatron_args.txt"
exec python pretrain_gpt.py "${ARGS[@]}" "$@"
