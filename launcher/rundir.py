"""The run directory: the resolved plan, the commands, the plan's files, per-node and per-rank logs.

Layout (docs/launcher.md): plan.json, commands[.nodeK].json, launcher[.nodeK].log, workers[.nodeK].json,
the plan's `files` and the backend's derived files by name, and logs/node<K>/ (agent.log, rank logs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from launcher.command import Command
from launcher.context import LaunchContext
from launcher.spec import dump


class RunDirError(Exception):
    """The run directory cannot be prepared (not writable, a file in the way, a full disk): nothing started."""


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(mode)
    tmp.replace(path)


def commands_document(ctx: LaunchContext, commands: list[Command]) -> dict[str, object]:
    return {
        "run_dir": str(ctx.run_dir),
        "backend": ctx.backend,
        "node_rank": ctx.node_rank,
        "commands": [{**c.to_dict(), "shell": c.shell()} for c in commands],
    }


def prepare(ctx: LaunchContext, commands: list[Command], derived_files: dict[str, str]) -> None:
    """Create the run directory and write everything a later reader needs to see what ran and why."""
    try:
        _prepare(ctx, commands, derived_files)
    except OSError as exc:
        where = exc.filename or ctx.run_dir
        raise RunDirError(f"cannot prepare the run directory {ctx.run_dir}: {where}: {exc.strerror}") from None


def _prepare(ctx: LaunchContext, commands: list[Command], derived_files: dict[str, str]) -> None:
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    for command in commands:
        Path(command.log).parent.mkdir(parents=True, exist_ok=True)
    dump(ctx.plan, ctx.run_dir / "plan.json")
    for name, text in {**ctx.plan.files, **derived_files}.items():
        write_atomic(ctx.run_dir / name, text, 0o755 if name.endswith(".sh") else 0o644)
    doc = json.dumps(commands_document(ctx, commands), indent=2) + "\n"
    write_atomic(ctx.run_dir / f"commands{ctx.suffix}.json", doc)
