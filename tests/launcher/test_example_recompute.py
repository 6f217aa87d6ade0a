"""Activation recomputation in examples/train_gpt.py: Megatron's flags, what each layer keeps, and a run that trains.

Memory is measured with torch's own dispatcher, not RSS: a TorchDispatchMode sees every tensor an operator
allocates and a finalizer sees its storage freed, so `peak` is the high-water mark of live tensor bytes, the CPU
analogue of torch.cuda.max_memory_allocated. (An outer saved_tensors_hooks would not do: the non-reentrant
checkpoint installs its own hooks, so an outer one sees nothing saved inside a recomputed layer and never sees
the layer inputs the checkpoint keeps.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, free_port, losses  # noqa: E402
from gpt_model import GPT, GPTConfig, Recompute, SyntheticTokens  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402
from train_gpt import parse_args  # noqa: E402

SEQ, MBS, HIDDEN = 128, 4, 64
MODEL = [
    "--num-layers",
    "2",
    "--hidden-size",
    "8",
    "--num-attention-heads",
    "2",
    "--seq-length",
    "4",
    "--vocab-size",
    "8",
]


class LiveBytes(TorchDispatchMode):
    """Bytes of tensor storages created under the mode and still alive: `live` now, `peak` the maximum."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.seen: set[int] = set()

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self.seen.discard(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if key in self.seen or key in inputs or nbytes == 0:  # a view, or an in-place result
                continue
            self.seen.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._freed, key, nbytes)
        return out


def measure(layers: int, recompute: Recompute | None) -> tuple[int, int, dict[str, Any]]:
    """(bytes kept for backward after the forward, peak bytes over forward + backward, gradients)."""
    torch.manual_seed(0)
    cfg = GPTConfig(
        num_layers=layers,
        hidden_size=HIDDEN,
        num_attention_heads=4,
        num_query_groups=2,
        vocab_size=128,
        seq_length=SEQ,
        swiglu=True,
    )
    model = GPT(cfg, recompute)
    tokens, labels = SyntheticTokens(128, SEQ, seed=1).batch(0, 0, 0, MBS)
    with LiveBytes() as mem:
        loss = model(tokens, labels)
        kept = mem.live
        loss.backward()
        del loss
    return kept, mem.peak, {n: p.grad for n, p in model.named_parameters()}


def test_segments_follow_megatron_uniform_and_block() -> None:
    assert Recompute("uniform", 1).segments(3) == [(0, 1, True), (1, 2, True), (2, 3, True)]
    assert Recompute("uniform", 2).segments(5) == [(0, 2, True), (2, 4, True), (4, 5, True)]
    assert Recompute("block", 2).segments(5) == [(0, 1, True), (1, 2, True), (2, 5, False)]
    assert Recompute("block", 9).segments(2) == [(0, 1, True), (1, 2, True)]
    with pytest.raises(ValueError, match="uniform or block"):
        Recompute("selective", 1)


def test_megatron_flags_are_read_and_checked_as_megatron_does() -> None:
    args = parse_args(
        [*MODEL, "--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2"]
    )
    assert args.recompute == Recompute("block", 2) and args.ignored == []
    assert parse_args([*MODEL, "--recompute-granularity", "selective"]).recompute is None  # documented no-op
    assert parse_args([*MODEL, "--recompute-activations"]).recompute is None
    assert parse_args(MODEL).recompute is None
    for wrong in (
        ["--recompute-granularity", "full"],  # Megatron requires the method and the layer count
        ["--recompute-granularity", "full", "--recompute-method", "uniform"],
        ["--recompute-granularity", "selective", "--recompute-method", "uniform"],
        ["--recompute-num-layers", "1"],
        ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "0"],
    ):
        with pytest.raises(SystemExit):
            parse_args([*MODEL, *wrong])


def test_full_recompute_keeps_each_layers_input_and_lowers_the_peak() -> None:
    """The memory model's full recompute: a layer keeps its input (s*b*h, fp32 here) and nothing else."""
    layer_input = SEQ * MBS * HIDDEN * 4
    kept2, _, _ = measure(2, Recompute("uniform", 1))
    kept4, peak_on, grads_on = measure(4, Recompute("uniform", 1))
    assert (kept4 - kept2) / 2 == layer_input
    kept2_uniform2, _, _ = measure(2, Recompute("uniform", 2))
    kept4_uniform2, _, _ = measure(4, Recompute("uniform", 2))
    assert (kept4_uniform2 - kept2_uniform2) / 2 == layer_input / 2  # one input per two layers
    plain2, _, _ = measure(2, None)
    plain4, peak_off, grads_off = measure(4, None)
    assert (plain4 - plain2) / 2 > 10 * layer_input  # without recompute a layer keeps far more than its input
    assert peak_on < 0.6 * peak_off, (peak_on, peak_off)
    for name, grad in grads_off.items():  # recomputation changes memory, not the result
        torch.testing.assert_close(grads_on[name], grad, rtol=1e-5, atol=1e-6, msg=name)


def test_block_recomputes_only_the_first_layers() -> None:
    kept_block, _, _ = measure(4, Recompute("block", 2))
    kept_none, _, _ = measure(4, None)
    kept_all, _, _ = measure(4, Recompute("uniform", 1))
    assert kept_all < kept_block < kept_none
    per_layer = (kept_none - kept_all) / 4
    assert kept_block == pytest.approx(kept_all + 2 * per_layer, rel=1e-6)  # layers 2 and 3 keep theirs


def test_fused_attention_keeps_no_scores_so_selective_has_nothing_to_drop() -> None:
    """What selective recompute would drop (the s x s scores) is never saved by scaled_dot_product_attention."""
    cfg = GPTConfig(num_layers=1, hidden_size=HIDDEN, num_attention_heads=4, vocab_size=128, seq_length=SEQ)
    model = GPT(cfg)
    tokens, labels = SyntheticTokens(128, SEQ, seed=1).batch(0, 0, 0, MBS)
    shapes: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(tokens, labels)
    assert shapes and (MBS, 4, SEQ, HIDDEN // 4) in shapes  # q, k, v are saved
    assert not [s for s in shapes if s[-2:] == (SEQ, SEQ)], shapes


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_full_recompute_run_trains_under_zero_3(tmp_path: Path) -> None:
    """One gloo process through deepspeed.initialize, ZeRO-3 (parameters gathered again by its hooks in the
    recomputation), bf16, with the flags the renderer writes; the loss falls."""
    (tmp_path / "ds.json").write_text(
        '{"zero_optimization": {"stage": 3}, "bf16": {"enabled": true}, '
        '"gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": '
        '{"lr": 0.003}}, "activation_checkpointing": {"partition_activations": '
        'false, "contiguous_memory_optimization": false, "cpu_checkpointing": false}}'
    )
    env = {
        **os.environ,
        "DS_ACCELERATOR": "cpu",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "train_gpt.py"),
            "--num-layers",
            "2",
            "--hidden-size",
            "64",
            "--num-attention-heads",
            "4",
            "--num-query-groups",
            "2",
            "--seq-length",
            "32",
            "--vocab-size",
            "256",
            "--swiglu",
            "--micro-batch-size",
            "4",
            "--global-batch-size",
            "8",
            "--train-iters",
            "12",
            "--deepspeed_config",
            str(tmp_path / "ds.json"),
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1",
            "--metrics-dir",
            str(tmp_path / "m"),
        ],
        capture_output=True,
        text=True,
        timeout=110,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "recompute full (uniform, 1 layer(s) per segment)" in done.stdout
    seen = losses(done.stdout)
    assert len(seen) == 12 and sum(seen[-3:]) / 3 < sum(seen[:3]) / 3 - 0.5, seen
    metrics = (tmp_path / "m" / "rank0.json").read_text()
    assert '"recompute": "full (uniform, 1 layer(s) per segment)"' in metrics


def test_the_optimizer_updates_in_place_where_its_states_live_on_the_gpu() -> None:
    """Fused AdamW for GPU-resident states (no group-sized temporaries the planner does not count); the default
    CPU path, which `launcher probe` measures, for offloaded ones."""
    from train_gpt import optimizer_for

    args = parse_args(MODEL)
    model = torch.nn.Linear(4, 4)
    on_gpu = optimizer_for(model, {"optimizer": {"params": {"lr": 0.5}}}, args, on_cuda=True)
    assert on_gpu.defaults["fused"] is True and on_gpu.defaults["lr"] == 0.5
    offloaded = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
    assert optimizer_for(model, offloaded, args, on_cuda=True).defaults["fused"] is None
    assert optimizer_for(model, {}, args, on_cuda=False).defaults["fused"] is None


def test_deepspeed_activation_checkpointing_block_is_dropped_or_refused(tmp_path: Path) -> None:
    """The rendered block (all false) is left to the --recompute-* flags; options this trainer cannot honour stop it."""
    from train_gpt import ds_config

    args = parse_args(MODEL)
    args.deepspeed_config = str(tmp_path / "ds.json")
    (tmp_path / "ds.json").write_text('{"activation_checkpointing": {"partition_activations": false}}')
    assert "activation_checkpointing" not in ds_config(args, world=1, on_cuda=False)
    (tmp_path / "ds.json").write_text('{"activation_checkpointing": {"cpu_checkpointing": true}}')
    with pytest.raises(SystemExit, match="cpu_checkpointing is not supported"):
        ds_config(args, world=1, on_cuda=False)
