#!/usr/bin/env bash
# train.sh: one training process of llama-2-13b (llama-2-13b on 2 x 8 A100-80GB, megatron-deepspeed, plan #1: TP2 PP2 DP4 ZeRO-1 mbs2 recompute=full).
# torchrun.sh, sbatch.sh, deepspeed.sh and the PyTorchJob start it once per GPU; it reads megatron_args.txt
# and nccl_env.sh from its own directory and passes any extra arguments on to the training script.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=nccl_env.sh
source "${HERE}/nccl_env.sh"
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600  # after SIGTERM torchrun waits this long for the ranks to save a checkpoint before SIGKILL (Megatron's --exit-signal-handler, the example trainer's SIGTERM handler; torch's default is 30 s)
ARGS=()
while read -r -a words; do
  if [[ -z "${words[*]:-}" || "${words[0]}" == \#* ]]; then
    continue
  fi
  ARGS+=("${words[@]}")
done < "${HERE}/megatron_args.txt"
cd /opt/Megatron-DeepSpeed
exec python pretrain_gpt.py "${ARGS[@]}" --deepspeed_config "${HERE}/ds_config.json" "$@"
