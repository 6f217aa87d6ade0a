#!/usr/bin/env bash
#SBATCH --job-name=llama-2-7b
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --signal=TERM@600
#SBATCH --output=%x-%j.out
# sbatch.sh: llama-2-7b under Slurm (llama-2-7b on 1 x 8 A100-80GB, megatron, plan #1: TP2 PP1 DP4 dist-opt SP mbs2 recompute=selective).
# Submit it from the directory holding these files: sbatch sbatch.sh. No render.workdir was given, so
# pretrain_gpt.py runs relative to that directory too: put the training code there, or render with workdir.
# The node count is written once, in --nodes above; everything below reads it from SLURM_JOB_NUM_NODES.
# 600 s before the time limit Slurm sends SIGTERM: the ranks save a checkpoint and exit (--signal above).
set -euo pipefail
HERE="${SLURM_SUBMIT_DIR:?submit this script with sbatch}"
NNODES="${SLURM_JOB_NUM_NODES}"
GPUS_PER_NODE=8
CPUS_PER_NODE="${SLURM_CPUS_ON_NODE:?run under sbatch: every CPU of the node goes to its torchrun and ranks}"
PLAN_WORLD_SIZE=8  # tp(2) * pp(1) * cp(1) * dp(4)
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
export CUDA_DEVICE_MAX_CONNECTIONS=1  # tp(2) > 1: Megatron asserts one CUDA connection before Blackwell, so that its TP/CP communication kernels are scheduled in issue order
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # the caching allocator maps what it needs instead of fixed blocks: next to no fragmentation, as NVIDIA's Megatron-Bridge memory guide advises and the planner's memory model for Megatron assumes (2% + 1 GiB over allocated)
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600  # after SIGTERM torchrun waits this long for the ranks to save a checkpoint before SIGKILL (Megatron's --exit-signal-handler, the example trainer's SIGTERM handler; torch's default is 30 s)
exec srun --nodes "${NNODES}" --ntasks-per-node 1 --cpus-per-task "${CPUS_PER_NODE}" --cpu-bind=none --kill-on-bad-exit=1 \
  python -m torch.distributed.run \
  --nnodes "${NNODES}" \
  --nproc-per-node "${GPUS_PER_NODE}" \
  --rdzv-backend c10d \
  --rdzv-endpoint "${RDZV_ENDPOINT}" \
  --rdzv-id "${SLURM_JOB_ID}" \
  --max-restarts 0 \
  --no-python "${HERE}/train.sh"
