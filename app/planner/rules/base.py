"""What a rule reads (`Ctx`: the specs, the configuration and the world size) and what it returns when broken
(`Violation`: a code and a message with the numbers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.planner.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


@dataclass(frozen=True, slots=True)
class Violation:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Ctx:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    par: ParallelConfig
    world_size: int


Rule = Callable[[Ctx], Violation | None]
