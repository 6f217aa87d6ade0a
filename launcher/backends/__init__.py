"""Backends: one small class each, all turning a LaunchContext into the same list[Command].

Nothing here runs anything; tests assert on the argv. `BACKENDS` is the name -> backend table.
"""

from __future__ import annotations

from launcher.backends.deepspeed import DeepSpeed
from launcher.backends.slurm import Slurm
from launcher.backends.torchrun import Torchrun

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (mypy reads it so), without importing typing: docs/launcher.md
if TYPE_CHECKING:  # Backend is a type only: a Protocol needs typing at run time
    from typing import Protocol

    from launcher.command import Command
    from launcher.context import LaunchContext

    class Backend(Protocol):
        name: str
        restarts_inside: bool  # the agent restarts failed workers itself (torchrun --max-restarts)

        def build(self, ctx: LaunchContext) -> list[Command]: ...

        def derived_files(self, ctx: LaunchContext) -> dict[str, str]: ...


BACKENDS: dict[str, Backend] = {b.name: b for b in (Torchrun(), DeepSpeed(), Slurm())}


def build(ctx: LaunchContext) -> tuple[Backend, list[Command]]:
    backend = BACKENDS[ctx.backend]
    return backend, backend.build(ctx)
