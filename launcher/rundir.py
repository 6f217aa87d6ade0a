"""The run directory: the resolved plan, the commands, the plan's files, per-node and per-rank logs.

Layout (docs/launcher.md): plan.json, commands[.nodeK].json, launcher[.nodeK].log, workers[.nodeK].json,
the plan's `files` and the backend's derived files by name, and logs/node<K>/ (agent.log, rank logs).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from contextlib import ExitStack
from pathlib import Path

from launcher.command import Command
from launcher.context import LaunchContext
from launcher.spec import dump

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (mypy reads it so), without importing typing: docs/launcher.md
if TYPE_CHECKING:
    from typing import IO


class RunDirError(Exception):
    """The run directory cannot be prepared (not writable, a file in the way, a full disk): nothing started."""


# what flock(LOCK_NB) fails with where another process holds the lock; any other error is no holder
HELD = (errno.EWOULDBLOCK, errno.EAGAIN)


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` to a file beside `path` and rename it over `path`: a reader never sees half a file, and a write
    that fails (a full disk) leaves the old file as it was and no temporary file behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(mode)
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def commands_document(ctx: LaunchContext, commands: list[Command]) -> dict[str, object]:
    return {
        "run_dir": str(ctx.run_dir),
        "backend": ctx.backend,
        "node_rank": ctx.node_rank,
        "commands": [{**c.to_dict(), "shell": c.shell()} for c in commands],
    }


def lock(ctx: LaunchContext) -> ExitStack:
    """Exclusive locks on the run directory for this launcher, held while it runs (the kernel drops them when the
    launcher exits, SIGKILL included). A second launcher of the same node on the same directory resumed from the
    first one's checkpoints while it trained, and both wrote the same files. A launcher of every node holds the
    directory's lock; a per-node launcher (--node-rank K) shares it with the other nodes' and holds its node's: one
    without --node-rank and one with --node-rank 0 both ran node 0 (two lock files, QA 2026-12-06)."""
    with ExitStack() as held:  # a lock taken before a refusal is released with it
        try:
            ctx.run_dir.mkdir(parents=True, exist_ok=True)
            if ctx.node_rank is None:
                held.enter_context(_flock(ctx, ".launcher.lock", exclusive=True))
            else:
                held.enter_context(_flock(ctx, ".launcher.lock", exclusive=False))
                held.enter_context(_flock(ctx, f".launcher.node{ctx.node_rank}.lock", exclusive=True))
        except OSError as exc:
            raise RunDirError(f"cannot prepare the run directory {ctx.run_dir}: {exc.strerror}") from None
        return held.pop_all()


def _flock(ctx: LaunchContext, name: str, exclusive: bool) -> IO[str]:
    """One lock file, held; an exclusive holder writes its pid there for the message of the one refused."""
    handle = open(ctx.run_dir / name, "a+", encoding="utf-8")  # noqa: SIM115 (held for the run: the caller closes it)
    try:
        fcntl.flock(handle, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except OSError as exc:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        if exc.errno not in HELD:  # no lock to be had here at all (ENOLCK on NFS)
            raise RunDirError(f"cannot lock {ctx.run_dir / name}: {exc.strerror or exc}") from None
        raise RunDirError(_in_use(ctx, holder, exclusive)) from None
    handle.seek(0)
    handle.truncate()  # a shared holder leaves it empty: the pid there would be an earlier exclusive holder's
    if exclusive:
        handle.write(f"{os.getpid()}\n")
        handle.flush()
    return handle


def _in_use(ctx: LaunchContext, holder: str, exclusive: bool) -> str:
    """Why a lock of the run directory was refused, naming the launcher that holds it (its pid, where known)."""
    node = "" if ctx.node_rank is None else f" of node {ctx.node_rank}"
    by = f"another launcher{node} (pid {holder})" if holder else "the launchers of other nodes"
    if not exclusive:
        by = f"a launcher of every node (pid {holder or '?'})"
    return f"the run directory {ctx.run_dir} is in use by {by}: give this run its own --run-dir, or stop that one first"


def in_use(ctx: LaunchContext) -> str | None:
    """Why `run` would refuse the run directory as another launcher's (what `lock` would raise), None if it would
    not; for dry-run and preflight, which create and write nothing: the lock files are only opened to read, and a
    lock taken to test is dropped at once. They said "run dir ok (exists)" while `run` exited 2 (QA 2026-12-07)."""
    wanted = [(".launcher.lock", ctx.node_rank is None)]
    if ctx.node_rank is not None:
        wanted.append((f".launcher.node{ctx.node_rank}.lock", True))
    for name, exclusive in wanted:
        try:
            # read-write, never created: on NFS flock is emulated by fcntl locks, and an exclusive one needs a file
            # open for writing (flock(2)); read-only, every test failed with EBADF and read as "in use"
            fd = os.open(ctx.run_dir / name, os.O_RDWR)
        except OSError:
            continue  # no lock file (or none we may open): nobody holds it
        with os.fdopen(fd, encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in HELD:
                    continue  # the test itself failed: not a sign of a holder (run's own lock says more)
                return _in_use(ctx, handle.read().strip(), exclusive)
    return None


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
