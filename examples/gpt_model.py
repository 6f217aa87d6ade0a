"""A small decoder-only GPT with Megatron-LM's shape knobs (GQA, SwiGLU, RMSNorm/LayerNorm, RoPE or learned
positions, tied or untied output, sliding-window attention layers), full activation recomputation as Megatron does
it, and a learnable synthetic token stream for it.

Used by examples/train_gpt.py; kept plain so that DeepSpeed ZeRO 1-3 can shard it without special hooks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class GPTConfig:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    seq_length: int
    num_query_groups: int | None = None
    ffn_hidden_size: int | None = None
    swiglu: bool = False
    normalization: str = "RMSNorm"
    position_embedding_type: str = "rope"
    untie_embeddings_and_output_weights: bool = False
    window_size: tuple[int, int] | None = None  # Megatron's (left, right): keys before / after each query
    window_attn_skip_freq: int | None = None  # every n-th layer (counted from 1) attends to the whole prefix

    def windowed(self, layer_number: int) -> bool:
        """megatron-core transformer/utils.py is_layer_window_attention, for an integer frequency."""
        if self.window_size is None:
            return False
        n = self.window_attn_skip_freq
        return n is None or layer_number % n != 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def ffn(self) -> int:
        if self.ffn_hidden_size:
            return self.ffn_hidden_size
        return int(8 * self.hidden_size / 3 / 64) * 64 or self.hidden_size if self.swiglu else 4 * self.hidden_size


@dataclass(frozen=True)
class Recompute:
    """Megatron's full recomputation (`--recompute-granularity full --recompute-method M --recompute-num-layers N`):
    keep a segment's input, drop what its layers save for backward, and run the segment's forward again in
    backward. uniform: every run of N consecutive layers is one segment; block: each of the first N layers is a
    segment and the rest keep their activations (megatron-core TransformerBlock._checkpointed_forward)."""

    method: str
    num_layers: int

    def __post_init__(self) -> None:
        if self.method not in ("uniform", "block"):
            raise ValueError(f"recompute method {self.method!r} is not uniform or block")
        if self.num_layers < 1:
            raise ValueError(f"recompute num_layers({self.num_layers}) must be >= 1")

    def segments(self, total: int) -> list[tuple[int, int, bool]]:
        """(first layer, end, recomputed) covering layers 0..total-1 in order."""
        n = self.num_layers
        if self.method == "uniform":
            return [(i, min(i + n, total), True) for i in range(0, total, n)]
        k = min(n, total)
        return [(i, i + 1, True) for i in range(k)] + ([(k, total, False)] if k < total else [])


def norm(cfg: GPTConfig) -> nn.Module:
    return nn.RMSNorm(cfg.hidden_size) if cfg.normalization == "RMSNorm" else nn.LayerNorm(cfg.hidden_size)


def rope_tables(seq: int, dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [batch, heads, seq, dim]; rotate pairs (x1, x2) of the two halves."""
    x1, x2 = x.float().chunk(2, dim=-1)
    cos, sin = cos[: x.shape[-2]], sin[: x.shape[-2]]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).to(x.dtype)


@functools.lru_cache(maxsize=8)
def window_mask(seq: int, left: int, right: int, device: str = "cpu") -> torch.Tensor:
    """[seq, seq] True where query i may attend to key j: i - left <= j <= i + right, and j <= i (causal). Built
    once per length and device and shared by every windowed layer, as Hugging Face builds one mask per forward."""
    i = torch.arange(seq, device=device).unsqueeze(1)
    j = torch.arange(seq, device=device).unsqueeze(0)
    return (j <= i) & (j >= i - left) & (j <= i + right)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer_number: int = 1) -> None:
        super().__init__()
        self.cfg = cfg
        self.window = cfg.window_size if cfg.windowed(layer_number) else None
        kv = cfg.groups * cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden_size, cfg.hidden_size + 2 * kv, bias=False)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        b, s, h = x.shape
        cfg = self.cfg
        kv = cfg.groups * cfg.head_dim
        q, k, v = self.qkv(x).split((h, kv, kv), dim=-1)
        q = q.view(b, s, cfg.num_attention_heads, cfg.head_dim).transpose(1, 2)
        k = k.view(b, s, cfg.groups, cfg.head_dim).transpose(1, 2)
        v = v.view(b, s, cfg.groups, cfg.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        repeat = cfg.num_attention_heads // cfg.groups
        if repeat > 1:
            k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        if self.window is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # SDPA has no window argument: the window is a mask (as Hugging Face passes it)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(s, *self.window, str(q.device)))
        return self.proj(out.transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.swiglu = cfg.swiglu
        self.up = nn.Linear(cfg.hidden_size, cfg.ffn * (2 if cfg.swiglu else 1), bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            gate, up = self.up(x).chunk(2, dim=-1)
            return self.down(F.silu(gate) * up)
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer_number: int = 1) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = norm(cfg), Attention(cfg, layer_number), norm(cfg), MLP(cfg)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, recompute: Recompute | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.segments = recompute.segments(cfg.num_layers) if recompute else [(0, cfg.num_layers, False)]
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.pos = nn.Embedding(cfg.seq_length, cfg.hidden_size) if cfg.position_embedding_type != "rope" else None
        self.blocks = nn.ModuleList(Block(cfg, number) for number in range(1, cfg.num_layers + 1))
        self.final_norm = norm(cfg)
        self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if not cfg.untie_embeddings_and_output_weights:
            self.head.weight = self.embed.weight
        cos, sin = rope_tables(cfg.seq_length, cfg.head_dim)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def _layers(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        first: int,
        end: int,
    ) -> torch.Tensor:
        for block in self.blocks[first:end]:
            x = block(x, rope)
        return x

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        rope = None if self.pos is not None else (self.rope_cos, self.rope_sin)
        for first, end, recomputed in self.segments:
            if recomputed and torch.is_grad_enabled():
                # torch's non-reentrant checkpoint: keeps only x; the same code path on CPU and CUDA, no setup
                x = checkpoint(self._layers, x, rope, first, end, use_reentrant=False)
            else:
                x = self._layers(x, rope, first, end)
        logits = self.head(self.final_norm(x)).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1))


class SyntheticTokens:
    """A fixed random successor map over the vocabulary: token t+1 = succ[token t]. A model learns it in a few
    steps, so the loss visibly drops from ln(vocab). Batches depend only on (seed, step, micro step, dp rank),
    so a resumed run sees the same data as an uninterrupted one. A sequence is read off the permutation's
    cycles in one gather (succ^t(x) = cycle of x shifted by t), so a long sequence costs no loop per token."""

    def __init__(self, vocab_size: int, seq_length: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.succ = torch.randperm(vocab_size, generator=g)
        self.vocab_size, self.seq_length, self.seed = vocab_size, seq_length, seed
        self.order, self.start, self.pos, self.length = cycles(self.succ)

    def batch(self, step: int, micro: int, dp_rank: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(((self.seed * 1_000_003 + step) * 1009 + micro) * 65537 + dp_rank)
        first = torch.randint(self.vocab_size, (batch_size,), generator=g)[:, None]
        shift = torch.arange(self.seq_length + 1)[None, :]
        tokens = self.order[self.start[first] + (self.pos[first] + shift) % self.length[first]]
        return tokens[:, :-1], tokens[:, 1:]


def cycles(succ: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The permutation's cycles laid end to end (`order`), and per token: where its cycle starts in `order`,
    its position in the cycle and the cycle's length; then succ^t(x) = order[start + (pos + t) % length]."""
    nxt = succ.tolist()
    n = len(nxt)
    order: list[int] = []
    start, pos, length = [0] * n, [0] * n, [0] * n
    seen = [False] * n
    for head in range(n):
        if seen[head]:
            continue
        first, x, members = len(order), head, []
        while not seen[x]:
            seen[x] = True
            members.append(x)
            x = nxt[x]
        for i, member in enumerate(members):
            start[member], pos[member], length[member] = first, i, len(members)
        order += members
    return tuple(torch.tensor(v, dtype=torch.long) for v in (order, start, pos, length))  # type: ignore[return-value]


def num_parameters(model: nn.Module) -> int:
    """Every parameter once (tied ones too), at its full size also where ZeRO-3 holds a partition (`ds_numel`)."""
    return sum(getattr(p, "ds_numel", p.numel()) for p in {id(p): p for p in model.parameters()}.values())
