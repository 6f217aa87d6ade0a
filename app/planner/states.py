"""Model states per GPU: weights, gradients, optimizer states and the buffers each stack allocates for them.

Per parameter (16-bit training, Adam), by the stack's sharding engine:
- Megatron-LM (`docs/user-guide/features/dist_optimizer.md`; param_and_grad_buffer.py): 16-bit params and a main-grad
  buffer of fp32 (4 B, Megatron's default under bf16) or bf16 (`--grad-reduce-in-bf16`, 2 B), never sharded; fp32
  master + Adam m, v = 12 B, sharded over DP x CP by the distributed optimizer. FP8 (Transformer Engine) adds the
  cached FP8 weight and its transpose (2 B) to the 16-bit weight, or with FP8 primary weights (`--fp8-param-gather`)
  replaces the 16-bit weight by them (1 + 1 B).
- DeepSpeed ZeRO (`stage_1_and_2.py`, `stage3.py`): stage 1/2 keep 16-bit params; stage 1 lets autograd create full
  16-bit grads during backward (`param.grad`), stage 2 reduces them into a partition buffer (2/N); fp32 master, m,
  v 12/N. At the step, stage 1/2 flatten the 16-bit grad partition and upcast it to an fp32 partition
  (`single_partition_of_fp32_groups[i].grad`, L940), then free the 16-bit grads. Stage 3 shards the 16-bit params
  too and keeps a persistent grad-partition buffer (`grad_partitions_flat_buffer`, L791 — on the CPU under optimizer
  offload, L333) and, under optimizer offload, the fp32 gradient partition on the host beside the
  offloaded 12 B (stage 1/2 as well: 16 B per sharded parameter on the host, plus 2 B with gradient accumulation at
  stage 1/2) and builds fp32 grads per `sub_group_size` sub-group at the step (`_prepare_fp32_grad_for_sub_group`,
  L2683), plus the gathered parameters of the modules being computed (prefetch bucket + the live module).
  Megatron-DeepSpeed with fp32 grad accumulation under bf16 uses `BF16_Optimizer`: a full fp32 grad buffer (4 B).
- PyTorch FSDP FULL_SHARD (llm-foundry): fp32 flat params, fp32 grads and Adam states all sharded (16/N); the unsharded
  16-bit parameters of the unit being computed and of the one prefetched, and the unit's unsharded gradients.
- The torch (foreach) AdamW of the DeepSpeed-HF and FSDP stacks allocates an fp32 temporary per element of its shard
  at the step (`_foreach_sqrt` of exp_avg_sq); fused Adam does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner import params as pc
from app.planner.layout import StageShape, num_microbatches
from app.planner.specs import ModelSpec, ParallelConfig, TrainingSpec

FP8_AMAX_HISTORY = 1024  # --fp8-amax-history-len as rendered (delayed scaling only)
ZERO3_SUB_GROUP_SIZE = 1_000_000_000  # DeepSpeed's default sub_group_size (zero/config.py)
ZERO3_NVME_SUB_GROUP_SIZE = 100_000_000  # rendered with NVMe offload: the swap buffers are sub-group sized
FSDP_UNITS_LIVE = 2  # the unit being computed and the one prefetched (forward_prefetch / backward_prefetch)


@dataclass(frozen=True, slots=True)
class ZeroBuckets:
    """DeepSpeed bucket sizes in elements; the renderer writes exactly these into ds_config.json."""

    reduce_bucket_size: int
    allgather_bucket_size: int
    prefetch_bucket_size: int
    param_persistence_threshold: int
    max_live_parameters: int
    sub_group_size: int = ZERO3_SUB_GROUP_SIZE


def zero_buckets(model: ModelSpec, zero_stage: int, nvme: bool = False) -> ZeroBuckets:
    """Stage 3: Hugging Face's `auto` rule (reduce = h², prefetch = 0.9·h², persistence = 10·h), which scales
    with the layer size, and a 1e8 sub-group with NVMe offload; stages 1-2: 2e8 elements, as in DeepSpeed's ZeRO
    tutorial configs."""
    h = model.hidden_size
    if zero_stage == 3:
        sub = ZERO3_NVME_SUB_GROUP_SIZE if nvme else ZERO3_SUB_GROUP_SIZE
        return ZeroBuckets(h * h, h * h, int(0.9 * h * h), 10 * h, 1_000_000_000, sub)
    return ZeroBuckets(200_000_000, 200_000_000, 0, 0, 0)


def zero_overlap_comm(zero_stage: int) -> bool:
    """DeepSpeed's `overlap_comm` as rendered: on for ZeRO-2/3 (DeepSpeed's own default turns it on for stage 3),
    off for stage 1, where it would double the IPG buckets for little gain. The memory model counts its buckets."""
    return zero_stage >= 2


def reduce_dtype(training: TrainingSpec, par: ParallelConfig) -> str:
    """The plan's gradient buffer / reduction dtype, else the training's (else the stack's default)."""
    return par.grad_reduce_dtype or training.reduce_dtype


def deepspeed_uses_bf16_optimizer(training: TrainingSpec, par: ParallelConfig) -> bool:
    """Megatron-DeepSpeed runs with fp32 gradient accumulation (`data_types.grad_accum_dtype = fp32`), which
    with ZeRO-1 and bf16 selects DeepSpeed's BF16_Optimizer (engine.py `_do_optimizer_sanity_check`) unless the
    optimizer is offloaded to the CPU: then the ZeRO optimizer runs it (`... and not self.zero_cpu_offload()`)."""
    return (
        training.software.can.sharding == ("zero",)
        and reduce_dtype(training, par) == "fp32"
        and par.zero_stage <= 1
        and training.precision != "fp16"
        and par.offload_optimizer == "none"
    )


def fused_fc1(training: TrainingSpec) -> bool:
    """Whether the stack's model holds SwiGLU's gate and up projections in one linear (Megatron's fc1), not two (an
    eager Hugging Face model's LlamaMLP): the largest module ZeRO-3 gathers whole."""
    return training.software.costs.activation_layout == "megatron"


def compact_grad_partition(training: TrainingSpec, par: ParallelConfig) -> bool:
    """ZeRO-1/2 accumulating 16-bit gradients in fp32 (Megatron-DeepSpeed's grad_accum_dtype fp32) gathers each
    partition's gradients in one fp32 buffer on the GPU instead of a 16-bit one (stage_1_and_2.py
    `_use_compact_grad_partition_buffer`, `_build_compact_grad_partition_buffer`; under offload too)."""
    return par.zero_stage in (1, 2) and reduce_dtype(training, par) == "fp32" and training.precision != "fp32"


def accumulates_on_host(training: TrainingSpec, par: ParallelConfig) -> bool:
    """ZeRO-1/2 with the optimizer offloaded and more than one micro-batch (and no fp32 partition buffer): each
    partition parameter's 16-bit gradient is kept between micro-batches in a host buffer
    (`accumulated_grads_in_cpu`), brought back to the GPU, added to and copied out again
    (stage_1_and_2.py `copy_grads_in_partition` -> `async_accumulate_grad_in_cpu_via_gpu`)."""
    return (
        par.zero_stage in (1, 2)
        and par.offload_optimizer != "none"
        and not compact_grad_partition(training, par)
        and num_microbatches(training, par) > 1
    )


def optimizer_shards(par: ParallelConfig, training: TrainingSpec) -> tuple[int, int]:
    """Ranks sharing (dense, expert) optimizer states: Megatron shards over DP x CP and, for experts, over
    the expert-data-parallel group `tp*cp*dp / (etp*ep)`; DeepSpeed's ZeRO and FSDP over their data-parallel group."""
    if "distributed_optimizer" in training.software.can.sharding:
        dense = par.dp * par.cp
        return dense, max(1, par.tp * par.cp * par.dp // (par.expert_tp * par.ep))
    return par.dp, par.dp


@dataclass(frozen=True, slots=True)
class StageParams:
    dense: int
    expert: int
    largest_module: int  # for ZeRO-3's gathered working set
    largest_unit: int  # for FSDP: a wrapped transformer block, or the embedding

    @property
    def total(self) -> int:
        return self.dense + self.expert


def stage_params(
    model: ModelSpec, par: ParallelConfig, shape: StageShape, dense: int, moe: int, fused_fc1: bool = True
) -> StageParams:
    """A stage's parameters on one GPU. `largest_module` is the biggest module ZeRO-3 gathers whole: Megatron's
    fc1 holds SwiGLU's gate and up projections in one linear; a Hugging Face model (`fused_fc1` False) has them as
    two (LlamaMLP gate_proj, up_proj), so its largest is one of them or the embedding."""
    d_shard = pc.layer_shard(model, par.tp, par.ep, par.expert_tp, moe=False)
    m_shard = pc.layer_shard(model, par.tp, par.ep, par.expert_tp, moe=True) if moe else None
    total_dense = dense * d_shard.dense + (moe * m_shard.dense if m_shard else 0)
    total_expert = moe * m_shard.expert if m_shard else 0
    if shape.embedding:
        total_dense += pc.embedding_shard(model, par.tp)
    if shape.loss:
        total_dense += pc.output_shard(model, par.tp, par.pp)
    if shape.mtp:
        total_dense += shape.mtp * pc.mtp_shard(model, par.tp)
        if not shape.embedding:  # the MTP stage keeps a copy of the word embedding, tied to the first stage's
            total_dense += -(-model.vocab_size * model.hidden_size // par.tp)  # (gpt_model.py mtp_process)
    assert model.ffn_hidden_size is not None
    fc1 = model.hidden_size * model.ffn_hidden_size * (2 if model.swiglu and fused_fc1 else 1) // par.tp
    vocab = model.vocab_size * model.hidden_size // par.tp
    layer = (m_shard or d_shard).total
    # a sparse MoE block is one ZeRO-3 leaf module: all its experts are gathered together (DeepSpeed's
    # zero_optimization.leaf_module defaults name transformers' Mixtral, Qwen2-MoE and Qwen3-MoE blocks)
    block = m_shard.expert if m_shard else 0
    return StageParams(total_dense, total_expert, max(fc1, vocab, block), max(layer, vocab))


@dataclass(frozen=True, slots=True)
class States:
    """Bytes on one GPU of one stage besides activations."""

    params: int
    weights: float
    grads: float  # gradient buffers that exist through backward
    lazy_grads: float  # gradients autograd creates during backward (freed at the step)
    optimizer: float
    buffers: float  # buckets, gathered ZeRO-3 / FSDP units, FP8 copies and amax history
    step_peak: float  # what the optimizer step adds on top of weights + grads + optimizer + buffers
    cpu: float
    nvme: float
    # lazy_grads stay from the first micro-batch's backward to the step (DeepSpeed ZeRO-1's param.grad, ZeRO-2's
    # partition buffer), so later micro-batches' activations add to them; else they are one module's, in passing
    grads_persist: bool = False


def _megatron_states(model: ModelSpec, training: TrainingSpec, par: ParallelConfig, sp: StageParams) -> States:
    """Megatron's DDP buffers and distributed optimizer, or Megatron-FSDP (megatron_fsdp/param_and_grad_buffer.py):
    `optim` shards the fp32 main weights and Adam states (as the distributed optimizer), `optim_grads` also the main
    grads (each FSDP unit's unsharded grads live in a double buffer until their reduce-scatter), `optim_grads_params`
    also the compute weights (each unit is all-gathered into a double buffer: the unit computed and the one
    prefetched)."""
    dense_n, expert_n = optimizer_shards(par, training)
    n = sp.total
    shard = sp.dense / dense_n + sp.expert / expert_n if par.distributed_optimizer else float(n)
    weight_b = 2.0
    if training.precision == "fp8":
        weight_b = 2.0 if par.fp8_param_gather else 4.0  # FP8 weight + transpose (+ the 16-bit weight)
    grad_b = 2.0 if training.precision == "fp16" or reduce_dtype(training, par) == "bf16" else 4.0
    weights, grads, buffers = weight_b * n, grad_b * n, 0.0
    fsdp = par.megatron_fsdp
    if fsdp in ("optim_grads", "optim_grads_params"):
        grads = grad_b * shard + 2 * grad_b * sp.largest_unit
    if fsdp == "optim_grads_params":
        # Megatron-FSDP keeps FP8 primary weights as raw uint8 and builds a transpose buffer only for MXFP8; a
        # tensorwise/blockwise FP8 unit's transpose is made for its backward and discarded (keep_fp8_transpose_cache
        # False by default; megatron_fsdp/param_and_grad_buffer.py _init_each_parameter_group_buffers)
        raw = par.fp8_param_gather and par.fp8_recipe != "mxfp8"
        unit_b = 1.0 if raw else weight_b
        weights = unit_b * shard
        buffers = FSDP_UNITS_LIVE * unit_b * sp.largest_unit + (1.0 * sp.largest_unit if raw else 0.0)
    opt = megatron_optimizer_bytes(training, par) * shard
    return States(n, weights, grads, 0.0, opt, buffers, 0.0, 0.0, 0.0)


def states_floor_bytes(model: ModelSpec, training: TrainingSpec) -> float:
    """The fewest model-state bytes a plan without offload keeps on its GPUs, all of them together, whatever its
    sharding: every parameter's weight (1 B counted for an FP8 primary weight, else 2 B), its gradient (at least a
    16-bit one) and Adam's states (`megatron_optimizer_bytes` without FP8 primary weights, its least: 6 B with bf16
    moments over a 16-bit master remainder, 12 B in fp32, 16 B under fp16; DeepSpeed and FSDP keep at least the fp32
    12 B). Fully sharded, a plan's busiest GPU holds at least this divided by its GPU count."""
    weight = 1.0 if training.precision == "fp8" else 2.0
    optimizer = megatron_optimizer_bytes(training, ParallelConfig.trusted())  # no FP8 primary weights: the least
    return model.num_parameters * (weight + 2.0 + optimizer)


def megatron_optimizer_bytes(training: TrainingSpec, par: ParallelConfig) -> float:
    """Optimizer bytes per sharded parameter: fp32 master weights and Adam's exp_avg and exp_avg_sq (4 + 4 + 4;
    fp16 training 16). Bf16 moments (precision-aware optimizer: Transformer Engine's FusedAdam with
    `exp_avg_dtype` / `exp_avg_sq_dtype` bf16) take 2 + 2, and where the model's weights are bf16 the fp32 master
    is stored as their 16-bit remainder (megatron-core OptimizerConfig.store_param_remainders, default True):
    2 + 2 + 2. FP8 primary weights leave no bf16 weight to share, so their master stays fp32."""
    total = 16.0 if training.precision == "fp16" else 12.0
    if training.optimizer_states == "bf16":
        total -= 4.0
        if training.precision == "bf16" or (training.precision == "fp8" and not par.fp8_param_gather):
            total -= 2.0
    return total


def _zero_states(model: ModelSpec, training: TrainingSpec, par: ParallelConfig, sp: StageParams) -> States:
    n_params, shard_n = sp.total, max(par.dp, 1)
    stage = par.zero_stage
    shard = n_params / shard_n
    nvme = "nvme" in (par.offload_optimizer, par.offload_param)
    buckets = zero_buckets(model, stage, nvme)
    foreach = 4.0 if training.software.costs.optimizer == "torch-adamw" else 0.0
    if deepspeed_uses_bf16_optimizer(training, par):
        # the fp32 gradients it accumulates into, and the bf16 ones autograd makes: those are zeroed, not freed,
        # between micro-batches (bf16_optimizer.py backward_prologue -> clear_lp_grads) and set to None only by the
        # zero_grad after the step, so they stay under every later micro-batch's activations
        opt = 12.0 * (shard if stage else n_params)
        return States(
            n_params, 2.0 * n_params, 4.0 * n_params, 2.0 * n_params, opt, 0.0, foreach * shard, 0.0, 0.0,
            grads_persist=True,
        )  # fmt: skip
    weights = 2.0 * (shard if stage == 3 else n_params)
    fp32 = 12.0 * (shard if stage else n_params)
    compact = compact_grad_partition(training, par)
    cpu = nvme_b = 0.0
    if par.offload_optimizer == "cpu":
        # the fp32 master, m and v on the host, and beside them the fp32 gradient partition the CPU Adam reads, kept
        # for the whole run under offload (stage_1_and_2.py initialize_optimizer_states: the partition's `.grad` is
        # dropped only without cpu_offload; stage3.py: a `subgroup_gradient_buffer` per sub-group, released by
        # `_release_sub_group` only without offload)
        cpu, fp32 = fp32 + 4.0 * shard, 0.0
        if accumulates_on_host(training, par):
            cpu += 2.0 * shard
        if stage in (1, 2):  # and a pinned 16-bit copy of the partition, the step's output before it is gathered
            cpu += 2.0 * shard  # (stage_1_and_2.py `param_buffer_of_bit16_for_cpu_offload_groups`, review 2026-12-07)
    elif par.offload_optimizer == "nvme":
        # the states and the fp32 gradients are swapped per sub-group (stage3.py
        # `_optimizer_states_and_gradient_swap_out`), through one host fp32 buffer of the largest sub-group
        # (initialize_optimizer_states `gradient_buffer`)
        nvme_b, fp32 = fp32 + 4.0 * shard, 0.0
        cpu = 4.0 * min(float(buckets.sub_group_size), shard)
    overlap = 2 if zero_overlap_comm(stage) else 1
    # the IPG reduce bucket holds the gradients in the accumulation dtype (fp32 where the ZeRO optimizer accumulates
    # in fp32: stage_1_and_2.py L1253, review 2026-12-07)
    buffers = (4.0 if compact else 2.0) * buckets.reduce_bucket_size * overlap
    offloaded = par.offload_optimizer != "none"
    if stage == 3:
        live = min(buckets.max_live_parameters, buckets.prefetch_bucket_size + sp.largest_module)
        buffers += 2.0 * live + 2.0 * sp.largest_module  # gathered 16-bit params + a module's full gradient
        if par.offload_param == "cpu":
            cpu, weights = cpu + weights, 0.0
        elif par.offload_param == "nvme":
            nvme_b, weights = nvme_b + weights, 0.0
        grads = 0.0 if offloaded else 2.0 * shard  # grad_partitions_flat_buffer, on the CPU under offload
        cpu += 2.0 * shard if offloaded else 0.0
        sub_group = min(float(buckets.sub_group_size), shard)
        # `_prepare_fp32_grad_for_sub_group`: the 16-bit gradients flattened (a copy), then cast to fp32, both alive
        # for a moment; then Adam on the fp32 gradient (stage3.py; the copy was left out, QA 2026-12-07)
        step = 0.0 if offloaded else max(6.0, 4.0 + foreach) * sub_group
        return States(n_params, weights, grads, 0.0, fp32, buffers, step, cpu, nvme_b)
    buffers += 2.0 * buckets.allgather_bucket_size if stage else 0.0
    if stage == 2:
        # the partition buffer (`grads_in_partition`, fp32 when accumulating in fp32) is built during backward and
        # released after the step. Under offload without it, none: `copy_grads_in_partition` sends each gradient to
        # the host before `grads_in_partition` is made (stage_1_and_2.py; it was counted, QA 2026-12-07). At the
        # step the 16-bit partition is flattened (a copy) and cast to fp32; the fp32 one is used as it is
        # (`_get_preflattened_grad_partition`, `.to(fp32)` of an fp32 tensor)
        # Between micro-batches the 16-bit partition is kept aside (`all_grad_tensors`) and the next backward builds
        # a new one before the two are summed (stage_1_and_2.py L1037-1045, L2179-2194): two under the activations
        # of every micro-batch but the first (review 2026-12-07, seen on CPU)
        again = 2.0 if not compact and not offloaded and num_microbatches(training, par) > 1 else 1.0
        partition = (4.0 if compact else 0.0 if offloaded else 2.0) * shard
        grads, lazy = 0.0, again * partition
        cast = 0.0 if compact else 6.0 * shard
        step = 0.0 if offloaded else max(partition + cast, (4.0 + foreach) * shard)
    else:
        # every parameter's gradient through the backward: 16-bit, or the fp32 `grad_accum` the ZeRO optimizer keeps
        # on each parameter when it accumulates in fp32 (stage_1_and_2.py L395-404, L1238-1245: 4 B each, not a
        # compact partition, review 2026-12-07, seen on CPU); at the boundary every `.grad` is dropped
        # (`_clear_param_grad_only`) and only the partition is flattened, upcast to fp32, then the Adam temporary
        grads, lazy = 0.0, (4.0 if compact else 2.0) * n_params
        partition = (4.0 if compact else 2.0) * shard
        step = 0.0 if offloaded else max(partition + (0.0 if compact else 6.0 * shard), (4.0 + foreach) * shard)
    return States(n_params, weights, grads, lazy, fp32, buffers, step, cpu, nvme_b, grads_persist=True)


def _fsdp_states(model: ModelSpec, training: TrainingSpec, par: ParallelConfig, sp: StageParams) -> States:
    """PyTorch FSDP (llm-foundry's FSDP1 FULL_SHARD, torchtitan's FSDP2 per block): fp32 master weights, gradients
    and Adam states sharded over DP x CP (torchtitan's dp_shard_cp mesh); each unit gathered in 16 bits (FP8 with
    torchao's FSDP float8 all-gather) for its forward and backward. Under torch.distributed.pipelining a stage keeps
    its units gathered from the first micro-batch to the last (torchtitan sets reshard_after_forward False with PP;
    the stage sets reshard_after_backward and requires_gradient_sync False until its last backward,
    torch/distributed/pipelining/stage.py) and accumulates unsharded gradients in the reduce dtype
    (FSDPParam.to_accumulated_grad_if_needed), reduce-scattered once per step."""
    n = max(par.dp * par.cp, 1)
    shard = sp.total / n
    # torch's foreach AdamW: a temporary per element of the shard; a per-tensor loop: one flat unit's at a time
    foreach = {"torch-adamw": 4.0 * shard, "per-tensor-adamw": 4.0 * sp.largest_unit / n}.get(
        training.software.costs.optimizer, 0.0
    )
    grad_bytes = 2.0 if reduce_dtype(training, par) == "bf16" else 4.0
    unit_b = 1.0 if training.precision == "fp8" and par.fp8_param_gather else 2.0
    if par.pp > 1:  # the whole stage gathered, its gradients accumulated unsharded
        buffers = unit_b * sp.total
        return States(
            sp.total, 4.0 * shard, 4.0 * shard + grad_bytes * sp.total, 0.0, 8.0 * shard, buffers, foreach, 0, 0
        )
    # gathered units (current + prefetched) and the unit's unsharded gradient before its reduce-scatter
    buffers = FSDP_UNITS_LIVE * unit_b * sp.largest_unit + grad_bytes * sp.largest_unit
    return States(sp.total, 4.0 * shard, 4.0 * shard, 0.0, 8.0 * shard, buffers, foreach, 0.0, 0.0)


def stage_states(
    model: ModelSpec, training: TrainingSpec, par: ParallelConfig, shape: StageShape, dense: int, moe: int
) -> States:
    """Everything on a stage but activations: the same for every micro-batch size and recomputation, so it is
    computed once per placement and sharding (cached on the model spec)."""
    key = ("states", par.state_key, dense, moe)  # the shape keys by identity (an owner: hashing it costs)
    return model.memo(key, lambda: _states(model, training, par, shape, dense, moe), training, shape)


def _states(
    model: ModelSpec, training: TrainingSpec, par: ParallelConfig, shape: StageShape, dense: int, moe: int
) -> States:
    sp = stage_params(model, par, shape, dense, moe, fused_fc1=fused_fc1(training))
    sharding = training.software.can.sharding
    if "zero" in sharding:
        return _zero_states(model, training, par, sp)
    if "fsdp" in sharding:
        return _fsdp_states(model, training, par, sp)
    states = _megatron_states(model, training, par, sp)
    if training.precision == "fp8" and par.fp8_recipe == "delayed":  # amax history of 4 GEMMs x (in, w, grad)
        states = _with(states, buffers=states.buffers + (dense + moe) * 4 * 3 * FP8_AMAX_HISTORY * 4.0)
    return states


def _with(s: States, **update: float) -> States:
    fields = {name: getattr(s, name) for name in States.__slots__}
    fields.update(update)
    return States(**fields)  # type: ignore[arg-type]
