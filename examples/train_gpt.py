"""Train the small GPT of examples/gpt_model.py with DeepSpeed (ZeRO 0-3), from Megatron-style arguments; with
`--model-impl hf`, the transformers network of the same shape instead (examples/hf_model.py: Llama, Qwen3, and the
Mixtral / Qwen3-MoE sparse blocks with `--num-experts`), what the planner's deepspeed-hf stack models.

    torchrun --nproc-per-node 2 examples/train_gpt.py --num-layers 2 --hidden-size 64 \\
        --num-attention-heads 4 --seq-length 32 --vocab-size 256 --micro-batch-size 2 \\
        --global-batch-size 8 --train-iters 10 --deepspeed_config ds_config.json --save ckpt --load ckpt

Arguments may also come from a file (`--args-file megatron_args.txt`, shell words, `#` comments); the
command line wins. Megatron arguments this trainer has no use for are ignored; tensor, pipeline and context
parallelism (> 1) are refused: this is a data-parallel + ZeRO trainer. Runs on GPUs with NCCL, on CPU with
gloo (set DS_ACCELERATOR=cpu). Rank 0 logs loss and tokens/s per step; `--metrics-dir` gets one JSON per rank
(step times, peak memory); `--save`/`--load` checkpoint so that a restarted run continues where it stopped.

Resilience: every rank writes a heartbeat file ($TRAINPLAN_RUN_DIR/heartbeats, examples/heartbeat.py) that
`python -m launcher run` watches for hangs and stragglers; SIGUSR1 dumps every thread's stack (faulthandler) to
$TRAINPLAN_RUN_DIR/stacks/rank<R>.txt; SIGTERM or SIGINT save a checkpoint after the current step and exit
(Megatron's --exit-signal-handler, on by default here; --no-exit-signal-handler turns it off). Its handler is the
script's first statement (examples/exit_signal.py): a signal during the start-up stops every rank before its first
step, exit 0, nothing trained and nothing saved (the checkpoint it would resume from stays the last). A resume restores
the step, the data position and the LR schedule (examples/checkpointing.py). The schedule takes Megatron's
--lr-decay-style (constant by default here), --lr-warmup-iters, --lr-decay-iters and --min-lr.

Activation recomputation takes Megatron's flags. `--recompute-granularity full --recompute-method uniform
--recompute-num-layers 1` keeps each layer's input and recomputes the layer in backward (torch.utils.checkpoint,
non-reentrant; `block` recomputes only the first N layers). `--recompute-granularity selective` (or
`--recompute-activations`) is accepted and does nothing: Megatron's selective recompute drops the s x s attention
scores, and the fused attention used here (F.scaled_dot_product_attention: flash / memory-efficient kernels on
CUDA, the flash kernel on CPU) never keeps them.
"""

from __future__ import annotations

# ruff: noqa: E402 (the handler below comes before the imports on purpose)
from exit_signal import ExitSignal  # standard library only

# Megatron's --exit-signal-handler, as the script's first statement: torch's import alone takes 1-2 s, and a
# SIGTERM in the imports, the process group's start or the model's construction killed the rank outright before
# (QA 2026-12-07). main() turns it off for --no-exit-signal-handler; imported as a module, this sets nothing.
EXIT_SIGNAL = ExitSignal() if __name__ == "__main__" else None

import argparse
import contextlib
import json
import os
import resource
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from gpt_model import GPT, GPTConfig, Recompute, SyntheticTokens, num_parameters
from heartbeat import Heartbeat, heartbeat_dir
from resilience import Checkpointer, dump_stacks_on_sigusr1, lr_factor, stop_before_training

PROCESS_START = time.time()


def window_size(value: str) -> tuple[int, int]:
    """Megatron-LM's --window-size: "left,right" (arguments.py tuple_type)."""
    left, right = (int(w) for w in value.strip("()").split(","))
    return left, right


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    a = p.add_argument
    a("--args-file", default=None, help="Megatron-style arguments, shell words (command line wins)")
    for name in ("num-layers", "hidden-size", "num-attention-heads", "seq-length", "vocab-size"):
        a(f"--{name}", type=int, required=False)
    a("--num-query-groups", type=int, default=None)
    a("--kv-channels", type=int, default=None)
    a("--ffn-hidden-size", type=int, default=None)
    a(
        "--model-impl",
        choices=("gpt", "hf"),
        default="gpt",
        help="gpt: examples/gpt_model.py; hf: the transformers network (examples/hf_model.py), MoE included",
    )
    a("--qk-layernorm", action="store_true")
    a("--num-experts", type=int, default=None)
    a("--moe-router-topk", type=int, default=2)
    a("--moe-ffn-hidden-size", type=int, default=None)
    a("--max-position-embeddings", type=int, default=None)
    a("--swiglu", action="store_true")
    a("--normalization", choices=("LayerNorm", "RMSNorm"), default="RMSNorm")
    a("--position-embedding-type", choices=("learned_absolute", "rope"), default="rope")
    a("--untie-embeddings-and-output-weights", action="store_true")
    a("--window-size", type=window_size, default=None, help='sliding window "left,right" (Megatron-LM\'s tuple_type)')
    a("--window-attn-skip-freq", type=int, default=None)
    a("--micro-batch-size", type=int, default=1)
    a("--global-batch-size", type=int, default=None)
    a("--train-iters", type=int, default=10)
    a("--lr", type=float, default=3e-3)
    a("--min-lr", type=float, default=0.0)
    a("--lr-decay-style", choices=("constant", "linear", "cosine"), default="constant")
    a("--lr-warmup-iters", type=int, default=0)
    a("--lr-decay-iters", type=int, default=None, help="default: --train-iters")
    a("--weight-decay", type=float, default=0.01)
    a("--seed", type=int, default=1234)
    a("--save", default=None)
    a("--load", default=None)
    a("--save-interval", type=int, default=0)
    a("--log-interval", type=int, default=1)
    a("--deepspeed_config", "--deepspeed-config", dest="deepspeed_config", default=None)
    a("--zero-stage", type=int, default=None, help="used when no DeepSpeed config is given")
    a("--bf16", action="store_true")
    a("--tensor-model-parallel-size", type=int, default=1)
    a("--pipeline-model-parallel-size", type=int, default=1)
    a("--context-parallel-size", type=int, default=1)
    a("--recompute-granularity", choices=("full", "selective"), default=None)
    a("--recompute-method", choices=("uniform", "block"), default=None)
    a("--recompute-num-layers", type=int, default=None)
    a("--recompute-activations", action="store_true", help="Megatron's alias for --recompute-granularity selective")
    a("--metrics-dir", default=None, help="write rank<R>.json with per-step times and peak memory here")
    a("--throttle-s", type=float, default=0.0, help="sleep after each step (fault-injection tests)")
    a("--inject-slow-rank", type=int, default=None, help="this rank sleeps --inject-slow-s in each step's compute")
    a("--inject-slow-s", type=float, default=0.0)
    a("--inject-slow-skip", type=int, default=0, help="the first N steps of each (re)start run at full speed")
    a("--inject-teardown-abort", type=int, default=None, help="this rank aborts (SIGABRT) after reporting done")
    a(
        "--exit-signal-handler",
        dest="exit_signal_handler",
        action="store_true",
        default=True,
        help="save and exit after the step on SIGTERM/SIGINT (Megatron's flag; on by default here)",
    )
    a("--no-exit-signal-handler", dest="exit_signal_handler", action="store_false")
    a("--heartbeat-dir", default=heartbeat_dir(), help="default: $TRAINPLAN_RUN_DIR/heartbeats")
    a("--local_rank", "--local-rank", dest="local_rank", type=int, default=None)
    first, _ = p.parse_known_args(argv)
    file_args = shlex.split(Path(first.args_file).read_text(), comments=True) if first.args_file else []
    args, ignored = p.parse_known_args(file_args + argv)
    args.ignored = ignored
    missing = [
        n
        for n in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "vocab_size")
        if getattr(args, n) is None
    ]
    if missing:
        p.error("missing model arguments: " + ", ".join("--" + m.replace("_", "-") for m in missing))
    for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
        if getattr(args, name) != 1:
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)}: this example trains data parallel + ZeRO only")
    try:
        args.recompute = recompute_from_args(args)
    except ValueError as exc:
        p.error(str(exc))
    if args.model_impl == "hf":
        from hf_model import HFShape, unsupported

        shape = model_config(args)
        assert isinstance(shape, HFShape)
        problems = unsupported(shape, args.recompute.num_layers if args.recompute else None)
        if problems:
            p.error("--model-impl hf: " + "; ".join(problems))
    elif args.num_experts or args.qk_layernorm:
        p.error("--num-experts and --qk-layernorm are built by --model-impl hf (examples/gpt_model.py is dense)")
    return args


def model_config(args: argparse.Namespace) -> GPTConfig:
    """The network's shape: the example GPT's, or with `--model-impl hf` the transformers network's (HFShape, which
    adds the head size, q/k norms and the experts)."""
    shape: dict[str, Any] = dict(
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        num_attention_heads=args.num_attention_heads,
        vocab_size=args.vocab_size,
        seq_length=args.seq_length,
        num_query_groups=args.num_query_groups,
        ffn_hidden_size=args.ffn_hidden_size,
        swiglu=args.swiglu,
        normalization=args.normalization,
        position_embedding_type=args.position_embedding_type,
        untie_embeddings_and_output_weights=args.untie_embeddings_and_output_weights,
        window_size=args.window_size,
        window_attn_skip_freq=args.window_attn_skip_freq,
    )
    if args.model_impl != "hf":
        return GPTConfig(**shape)
    from hf_model import HFShape

    return HFShape(
        **shape,
        kv_channels=args.kv_channels,
        qk_layernorm=args.qk_layernorm,
        num_experts=args.num_experts,
        moe_router_topk=args.moe_router_topk,
        moe_ffn_hidden_size=args.moe_ffn_hidden_size,
        max_position_embeddings=args.max_position_embeddings,
    )


def recompute_from_args(args: argparse.Namespace) -> Recompute | None:
    """Megatron's rules (megatron-core TransformerConfig): full needs a method and a layer count, selective
    takes neither. Selective returns None: the fused attention keeps no s x s scores to drop."""
    granularity = args.recompute_granularity or ("selective" if args.recompute_activations else None)
    method, layers = args.recompute_method, args.recompute_num_layers
    if granularity == "full":
        if method is None or layers is None:
            raise ValueError(
                "--recompute-granularity full needs --recompute-method (uniform or block) and --recompute-num-layers"
            )
        return Recompute(method, layers)
    if method is not None or layers is not None:
        raise ValueError(
            f"--recompute-method/--recompute-num-layers go with --recompute-granularity full, "
            f"not {granularity or 'none'}"
        )
    return None


def describe_recompute(args: argparse.Namespace) -> str:
    if args.recompute:
        return f"full ({args.recompute.method}, {args.recompute.num_layers} layer(s) per segment)"
    if args.recompute_granularity == "selective" or args.recompute_activations:
        return "selective (a no-op: fused attention keeps no s x s scores)"
    return "none"


def ds_config(args: argparse.Namespace, world: int, on_cuda: bool) -> dict[str, Any]:
    """The rendered DeepSpeed JSON, with batch sizes filled from the arguments where it leaves them out."""
    cfg: dict[str, Any] = json.loads(Path(args.deepspeed_config).read_text()) if args.deepspeed_config else {}
    if not cfg:
        cfg = {"zero_optimization": {"stage": args.zero_stage or 0}, "bf16": {"enabled": args.bf16}}
    gbs = args.global_batch_size or args.micro_batch_size * world
    cfg.setdefault("train_micro_batch_size_per_gpu", args.micro_batch_size)
    cfg.setdefault("train_batch_size", gbs)
    cfg.setdefault("gradient_accumulation_steps", gbs // (args.micro_batch_size * world))
    cfg.setdefault("steps_per_print", 10**9)
    cfg.setdefault("zero_allow_untested_optimizer", True)
    offload = cfg.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
    if offload not in (None, "none"):
        cfg.setdefault("zero_force_ds_cpu_optimizer", False)  # we pass torch's AdamW, not DeepSpeedCPUAdam
    if not on_cuda and cfg.get("fp16", {}).get("enabled"):
        raise SystemExit("train_gpt: fp16 does not run on CPU; use bf16 or fp32 in the DeepSpeed config")
    # Recomputation is torch.utils.checkpoint driven by the --recompute-* flags; DeepSpeed's activation
    # checkpointing block is only read by deepspeed.checkpointing, which this trainer does not use.
    ac = cfg.pop("activation_checkpointing", {})
    unsupported = [
        k for k in ("partition_activations", "cpu_checkpointing", "contiguous_memory_optimization") if ac.get(k)
    ]
    if unsupported:
        raise SystemExit(
            f"train_gpt: activation_checkpointing {', '.join(unsupported)} is not supported; "
            f"recompute with --recompute-granularity full instead"
        )
    return cfg


def optimizer_for(
    model: torch.nn.Module,
    cfg: dict[str, Any],
    args: argparse.Namespace,
    on_cuda: bool,
) -> torch.optim.Optimizer:
    """torch's AdamW (no JIT-compiled op); hyper-parameters from the config's optimizer block when present.

    With the states on the GPU it is the fused kernel: it updates in place, as DeepSpeed's FusedAdam does, where
    the default multi-tensor path would allocate temporaries the size of a whole (flat ZeRO) parameter group,
    memory the planner does not count. With the states offloaded to the CPU it is the default CPU path, the one
    `launcher probe` measures as cpu_adam."""
    params = cfg.pop("optimizer", {}).get("params", {})
    offload = cfg.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
    return torch.optim.AdamW(
        model.parameters(),
        lr=params.get("lr", args.lr),
        betas=tuple(params.get("betas", (0.9, 0.95))),
        eps=params.get("eps", 1e-8),
        weight_decay=params.get("weight_decay", args.weight_decay),
        fused=True if on_cuda and offload in (None, "none") else None,
    )


def init_process_group(backend: str) -> None:
    """Under torchrun, key this attempt's rendezvous by TORCHELASTIC_RESTART_COUNT.

    The agent's store outlives a restart, so the groups DeepSpeed creates (dist.new_group) could read the
    addresses the previous attempt's ranks published and fail with "Connection refused"
    (pytorch/pytorch#167288). A per-attempt prefix keeps each attempt's keys apart.
    """
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return  # deepspeed.init_distributed does the usual env:// initialisation
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(
        backend, store=dist.PrefixStore(f"trainplan/attempt_{attempt}", store), rank=rank, world_size=world
    )


def init_distributed() -> torch.device:
    """The process group (NCCL on GPUs, gloo on CPU); the device this rank trains on."""
    import deepspeed

    on_cuda = torch.cuda.is_available() and os.environ.get("DS_ACCELERATOR", "cuda") != "cpu"
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # no JIT build of the shm op on CPU
    init_process_group("nccl" if on_cuda else "gloo")
    deepspeed.init_distributed(dist_backend="nccl" if on_cuda else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if on_cuda else torch.device("cpu")
    if on_cuda:
        torch.cuda.set_device(device)
    return device


def init_engine(args: argparse.Namespace, device: torch.device) -> tuple[Any, dict[str, Any]]:
    import deepspeed

    on_cuda = device.type == "cuda"
    torch.manual_seed(args.seed)
    cfg_model = model_config(args)
    with device:  # initialised where it trains: a 7B model is built in seconds on a GPU, in minutes on the CPU
        if args.model_impl == "hf":
            from hf_model import HFCausalLM, HFShape

            assert isinstance(cfg_model, HFShape)
            model = HFCausalLM(cfg_model, recompute=args.recompute is not None)
        else:
            model = GPT(cfg_model, args.recompute)
    config = ds_config(args, int(os.environ.get("WORLD_SIZE", 1)), on_cuda)
    optimizer = optimizer_for(model, config, args, on_cuda)
    # The ds_config's scheduler block, if any, is DeepSpeed's; otherwise Megatron's schedule. Either way the engine
    # saves the scheduler's state with the checkpoint and loads it back.
    scheduler = (
        None
        if "scheduler" in config
        else torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(args, step))
    )
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config, lr_scheduler=scheduler)
    return engine, config


def log(message: str) -> None:
    if int(os.environ.get("RANK", 0)) == 0:
        with contextlib.suppress(OSError):  # a full log disk must not stop training
            print(f"[train_gpt] {message}", flush=True)


def train_step(
    engine: Any, data: SyntheticTokens, step: int, gas: int, device: torch.device, slow_s: float, stop: bool
) -> tuple[float, bool, float]:
    """One optimizer step: (mean loss over ranks, whether any rank asked to stop, this rank's compute seconds);
    `slow_s`: seconds this rank sleeps in each micro-batch's compute (fault injection).

    Compute time is the forward passes' (no collective runs in forward under ZeRO 0-2), the figure the launcher
    compares across ranks to find a straggler. The stop flag travels with the loss: no extra collective."""
    import torch.distributed as dist

    mbs, dp_rank = engine.train_micro_batch_size_per_gpu(), dist.get_rank()
    total, compute = 0.0, 0.0
    for micro in range(gas):
        tokens, labels = data.batch(step, micro, dp_rank, mbs)
        t0 = time.perf_counter()
        if slow_s:
            time.sleep(slow_s)
        loss = engine(tokens.to(device), labels.to(device))
        compute += time.perf_counter() - t0
        engine.backward(loss)
        engine.step()
        total += loss.detach().float()
    reduced = torch.stack([torch.as_tensor(total / gas, dtype=torch.float32), torch.tensor(1.0 if stop else 0.0)]).to(
        device
    )
    dist.all_reduce(reduced)
    return float(reduced[0].item()) / dist.get_world_size(), bool(reduced[1].item() > 0), compute


def peak_memory(device: torch.device) -> tuple[int, str, int | None]:
    """(peak bytes, what was measured, peak reserved bytes): the caching allocator's peak allocated and reserved
    on CUDA (since the reset before the first step); on CPU the process's max RSS and no reserved figure."""
    if device.type == "cuda":
        return (
            torch.cuda.max_memory_allocated(device),
            "cuda_max_memory_allocated",
            torch.cuda.max_memory_reserved(device),
        )
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_max_rss", None


def current_lr(engine: Any) -> float:
    return float(engine.optimizer.param_groups[0]["lr"])


def stopped_before_training(
    args: argparse.Namespace, device: torch.device, exit_signal: ExitSignal, start: int | None
) -> dict[str, Any]:
    """Every rank stops before its first step: a rank received a termination signal during the start-up. No step was
    trained, so none is saved, and the checkpoint the run would have resumed from (`start`, None: not loaded yet)
    stays the last one."""
    latest = Path(args.load, "latest") if args.load else None
    if start:
        resumes = f"the next run resumes from step {start} again"
    elif start is None and latest is not None and latest.exists():
        resumes = f"the next run resumes from the checkpoint {latest} names, as this one would have"
    else:
        resumes = "no checkpoint exists yet: the next run starts from step 0"
    own = f" (this one: {exit_signal.name})" if exit_signal.received else ""
    log(
        f"stopping before training: a rank received a termination signal during start-up{own}; no step was "
        f"trained, so nothing is saved and nothing is lost; {resumes}"
    )
    memory, kind, reserved = peak_memory(device)
    return {
        "resumed_from": start or 0,
        "stopped_after": start or 0,
        "tokens_per_step": None,
        "steps": [],
        "peak_memory_bytes": memory,
        "memory_kind": kind,
        "peak_reserved_bytes": reserved,
        "recompute": describe_recompute(args),
        "device": str(device),
    }


def train(args: argparse.Namespace, heartbeat: Heartbeat, exit_signal: ExitSignal) -> dict[str, Any]:
    import torch.distributed as dist

    device = init_distributed()
    # A signal in the imports or the process group's start: every rank agrees now, before building the model
    if stop_before_training(exit_signal):
        return stopped_before_training(args, device, exit_signal, None)
    engine, config = init_engine(args, device)
    gas, gbs = config["gradient_accumulation_steps"], config["train_batch_size"]
    data = SyntheticTokens(args.vocab_size, args.seq_length, args.seed)
    stream = {"seed": args.seed, "global_batch_size": gbs, "seq_length": args.seq_length, "vocab_size": args.vocab_size}
    ckpt = Checkpointer(engine, args.save, args.load, stream, heartbeat, num_parameters(engine.module), log)
    start = ckpt.resume()
    if stop_before_training(exit_signal):  # one in the model's construction, DeepSpeed's set-up or the resume
        return stopped_before_training(args, device, exit_signal, start)
    log(
        f"{num_parameters(engine.module):,} parameters, ZeRO stage {engine.zero_optimization_stage()}, "
        f"batch {gbs} x {args.seq_length} tokens, recompute {describe_recompute(args)}, "
        f"steps {start}..{args.train_iters}"
    )
    if device.type == "cuda":  # the peaks of the training steps, without what initialisation left cached
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    steps, stopped = [], None
    for step in range(start, args.train_iters):
        t0, cpu0 = time.perf_counter(), time.process_time()
        lr = current_lr(engine)
        slow = args.inject_slow_rank == dist.get_rank() and step - start >= args.inject_slow_skip
        slow_s = args.inject_slow_s if slow else 0.0
        loss, stop, compute_s = train_step(engine, data, step, gas, device, slow_s, exit_signal.received is not None)
        step_s, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        steps.append(
            {
                "step": step + 1,
                "loss": loss,
                "lr": lr,
                "step_s": step_s,
                "compute_s": compute_s,
                "cpu_s": cpu_s,
                "time": time.time(),
            }
        )
        heartbeat.beat(phase="train", step=step + 1, step_s=step_s, compute_s=compute_s)
        if (step + 1) % args.log_interval == 0 or step + 1 == args.train_iters or stop:
            log(
                f"step {step + 1}/{args.train_iters} loss {loss:.4f} lr {lr:.4e} "
                f"tokens/s {gbs * args.seq_length / step_s:.0f} step_s {step_s:.4f}"
            )
        if stop or (args.save_interval and (step + 1) % args.save_interval == 0):
            ckpt.save(step + 1)
        if stop:
            stopped = step + 1
            log(f"stopping after step {stopped}: a rank received a termination signal (exit-signal-handler)")
            break
        if args.throttle_s:
            time.sleep(args.throttle_s)
    if steps and stopped is None:  # the last step is saved as Megatron-LM saves it (training.py, after the loop)
        ckpt.save(steps[-1]["step"])
    memory, kind, reserved = peak_memory(device)
    return {
        "resumed_from": start,
        "stopped_after": stopped,
        "tokens_per_step": gbs * args.seq_length,
        "steps": steps,
        "peak_memory_bytes": memory,
        "memory_kind": kind,
        "peak_reserved_bytes": reserved,
        "recompute": describe_recompute(args),
        "device": str(device),
    }


def write_metrics(args: argparse.Namespace, result: dict[str, Any], rank: int) -> None:
    times = [s["step_s"] for s in result["steps"]]
    result.update(
        rank=rank,
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        process_start=PROCESS_START,
        median_step_s=statistics.median(times) if times else None,
        ignored_args=args.ignored,
    )
    try:
        Path(args.metrics_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.metrics_dir) / f"rank{rank}.json").write_text(json.dumps(result, indent=1) + "\n")
    except OSError as exc:
        log(f"metrics not written to {args.metrics_dir}: {exc}")


def main(argv: list[str], exit_signal: ExitSignal | None = None) -> int:
    exit_signal = exit_signal or ExitSignal()
    args = parse_args(argv)
    if not args.exit_signal_handler:
        exit_signal.disable()  # a signal that came already ends the process now, as without the handler
    rank = int(os.environ.get("RANK", 0))
    heartbeat = Heartbeat(args.heartbeat_dir, rank)
    heartbeat.beat(stacks=dump_stacks_on_sigusr1(rank))
    result = train(args, heartbeat, exit_signal)
    if args.metrics_dir:
        write_metrics(args, result, rank)
    heartbeat.beat(phase="done")
    log("done")
    import torch.distributed as dist

    # Every rank is past its last collective before any tears the group down: a rank that leaves first closes
    # gloo/NCCL connections a slower rank is still using, which aborts it at exit.
    dist.barrier()
    if rank == args.inject_teardown_abort:  # as a crash in the process group's teardown does
        os.abort()
    dist.destroy_process_group()
    return 0


def exit_now(code: int) -> None:
    """Leave without the interpreter's teardown once everything is written: the library threads torch and DeepSpeed
    leave behind are destroyed while still joinable now and then ("terminate called without an active exception",
    SIGABRT after "done", seen in one CI run of benchmarks/gpu_validation.sh --cpu), which turned a finished run
    into a failed one. This script writes everything synchronously and holds no atexit work, so nothing is lost."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main(sys.argv[1:], EXIT_SIGNAL))
