"""What lets examples/train_gpt.py survive faults: checkpoints saved at the planned interval and on SIGTERM,
resumed exactly (with Megatron's LR schedule), and stack dumps on SIGUSR1.

- What comes back: DeepSpeed's engine state (weights, ZeRO optimizer shards, the LR scheduler's state) and the
  client state: the step, the samples consumed, the data stream's seed and shape, and the RNG state. A resume
  with a different data stream or global batch is refused (its loss curve would not continue the old one).
- `latest` is written by rank 0 only after every rank's save succeeded, and atomically (temporary file, then
  rename): a save that fails half-way (a full disk) leaves the previous checkpoint as the one that loads.
  DeepSpeed's own `latest` (save_latest=True) is written in place after the files, so a full disk can leave it
  empty.
- Before a save every rank compares the free space with the size of the last checkpoint (the first time: 14 bytes
  per parameter, 16-bit weights + fp32 Adam state) and that it can write there (a read-only remount); if any rank
  cannot, all skip this save and training goes on. A save that fails anyway matches DeepSpeed's closing barrier
  (deepspeed/runtime/engine.py save_checkpoint) before the ranks agree on the outcome, so the ranks stay in step.
- A resume takes the checkpoint `latest` names, else (a truncated file, an empty `latest`, a tag that is gone)
  the newest earlier step<N> that loads, naming the broken one; with none, the rank stops naming each.
- ExitSignal (examples/exit_signal.py, installed before the trainer's imports) is Megatron's --exit-signal-handler
  (megatron/training/dist_signal_handler.py): SIGTERM or SIGINT set a flag, the flag is reduced with the step's loss,
  and every rank saves after the same step and exits. A signal before the first step (the imports, the process
  group's start, the model's construction, the resume) is agreed on by `stop_before_training` as soon as the process
  group exists, and again before the first step: every rank then exits 0 without training or saving. No step was
  trained, so nothing is lost: the checkpoint the run would have resumed from stays `latest`, and with none yet the
  next run starts from step 0.
"""

from __future__ import annotations

import argparse
import faulthandler
import math
import os
import re
import shutil
import signal
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from exit_signal import ExitSignal
from heartbeat import Heartbeat

STEP_TAG = re.compile(r"step(\d+)")  # the tags this trainer saves under
BYTES_PER_PARAM = 14  # 2 (16-bit weights) + 12 (fp32 master weights, exp_avg, exp_avg_sq): ZeRO §3.1
SPACE_MARGIN = 1.1
__all__ = ["Checkpointer", "ExitSignal", "dump_stacks_on_sigusr1", "lr_factor", "stop_before_training"]


def _agree(ok: bool) -> bool:
    """True on every rank iff `ok` is true on every rank. The flag lives where the backend reduces: NCCL takes CUDA
    tensors only (the current device, set at start-up), gloo CPU ones."""
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def stop_before_training(exit_signal: ExitSignal) -> bool:
    """Whether a rank received a termination signal before training began: True on every rank iff on any (one
    all-reduce; call it at the same point on every rank, once the process group exists)."""
    return not _agree(exit_signal.received is None)


def _free_bytes(directory: Path) -> int:
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _unwritable(directory: Path) -> str | None:
    """Why no file can be written in `directory` (made where missing), None if one can. A read-only remount of the
    checkpoint file system made DeepSpeed's save raise RuntimeError ("Parent directory ... does not exist"), which
    crashed the rank, and every restart the same way (QA 2026-12-07): found here, on every rank, the save is
    skipped before DeepSpeed's collectives begin."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # a name of its own on every rank of every node (pids repeat across containers sharing the directory)
        handle, name = tempfile.mkstemp(prefix=".write-check-", dir=directory)
        os.close(handle)
        Path(name).unlink(missing_ok=True)
    except OSError as exc:
        return f"cannot write in {directory}: {exc.strerror or exc}"
    return None


def _unloadable(tag_dir: Path) -> str | None:
    """Why the checkpoint in `tag_dir` cannot be loaded, found without loading it (None: nothing found): it is gone,
    holds no file, or a file is not a whole archive (torch.save writes zip archives, whose directory is at their
    end: a truncated file has none). Every rank looks before any starts DeepSpeed's load, so that all agree."""
    if not tag_dir.is_dir():
        return f"{tag_dir} does not exist"
    files = sorted(tag_dir.glob("*.pt"))
    if not files:
        return f"{tag_dir} holds no checkpoint file"
    for path in files:
        try:
            with zipfile.ZipFile(path):
                pass
        except (OSError, zipfile.BadZipFile) as exc:
            return f"{path.name} is truncated or damaged ({exc})"
    return None


def _tag_step(tag: str) -> int | None:
    match = STEP_TAG.fullmatch(tag)
    return int(match.group(1)) if match else None


class Checkpointer:
    def __init__(
        self,
        engine: Any,
        save: str | None,
        load: str | None,
        data: dict[str, int],
        heartbeat: Heartbeat,
        parameters: int,
        log: Callable[[str], None],
    ) -> None:
        self.engine, self.data, self.heartbeat, self.log = engine, data, heartbeat, log
        self.save_dir = Path(save) if save else None
        self.load_dir = Path(load) if load else None
        self.last_bytes = parameters * BYTES_PER_PARAM
        self.saved_step: int | None = None
        self.tried_step: int | None = None  # the last step a save was attempted for: not attempted twice
        self._client: dict[str, Any] = {}  # the client state of the checkpoint loaded last
        self.failed_saves = 0  # in the heartbeat's checkpoint note, so that a reader polling slower misses none

    def resume(self) -> int:
        """Load the checkpoint `latest` names, else the newest earlier one that loads; the step to continue from (0:
        no `latest`). A broken one (a truncated file, an empty `latest`, a tag that is gone) is named, and the last
        good one is taken: every restart crashed on it (miniz's RuntimeError, a bare AssertionError), the restart
        budget was spent and nothing named the checkpoint (QA 2026-12-07). With none that loads, the rank stops
        with a message naming each one (no silent start from step 0 over a run's checkpoints)."""
        latest = self.load_dir / "latest" if self.load_dir else None
        if latest is None or not latest.exists():
            return 0
        self.heartbeat.beat(phase="load")
        named, tags = self._candidates(latest)
        broken = [] if named else [f"{latest} names no checkpoint (it is empty)"]
        for tag in tags:
            why = self._load(tag)
            if why is None:
                if broken:
                    self.log(f"resuming from the last good checkpoint {self.load_dir / tag}: {'; '.join(broken)}")
                return self._resumed(tag)
            broken.append(f"checkpoint {self.load_dir / tag} cannot be loaded: {why}")
            self.log(f"{broken[-1]}; trying an earlier one")
        raise SystemExit(
            f"train_gpt: no checkpoint in {self.load_dir} can be loaded ({'; '.join(broken)}): move them away, or give "
            f"another --load, to start from step 0"
        )

    def _candidates(self, latest: Path) -> tuple[str, list[str]]:
        """The tag `latest` names ("" if none), and the tags to try in order: that one, then the step<N> directories
        before it, newest first (all of them where it names no step)."""
        assert self.load_dir is not None
        try:
            named = latest.read_text().strip()
        except (OSError, UnicodeDecodeError):
            named = ""
        steps = sorted(
            ((step, p.name) for p in self.load_dir.iterdir() if p.is_dir() and (step := _tag_step(p.name)) is not None),
            reverse=True,
        )
        bound = _tag_step(named)
        earlier = [tag for step, tag in steps if tag != named and (bound is None or step < bound)]
        return named, ([named] if named else []) + earlier

    def _load(self, tag: str) -> str | None:
        """Load `tag` on every rank; None once all did, else why not (all ranks agree on the outcome)."""
        assert self.load_dir is not None
        why = _unloadable(self.load_dir / tag)
        if not _agree(why is None):
            return why or "a file is truncated or damaged on another rank's view"
        try:
            path, client = self.engine.load_checkpoint(str(self.load_dir), tag=tag)
            why = None if path else "DeepSpeed found no checkpoint there"
        except Exception as exc:  # DeepSpeed and torch raise RuntimeError, AssertionError, KeyError, ...
            why = f"{type(exc).__name__}: {exc}"
        if not _agree(why is None):
            return why or "it failed to load on another rank"
        self._client = client or {}
        return None

    def _resumed(self, tag: str) -> int:
        """Check and apply the loaded checkpoint's client state; the step to continue from."""
        assert self.load_dir is not None
        client = self._client
        saved = client.get("data", {})
        if saved and saved != self.data:
            raise SystemExit(
                f"train_gpt: checkpoint {self.load_dir / tag} was trained on data {saved}, this run "
                f"reads {self.data}: resuming would not continue its loss curve; use another --load"
            )
        step = int(client.get("step", 0))
        if (
            client.get("consumed_samples", step * self.data["global_batch_size"])
            != step * self.data["global_batch_size"]
        ):
            raise SystemExit(
                f"train_gpt: checkpoint {tag}: consumed_samples {client['consumed_samples']} is not "
                f"step {step} x global batch {self.data['global_batch_size']}"
            )
        if "rng" in client:
            torch.set_rng_state(client["rng"])
        self.saved_step = step
        self.heartbeat.beat(resumed_from=step)
        self.log(f"resumed from checkpoint {self.load_dir / tag} at step {step}")
        return step

    def save(self, step: int) -> bool:
        """Save after `step`; False when the save was skipped or failed (the last good checkpoint stays)."""
        if self.save_dir is None or step in (self.saved_step, self.tried_step):
            # a save of the step that failed is not tried again: the final save after the loop counted a failure
            # of the last step's interval save twice (QA 2026-12-07)
            return self.saved_step == step
        self.tried_step = step
        free, unwritable = _free_bytes(self.save_dir), _unwritable(self.save_dir)
        if not _agree(unwritable is None and free >= SPACE_MARGIN * self.last_bytes):
            return self._failed(
                step,
                f"skipped: {unwritable}"
                if unwritable
                else f"skipped: {self.save_dir} has {free / 2**20:.1f} MiB free and a checkpoint "
                f"takes about {self.last_bytes / 2**20:.1f} MiB",
            )
        self.heartbeat.beat(phase="save")
        t0, error = time.perf_counter(), ""
        tag = f"step{step}"
        client = {
            "step": step,
            "consumed_samples": step * self.data["global_batch_size"],
            "data": self.data,
            "rng": torch.get_rng_state(),
        }
        try:
            self.engine.save_checkpoint(str(self.save_dir), tag=tag, client_state=client, save_latest=False)
        except (OSError, RuntimeError) as exc:  # torch.save's writer raises RuntimeError for a directory gone
            error = f"{type(exc).__name__}: {exc}"
            dist.barrier()  # the one DeepSpeed's save_checkpoint ends with, which the other ranks are in
        if not _agree(not error):
            if dist.get_rank() == 0:
                shutil.rmtree(self.save_dir / tag, ignore_errors=True)
            return self._failed(step, error or "failed on another rank")
        error = self._commit(tag)
        if error:
            return self._failed(step, error)
        seconds = time.perf_counter() - t0
        self.last_bytes = max(_tree_bytes(self.save_dir / tag), 1)
        self.saved_step = step
        self.heartbeat.beat(
            phase="train",
            checkpoint={
                "step": step,
                "saved": True,
                "save_s": seconds,
                "failed": self.failed_saves,
                "last_saved": step,
            },
        )
        self.log(f"saved checkpoint {tag} in {seconds:.2f} s ({self.last_bytes / 2**20:.1f} MiB)")
        return True

    def _commit(self, tag: str) -> str:
        """Point `latest` at `tag` (rank 0, atomically); an error message, or "" once every rank knows it worked."""
        assert self.save_dir is not None
        error = ""
        if dist.get_rank() == 0:
            tmp = self.save_dir / f".latest.{os.getpid()}"
            try:
                tmp.write_text(tag)
                os.replace(tmp, self.save_dir / "latest")
            except OSError as exc:
                error = f"writing latest: {type(exc).__name__}: {exc}"
                tmp.unlink(missing_ok=True)
                shutil.rmtree(self.save_dir / tag, ignore_errors=True)
        return "" if _agree(not error) else (error or "writing latest failed on rank 0")

    def _failed(self, step: int, why: str) -> bool:
        last = "none" if self.saved_step is None else f"step {self.saved_step}"
        self.failed_saves += 1
        note = {"step": step, "saved": False, "error": why, "failed": self.failed_saves, "last_saved": self.saved_step}
        self.heartbeat.beat(phase="train", checkpoint=note)
        self.log(f"checkpoint at step {step} not saved ({why}); the last good checkpoint is {last}; training goes on")
        return False


def lr_factor(args: argparse.Namespace, step: int) -> float:
    """Megatron's schedule (megatron/core/optimizer_param_scheduler.py, get_lr) as a factor of --lr for LambdaLR:
    linear warm-up, then constant, linear or cosine decay to --min-lr at --lr-decay-iters."""
    warmup, decay = args.lr_warmup_iters, args.lr_decay_iters or args.train_iters
    if warmup and step <= warmup:
        return step / warmup
    if args.lr_decay_style == "constant" or step > decay:
        return 1.0 if args.lr_decay_style == "constant" else args.min_lr / args.lr
    ratio = (step - warmup) / max(1, decay - warmup)
    coeff = 1.0 - ratio if args.lr_decay_style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return (args.min_lr + coeff * (args.lr - args.min_lr)) / args.lr


def dump_stacks_on_sigusr1(rank: int) -> str | None:
    """faulthandler writes every thread's Python stack to $TRAINPLAN_RUN_DIR/stacks/rank<R>.txt on SIGUSR1."""
    run_dir = os.environ.get("TRAINPLAN_RUN_DIR")
    if not run_dir:
        return None
    try:
        Path(run_dir, "stacks").mkdir(parents=True, exist_ok=True)
        sink = open(Path(run_dir, "stacks", f"rank{rank}.txt"), "a")  # noqa: SIM115 (kept open for the handler)
    except OSError:
        return None
    faulthandler.register(signal.SIGUSR1, file=sink, all_threads=True)
    return "SIGUSR1"
