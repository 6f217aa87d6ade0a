"""Checks of where the job writes: the checkpoint directories its arguments name (`--save DIR`, `--save=DIR`,
also inside an `--args-file` the plan carries) and the run directory.

A directory is judged by writing a file into it (or into its nearest existing parent, when it does not exist
yet): permission bits alone say nothing to root, and a read-only mount or a file in the way must fail here, not
at the first save an hour into the run. The free space is compared with the planner's checkpoint size.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from pathlib import Path

from launcher import checks
from launcher.checks import FAIL, OK, WARN, Check, is_local_command, not_checked_here
from launcher.command import Command
from launcher.context import LaunchContext
from launcher.rundir import in_use

SAVE_FLAGS = ("--save",)
INTERVAL_FLAGS = ("--save-interval",)
ARGS_FILE_FLAGS = ("--args-file",)


def flag_values(words: list[str], names: tuple[str, ...]) -> list[str]:
    """Values of `--name VALUE` and `--name=VALUE` in a word list."""
    out = []
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in names and eq:
            out.append(value)
        elif word in names and i + 1 < len(words):
            out.append(words[i + 1])
    return out


def training_words(ctx: LaunchContext) -> list[str]:
    """The training script's arguments, with those of an --args-file the plan carries."""
    words = ctx.script_argv(ctx.nodes()[0])
    for args_file in map(Path, flag_values(words, ARGS_FILE_FLAGS)):
        if args_file.parent == ctx.run_dir and args_file.name in ctx.plan.files:
            with contextlib.suppress(ValueError):
                words += shlex.split(ctx.plan.files[args_file.name], comments=True)
    return words


def save_dirs(ctx: LaunchContext) -> list[Path]:
    """The checkpoint directories the job's arguments name, absolute (relative ones: from the working dir)."""
    words = training_words(ctx)
    found: list[Path] = []
    for value in flag_values(words, SAVE_FLAGS):
        if not value:  # --save= (what bench passes): no checkpoint
            continue
        directory = Path(ctx.working_dir) / value
        if directory not in found:
            found.append(directory)
    return found


def probe_write(directory: Path) -> str | None:
    """None if a file can be created where `directory` is (or will be); else why not."""
    probe = directory
    while not probe.exists():
        if probe == probe.parent:
            return f"no existing parent of {directory}"
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    # What tempfile.mkstemp does, without importing tempfile, random and shutil on the way to the job's start
    name = probe / f".trainplan-write-check-{os.getpid()}-{os.urandom(6).hex()}"
    try:
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(name)
    except OSError as exc:
        if probe != directory:  # name what was asked for: "/proc/nope" said "cannot write in /proc: No such file"
            return f"{directory} does not exist and cannot be made: cannot write in {probe}: {exc.strerror}"
        return f"cannot write in {probe}: {exc.strerror}"
    return None


def output_refusal(value: str | None, option: str = "--output") -> str | None:
    """Why a report cannot be written to `value` (None: it can, or no path was given), checked before the job starts:
    a missing folder, a directory given as the file or a folder that cannot be written ran the whole probe or bench
    and then crashed with a traceback, exit 1 (QA 2026-12-07). The folder is judged by creating a file in it (as
    write_atomic will), since permission bits say nothing to root and a read-only mount must fail here."""
    if value is None:
        return None
    if not value:
        return f"{option} is empty: give a file path, or leave the option out"
    path = Path(value)
    if path.is_dir():
        return f"{option} {value} is a directory: give a file path (e.g. {path / 'report.json'})"
    folder = path.parent
    if not folder.is_dir():
        return f"{option} {value}: its folder {folder} does not exist (or is not a directory)"
    why = probe_write(folder)
    return f"{option} {value}: {why}" if why else None


def free_bytes(directory: Path) -> int:
    """What shutil.disk_usage(directory).free says: the bytes an unprivileged user may still write."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def check_checkpoint_dirs(ctx: LaunchContext, commands: list[Command]) -> Check:
    if not any(is_local_command(c) for c in commands):
        return not_checked_here("checkpoints", commands)
    dirs = save_dirs(ctx)
    if not dirs:
        return Check(
            "checkpoints",
            WARN,
            "the job's arguments name no --save directory: a failure loses all steps",
            "add --save DIR (and --load DIR) to the training arguments",
        )
    pred = ctx.plan.prediction
    need = pred.checkpoint_bytes if pred else None
    for directory in dirs:
        why = probe_write(directory)
        if why:
            return Check(
                "checkpoints",
                FAIL,
                f"--save {directory}: {why}",
                "make the checkpoint directory writable (or point --save elsewhere) before training starts",
            )
        probe = directory
        while not probe.exists():
            probe = probe.parent
        free = free_bytes(probe)
        if need and free < need:
            return Check(
                "checkpoints",
                WARN,
                f"--save {directory}: {free / 2**30:.1f} GiB free, a checkpoint takes "
                f"{need / 2**30:.1f} GiB (prediction.checkpoint_bytes)",
                "free space, or save elsewhere: saves will be skipped",
            )
    planned = pred.checkpoint_interval_steps if pred else None
    given = flag_values(training_words(ctx), INTERVAL_FLAGS)
    if planned and given and given[-1] != str(planned):  # argparse: the last one wins
        return Check(
            "checkpoints",
            WARN,
            f"--save-interval {given[-1]}, but the plan's interval is {planned} steps "
            "(prediction.checkpoint_interval_steps: Daly's optimum for the cluster's MTBF)",
            "use the plan's interval, or re-plan with the cluster's mtbf_hours / checkpoint_storage_GBps",
        )
    every = f", every {given[-1]} steps" if given else ""
    return Check("checkpoints", OK, ", ".join(str(d) for d in dirs) + f" writable{every}")


def check_run_dir(ctx: LaunchContext) -> Check:
    """What `run` refuses of its run directory: one it cannot make or write in, or one another launcher holds."""
    why = probe_write(ctx.run_dir)
    if why:
        return Check("run dir", FAIL, f"{ctx.run_dir}: {why}", "choose --run-dir elsewhere")
    held = in_use(ctx)
    if held:
        return Check("run dir", FAIL, held, "wait for that launcher to end, or choose --run-dir elsewhere")
    return Check("run dir", OK, f"{ctx.run_dir} ({'exists' if ctx.run_dir.exists() else 'will be created'})")


def quick_checks(ctx: LaunchContext, commands: list[Command]) -> list[Check]:
    """The checks `run` makes before starting (launcher/checks.py's and the checkpoint directories)."""
    return [*checks.quick_checks(ctx, commands), check_checkpoint_dirs(ctx, commands)]
