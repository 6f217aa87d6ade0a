"""The search's time cap: CPU seconds of the searching thread, with a wall-clock backstop.

A cap in wall-clock seconds made the ranking depend on the machine's load: on a 2-core machine running four searches
a DeepSeek-V3-like MoE on 1,024 H100 (4 s alone) stopped after 38,000 of its 133,000 candidates and ranked a plan
3.9x slower first (QA 2026-12-07). The search's CPU time does not grow while other processes hold the cores, so the
same request gets the same plans under load; the wall clock still ends a search that the load slows more than
WALL_FACTOR times (the service stops a planner process at 2 x the cap + 5 s)."""

from __future__ import annotations

import math
import time
from typing import NamedTuple

WALL_FACTOR = 1.5  # wall-clock seconds a search may take per CPU second of its cap


class Deadline(NamedTuple):
    cpu: float  # time.thread_time() at which the search stops
    wall: float  # time.perf_counter() at which it stops, whatever CPU time it had

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """`seconds` of this thread's CPU time from now, at most WALL_FACTOR times as many wall-clock seconds."""
        return cls(time.thread_time() + seconds, time.perf_counter() + WALL_FACTOR * seconds)

    @classmethod
    def at_wall(cls, wall: float) -> Deadline:
        """A wall-clock end only (the suggestions' sub-searches, which share one budget of seconds)."""
        return cls(math.inf, wall)

    def passed(self) -> bool:
        return time.perf_counter() > self.wall or self.spent_cpu()

    def spent_cpu(self) -> bool:
        """Whether the CPU time ran out (else, once `passed`, the wall-clock backstop ended the search)."""
        return time.thread_time() > self.cpu


def cap_words(deadline: Deadline, limit_s: float) -> str:
    """Which end of `deadline` stopped a search capped at `limit_s`, in words."""
    if deadline.spent_cpu():
        return f"{limit_s:g} s of CPU time"
    return f"its wall-clock backstop, {WALL_FACTOR * limit_s:g} s: the machine was busy"
