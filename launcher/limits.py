"""The watchdog's limits, worked out from the plan (the formulas: launcher/watchdog.py's docstring).

Apart from launcher/watchdog.py so that `run` reads them before it starts the job without importing the
watchdog itself (statistics, the heartbeat and log readers), which it needs only once the job is running.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.spec import Plan, Watchdog

MEGATRON_LOG_INTERVAL = 100  # megatron/training/arguments.py: --log-interval's default
STEP_HIGH_FACTOR = 1.25  # step_s -> upper bound when the plan carries no interval (README: max error 10 %)
DEFAULT_CHECKPOINT_S = 1800.0


@dataclass(frozen=True)
class Limits:
    """The watchdog's limits for one job (timeouts in seconds, the straggler test), worked out by from_plan."""

    k: float
    floor_s: float
    startup_s: float
    step_high_s: float | None
    load_s: float
    checkpoint_s: float
    straggler_factor: float
    straggler_steps: int
    stack_traces: bool
    log_interval: int = MEGATRON_LOG_INTERVAL  # steps per training log line, for progress read from logs

    @classmethod
    def from_plan(cls, plan: Plan) -> Limits | None:
        wd = plan.watchdog or Watchdog()
        if not wd.enabled:
            return None
        pred = plan.prediction
        high = None
        if pred and pred.step_s_high:
            high = pred.step_s_high
        elif pred and pred.step_s:
            high = pred.step_s * STEP_HIGH_FACTOR
        save = pred.checkpoint_save_s if pred else None
        checkpoint = wd.checkpoint_timeout_s or (wd.hang_factor * save + wd.floor_s if save else DEFAULT_CHECKPOINT_S)
        return cls(
            k=wd.hang_factor,
            floor_s=wd.floor_s,
            startup_s=wd.startup_s,
            step_high_s=high,
            load_s=(pred.checkpoint_load_s or 0.0) if pred else 0.0,
            checkpoint_s=checkpoint,
            straggler_factor=wd.straggler_factor,
            straggler_steps=wd.straggler_steps,
            stack_traces=wd.stack_traces,
            log_interval=log_interval(plan.entrypoint.args),
        )

    @property
    def first_step_s(self) -> float:
        return self.startup_s + self.k * (self.load_s + (self.step_high_s or 0.0)) + self.floor_s

    def step_timeout(
        self, observed_s: float | None, steps: int = 1, first_s: float | None = None
    ) -> tuple[float, str] | None:
        """(seconds, how they were derived) for `steps` steps (1 per heartbeat, log_interval per log line); None
        without a prediction or an observed step. `first_s`: the first (warm-up) step's time while no later step has
        been seen: the next one is given at least that long, so a job far slower than its prediction is not killed
        as a hang in its second step (QA, 2026-12-07); from the third step on, k x the slowest recent step bounds it."""
        predicted, seen = self.step_high_s or 0.0, observed_s or 0.0
        if not predicted and not seen:
            return None
        per = "" if steps == 1 else f" x {steps} steps per log line"
        if first_s and first_s > self.k * max(predicted, seen):
            how = (
                f"{first_s:.3g} s the first step took{per} (above {self.k:g} x {max(predicted, seen):.3g} s) + "
                f"{self.floor_s:g} s floor"
            )
            return first_s * steps + self.floor_s, how
        if predicted >= seen:
            how = f"{self.k:g} x {predicted:.3g} s predicted step upper bound{per} + {self.floor_s:g} s floor"
        else:
            how = f"{self.k:g} x {seen:.3g} s slowest recent step{per} + {self.floor_s:g} s floor"
        return self.k * max(predicted, seen) * steps + self.floor_s, how

    def exit_wait(self) -> tuple[float, str]:
        """(seconds, how they were derived) an agent may outlive its workers once all of them exited 0
        (launcher/linger.py): the longer of a step's timeout and a checkpoint save's, which is all the other nodes'
        ranks may still be doing after the job's last collective."""
        step = self.k * (self.step_high_s or 0.0) + self.floor_s
        if step >= self.checkpoint_s:
            high = self.step_high_s or 0.0
            return step, f"{self.k:g} x {high:.3g} s predicted step upper bound + {self.floor_s:g} s floor"
        return self.checkpoint_s, "the checkpoint-save timeout"

    @property
    def poll_s(self) -> float:
        shortest = min(self.floor_s + self.k * (self.step_high_s or 0.0), self.checkpoint_s)
        return min(1.0, max(0.1, shortest / 10))


def log_interval(args: tuple[str, ...]) -> int:
    """Steps per training log line: the trainer's --log-interval, else Megatron's default."""
    return int_arg(args, "--log-interval") or MEGATRON_LOG_INTERVAL


def int_arg(args: tuple[str, ...], flag: str) -> int | None:
    """The positive integer a training argument `flag` is given (`--flag N` or `--flag=N`; the last one, as
    argparse takes it), None where it is absent or not a positive integer. isdecimal, not isdigit: "²" is a digit
    that int() refuses, and `--log-interval ²` in a plan's arguments crashed `show` and `run` with a traceback, the
    latter after it had made the run directory (QA 2026-12-07)."""
    found = None
    for i, word in enumerate(args):
        value = word.partition("=")[2] if word.startswith(flag + "=") else None
        if word == flag and i + 1 < len(args):
            value = args[i + 1]
        if value is not None and value.isdecimal() and int(value) > 0:
            found = int(value)
    return found
