#!/usr/bin/env bash
# deepspeed.sh: start llama-2-13b with DeepSpeed's launcher (llama-2-13b on 2 x 8 A100-80GB, megatron-deepspeed, plan #1: TP2 PP2 DP4 ZeRO-1 mbs2 recompute=full).
# Run it once, on node 0: the launcher reads the hostfile next to this script and starts all 2 nodes
# over pdsh/ssh (passwordless ssh from node 0 to every node is required).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MASTER_ADDR=dgx1
# shellcheck source=nccl_env.sh
source "${HERE}/nccl_env.sh"
# DeepSpeed's runner passes only NCCL*, PYTHON*, MV2*, UCX* and MLFLOW* variables on to the other nodes; the others
# set above reach them through the file DS_ENV_FILE names, one KEY=VALUE per line (deepspeed/launcher/runner.py)
export DS_ENV_FILE="${HERE}/.deepspeed_env"
printf '%s\n' "GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME}" > "${DS_ENV_FILE}"
cd /opt/Megatron-DeepSpeed
exec python -m deepspeed.launcher.runner \
  --hostfile "${HERE}/hostfile" \
  --num_nodes 2 \
  --num_gpus 8 \
  --master_addr "${MASTER_ADDR}" \
  --master_port 29500 \
  --no_local_rank \
  --no_python "${HERE}/train.sh"
