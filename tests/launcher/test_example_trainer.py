"""examples/train_gpt.py and examples/gpt_model.py in-process: shapes, data, argument files."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpt_model import GPT, GPTConfig, SyntheticTokens, num_parameters  # noqa: E402
from train_gpt import ds_config, parse_args  # noqa: E402


def expected_parameters(cfg: GPTConfig) -> int:
    """Megatron's shapes: embedding, per layer QKV (GQA) + proj + MLP (+gate) + norms, final norm, head."""
    h, ffn, kv = cfg.hidden_size, cfg.ffn, cfg.groups * cfg.head_dim
    norm = 2 * h if cfg.normalization == "LayerNorm" else h
    layer = h * (h + 2 * kv) + h * h + h * ffn * (2 if cfg.swiglu else 1) + ffn * h + 2 * norm
    pos = cfg.seq_length * h if cfg.position_embedding_type == "learned_absolute" else 0
    head = cfg.vocab_size * h if cfg.untie_embeddings_and_output_weights else 0
    return cfg.vocab_size * h + pos + cfg.num_layers * layer + norm + head


@pytest.mark.parametrize(
    "kwargs",
    [
        {"swiglu": True, "num_query_groups": 2},
        {"normalization": "LayerNorm", "position_embedding_type": "learned_absolute"},
        {"untie_embeddings_and_output_weights": True, "ffn_hidden_size": 96},
    ],
)
def test_model_runs_and_has_megatron_shapes(kwargs: dict[str, object]) -> None:
    cfg = GPTConfig(num_layers=2, hidden_size=32, num_attention_heads=4, vocab_size=64, seq_length=16, **kwargs)
    model = GPT(cfg)
    tokens, labels = SyntheticTokens(64, 16, seed=1).batch(0, 0, 0, 3)
    loss = float(model(tokens, labels).detach())
    assert 3.0 < loss < 5.5  # about ln(64) = 4.16 at initialisation
    assert num_parameters(model) == expected_parameters(cfg)


def test_synthetic_batches_are_deterministic_and_learnable() -> None:
    data = SyntheticTokens(50, 8, seed=3)
    a, la = data.batch(5, 1, 2, 4)
    b, lb = data.batch(5, 1, 2, 4)
    c, _ = data.batch(6, 1, 2, 4)
    assert torch.equal(a, b) and torch.equal(la, lb) and not torch.equal(a, c)
    assert torch.equal(la, data.succ[a])  # the next token is a function of this one


def test_sequences_longer_than_the_cycles_still_follow_the_successor_map() -> None:
    data = SyntheticTokens(5, 64, seed=7)  # every cycle of a 5-token permutation wraps many times in 64 steps
    tokens, labels = data.batch(0, 0, 0, 6)
    assert tokens.shape == (6, 64) and torch.equal(labels, data.succ[tokens])
    assert torch.equal(tokens[:, 1:], labels[:, :-1])


def test_arguments_come_from_a_file_and_the_command_line_wins(tmp_path: Path) -> None:
    (tmp_path / "args.txt").write_text(
        "# Megatron-style\n--num-layers 3 --hidden-size 64\n"
        "--num-attention-heads 4 --seq-length 32 --vocab-size 128\n"
        "--tensor-model-parallel-size 1 --use-flash-attn --lr-decay-style cosine\n"
    )
    args = parse_args(["--args-file", str(tmp_path / "args.txt"), "--num-layers", "5", "--local_rank=1"])
    assert (args.num_layers, args.hidden_size, args.local_rank) == (5, 64, 1)
    assert "--use-flash-attn" in args.ignored
    with pytest.raises(SystemExit):
        parse_args(["--args-file", str(tmp_path / "args.txt"), "--tensor-model-parallel-size", "2"])


def test_ds_config_is_completed_from_the_arguments(tmp_path: Path) -> None:
    args = parse_args(
        [
            "--num-layers",
            "1",
            "--hidden-size",
            "8",
            "--num-attention-heads",
            "2",
            "--seq-length",
            "4",
            "--vocab-size",
            "8",
            "--micro-batch-size",
            "2",
            "--global-batch-size",
            "16",
        ]
    )
    cfg = ds_config(args, world=4, on_cuda=False)
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == (
        16,
        2,
        2,
    )
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}')
    args.deepspeed_config = str(tmp_path / "ds.json")
    cfg = ds_config(args, world=4, on_cuda=False)
    assert cfg["zero_force_ds_cpu_optimizer"] is False and cfg["zero_optimization"]["stage"] == 3


def test_sliding_window_layers_see_only_their_window() -> None:
    """--window-size 3,0 --window-attn-skip-freq 2 (Megatron-LM's words, as the renderer writes them for a DeepSpeed
    plan): layers 1 and 3 attend to themselves and the 3 keys before, layers 2 and 4 to the whole prefix
    (megatron-core is_layer_window_attention); a change to token 0 reaches query 3 of a windowed layer, not query 4."""
    args = parse_args(["--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length",
                       "16", "--vocab-size", "64", "--window-size", "3,0", "--window-attn-skip-freq", "2"])  # fmt: skip
    cfg = GPTConfig(num_layers=4, hidden_size=32, num_attention_heads=4, vocab_size=64, seq_length=16,
                    window_size=args.window_size, window_attn_skip_freq=args.window_attn_skip_freq)  # fmt: skip
    assert args.window_size == (3, 0)
    model = GPT(cfg)
    assert [block.attn.window for block in model.blocks] == [(3, 0), None, (3, 0), None]
    rope = (model.rope_cos, model.rope_sin)
    x = torch.randn(1, 16, 32)
    moved = x.clone()
    moved[:, 0] += 1.0
    with torch.no_grad():
        windowed = model.blocks[0].attn(x, rope), model.blocks[0].attn(moved, rope)
        full = model.blocks[1].attn(x, rope), model.blocks[1].attn(moved, rope)
    assert not torch.allclose(windowed[0][:, 3], windowed[1][:, 3])
    assert torch.allclose(windowed[0][:, 4:], windowed[1][:, 4:])
    assert not torch.allclose(full[0][:, 15], full[1][:, 15])
