"""The optional sections of plan.json: model, prediction, hardware and watchdog (launcher/spec.py holds the rest).

Frozen dataclasses that validate on construction, like every part of the plan (docs/plan-json.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.fields import PlanError, need_bool, need_float, need_int, need_opt, need_str

DAY_S = 86_400.0


@dataclass(frozen=True)
class Model:
    """plan.json's optional `model` section: the network's shape, in Megatron's terms."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    seq_length: int
    name: str = "custom"
    num_query_groups: int | None = None
    ffn_hidden_size: int | None = None
    swiglu: bool = False
    normalization: str = "RMSNorm"
    position_embedding_type: str = "rope"
    untie_embeddings_and_output_weights: bool = False
    kv_channels: int | None = None  # --kv-channels: the head size; None: hidden_size / num_attention_heads

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length"):
            need_int(f"model.{name}", getattr(self, name), 1, 1 << 40)
        need_str("model.name", self.name, max_len=256)
        need_opt("model.num_query_groups", self.num_query_groups, need_int, 1, 1 << 40)
        need_opt("model.ffn_hidden_size", self.ffn_hidden_size, need_int, 1, 1 << 40)
        need_bool("model.swiglu", self.swiglu)
        need_str("model.normalization", self.normalization, ("LayerNorm", "RMSNorm"))
        need_str("model.position_embedding_type", self.position_embedding_type, ("learned_absolute", "rope"))
        need_bool("model.untie_embeddings_and_output_weights", self.untie_embeddings_and_output_weights)
        need_opt("model.kv_channels", self.kv_channels, need_int, 1, 1 << 40)
        h, heads, groups = self.hidden_size, self.num_attention_heads, self.query_groups
        if self.kv_channels is None and h % heads:  # Megatron-LM validate_args: only without --kv-channels
            raise PlanError(
                f"model.hidden_size({h}) is not divisible by model.num_attention_heads({heads}) and no "
                "model.kv_channels is given"
            )
        if heads % groups:
            raise PlanError(f"model.num_attention_heads({heads}) is not a multiple of num_query_groups({groups})")

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def ffn_size(self) -> int:
        """Megatron's default: 4h, or int(8h/3/64)*64 with SwiGLU."""
        if self.ffn_hidden_size:
            return self.ffn_hidden_size
        return int(8 * self.hidden_size / 3 / 64) * 64 if self.swiglu else 4 * self.hidden_size


@dataclass(frozen=True)
class Prediction:
    """The planner's numbers for this plan: `launcher bench` compares them with a run, and the watchdog scales
    its timeouts by them (step time, checkpoint save and load)."""

    tokens_per_s: float | None = None
    step_s: float | None = None
    peak_memory_bytes: tuple[int, ...] = ()  # per pipeline stage (one value: the same for every rank)
    step_s_high: float | None = None  # upper end of the planner's 80 % interval of step_s
    checkpoint_save_s: float | None = None
    checkpoint_load_s: float | None = None
    checkpoint_bytes: int | None = None
    checkpoint_interval_steps: int | None = None
    goodput: float | None = None

    def __post_init__(self) -> None:
        for name in ("tokens_per_s", "step_s", "step_s_high", "checkpoint_save_s", "checkpoint_load_s"):
            need_opt(f"prediction.{name}", getattr(self, name), need_float, True, 365 * DAY_S * 1e6)
        need_opt("prediction.checkpoint_bytes", self.checkpoint_bytes, need_int, 0, 1 << 62)
        need_opt("prediction.checkpoint_interval_steps", self.checkpoint_interval_steps, need_int, 1, 1 << 40)
        need_opt("prediction.goodput", self.goodput, need_float, True, 1.0)
        if self.step_s is not None and self.step_s_high is not None and self.step_s_high < self.step_s:
            raise PlanError(f"prediction.step_s_high({self.step_s_high}) < prediction.step_s({self.step_s})")
        mem = self.peak_memory_bytes
        if isinstance(mem, str) or not isinstance(mem, list | tuple):
            raise PlanError(f"prediction.peak_memory_bytes: expected a list of integers, got {mem!r:.60}")
        object.__setattr__(
            self,
            "peak_memory_bytes",
            tuple(need_int(f"prediction.peak_memory_bytes[{i}]", v, 0, 1 << 62) for i, v in enumerate(mem)),
        )


# Hardware's rates (a module constant, not a ClassVar: see launcher/strategy.py's)
HARDWARE_RATES = (
    "bf16_TFLOPs",
    "fp16_TFLOPs",
    "intra_node_GBps",
    "inter_node_GBps",
    "host_to_device_GBps",
    "cpu_adam_params_per_s",
)


@dataclass(frozen=True)
class Hardware:
    """Catalogue numbers for the plan's GPU and cluster (per GPU, per direction), for `launcher probe`."""

    name: str = ""
    memory_bytes: int | None = None
    bf16_TFLOPs: float | None = None
    fp16_TFLOPs: float | None = None
    intra_node_GBps: float | None = None
    inter_node_GBps: float | None = None
    host_to_device_GBps: float | None = None
    cpu_adam_params_per_s: float | None = None

    def __post_init__(self) -> None:
        need_str("hardware.name", self.name, max_len=256)
        need_opt("hardware.memory_bytes", self.memory_bytes, need_int, 1, 1 << 62)
        for name in HARDWARE_RATES:
            need_opt(f"hardware.{name}", getattr(self, name), need_float, True, 1e15)


@dataclass(frozen=True)
class Watchdog:
    """How `launcher run` watches the ranks' progress (docs/launcher.md, "Watchdog"). Each timeout is the
    predicted time times `hang_factor` plus `floor_s`; without a prediction, observed step times stand in."""

    enabled: bool = True
    hang_factor: float = 2.0  # k: a step may take k x the upper end of its predicted interval (+ floor_s)
    floor_s: float = 30.0  # added to every timeout: GC pauses, logging, page cache, clock granularity
    startup_s: float = 600.0  # before the first step: imports, initialisation, rendezvous (+ load and a step)
    checkpoint_timeout_s: float | None = None  # None: k x prediction.checkpoint_save_s + floor_s, else 1800 s
    straggler_factor: float = 1.5  # a rank's compute time over the median of the other ranks'
    straggler_steps: int = 5  # ... seen on this many successive heartbeats
    stack_traces: bool = True  # py-spy dump (if on PATH), else SIGUSR1 (faulthandler), before tearing down

    def __post_init__(self) -> None:
        need_bool("watchdog.enabled", self.enabled)
        need_float("watchdog.hang_factor", self.hang_factor, lo=1.0, hi=100.0)
        need_float("watchdog.floor_s", self.floor_s, lo=0.1, hi=DAY_S)
        need_float("watchdog.startup_s", self.startup_s, positive=False, lo=0.0, hi=7 * DAY_S)
        need_opt("watchdog.checkpoint_timeout_s", self.checkpoint_timeout_s, need_float, True, 7 * DAY_S)
        need_float("watchdog.straggler_factor", self.straggler_factor, lo=1.05, hi=100.0)
        need_int("watchdog.straggler_steps", self.straggler_steps, 2, 100_000)
        need_bool("watchdog.stack_traces", self.stack_traces)
