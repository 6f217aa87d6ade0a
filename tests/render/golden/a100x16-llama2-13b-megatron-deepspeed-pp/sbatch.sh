#!/usr/bin/env bash
#SBATCH --job-name=llama-2-13b
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --signal=TERM@600
#SBATCH --output=%x-%j.out
# sbatch.sh: llama-2-13b under Slurm (llama-2-13b on 2 x 8 A100-80GB, megatron-deepspeed, plan #1: TP2 PP2 DP4 ZeRO-1 mbs2 recompute=full).
# Submit it from the directory holding these files: sbatch sbatch.sh
# The node count is written once, in --nodes above; everything below reads it from SLURM_JOB_NUM_NODES.
# 600 s before the time limit Slurm sends SIGTERM: the ranks save a checkpoint and exit (--signal above).
set -euo pipefail
HERE="${SLURM_SUBMIT_DIR:?submit this script with sbatch}"
NNODES="${SLURM_JOB_NUM_NODES}"
GPUS_PER_NODE=8
CPUS_PER_NODE="${SLURM_CPUS_ON_NODE:?run under sbatch: every CPU of the node goes to its torchrun and ranks}"
PLAN_WORLD_SIZE=16  # tp(2) * pp(2) * cp(1) * dp(4)
if (( NNODES * GPUS_PER_NODE != PLAN_WORLD_SIZE )); then
  echo "sbatch.sh: ${NNODES} nodes x ${GPUS_PER_NODE} GPUs != ${PLAN_WORLD_SIZE}, the world size this plan was made for" >&2
  exit 2
fi
mapfile -t NODES < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")
MASTER_ADDR="${NODES[0]}"
MASTER_PORT=29500
RDZV_ENDPOINT="${MASTER_ADDR}:${MASTER_PORT}"
# shellcheck source=nccl_env.sh
source "${HERE}/nccl_env.sh"
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600  # after SIGTERM torchrun waits this long for the ranks to save a checkpoint before SIGKILL (Megatron's --exit-signal-handler, the example trainer's SIGTERM handler; torch's default is 30 s)
cd /opt/Megatron-DeepSpeed
exec srun --nodes "${NNODES}" --ntasks-per-node 1 --cpus-per-task "${CPUS_PER_NODE}" --cpu-bind=none --kill-on-bad-exit=1 \
  python -m torch.distributed.run \
  --nnodes "${NNODES}" \
  --nproc-per-node "${GPUS_PER_NODE}" \
  --rdzv-backend c10d \
  --rdzv-endpoint "${RDZV_ENDPOINT}" \
  --rdzv-id "${SLURM_JOB_ID}" \
  --max-restarts 0 \
  --no-python "${HERE}/train.sh"
