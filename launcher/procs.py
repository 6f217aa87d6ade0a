"""The process tree under the launcher, read from /proc (no psutil): descendants, workers, exit statuses.

Workers are the topmost descendants whose environment carries ``RANK`` (their own children, e.g. data
loader workers, inherit it and are not counted). A worker that exits stays a zombie until its agent reaps
it; while it is one, /proc/<pid>/stat still holds its wait status (field 52, Linux >= 3.5).
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (mypy reads it so), without importing typing: docs/launcher.md
if TYPE_CHECKING:
    from collections.abc import Collection

PROC = "/proc"


@dataclass(frozen=True)
class Worker:
    """A training rank's process, as /proc shows it."""

    pid: int
    rank: int
    local_rank: int
    start_ticks: int  # start time, to tell a recycled pid from the process we saw


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # comm (field 2) is in parentheses and may contain spaces: split after the last ')'
    return [raw[: raw.index(" ")], "comm", *raw[raw.rindex(")") + 2 :].split()]


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (stat field 22): with the pid, it names one process."""
    fields = _stat_fields(pid)
    return int(fields[21]) if fields else None


def parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[3]) if fields else None


def children_map() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir(PROC):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields:
                tree.setdefault(int(fields[3]), []).append(int(name))
    return tree


def children(pid: int) -> list[int]:
    """Direct children from /proc/<pid>/task/*/children (no scan of every process); [] if it is gone."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"{PROC}/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        with contextlib.suppress(OSError), open(f"{PROC}/{pid}/task/{tid}/children", "rb") as f:
            out.extend(int(c) for c in f.read().split())
    return out


HAVE_CHILDREN_FILES = os.path.exists(f"{PROC}/self/task/{os.getpid()}/children")


def descendants(root: int, skip: frozenset[int] = frozenset()) -> list[int]:
    """All processes below `root`, parents before children, leaving out the subtrees rooted at `skip`."""
    tree = None if HAVE_CHILDREN_FILES else children_map()
    out: list[int] = []
    todo = children(root) if tree is None else list(tree.get(root, []))
    while todo:
        pid = todo.pop(0)
        if pid in skip:
            continue
        out.append(pid)
        todo.extend(children(pid) if tree is None else tree.get(pid, []))
    return out


def environ(pid: int) -> dict[str, str]:
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def find_workers(root: int, known: Collection[int] = ()) -> list[Worker]:
    """Topmost descendants of `root` with RANK in their environment. Nothing below a `known` worker is one: its
    children inherit RANK (DataLoader workers, helpers), and a rank whose main thread had exited (state Z, its other
    threads still running) showed them, so a child was taken for a worker of a restarted group and a successful
    job reported as failed (QA, 2026-12-06)."""
    tree = None if HAVE_CHILDREN_FILES else children_map()
    found: list[Worker] = []
    todo = children(root) if tree is None else list(tree.get(root, []))
    while todo:
        pid = todo.pop(0)
        if pid in known:
            continue
        env = environ(pid)
        fields = _stat_fields(pid)
        if "RANK" in env and fields and fields[2] != "Z":
            with contextlib.suppress(ValueError):
                found.append(Worker(pid, int(env["RANK"]), int(env.get("LOCAL_RANK", "-1")), int(fields[21])))
                continue
        todo.extend(children(pid) if tree is None else tree.get(pid, []))
    return sorted(found, key=lambda w: w.rank)


def zombie_status(pid: int) -> int | None:
    """The raw wait status of an exited, not yet reaped process; None if it is running or gone."""
    fields = _stat_fields(pid)
    if not fields or fields[2] != "Z" or len(fields) < 52:
        return None
    return int(fields[51])


def describe_status(status: int | None) -> str:
    """Words for a wait status (as from zombie_status) or None."""
    if status is None:
        return "exited (status already collected by its parent)"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"killed by signal {sig} ({signal_name(sig)})"
    return f"exited with code {os.WEXITSTATUS(status)}"


def describe_returncode(code: int) -> str:
    """Words for a Popen returncode (negative: killed by that signal)."""
    if code < 0:
        return f"killed by signal {-code} ({signal_name(-code)})"
    if code > 128 and code - 128 in signal.valid_signals():
        return f"exited with code {code} (128 + {signal_name(code - 128)})"
    return f"exited with code {code}"


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def signal_pids(pids: list[int], sig: int) -> list[int]:
    """Send `sig` to each pid; return those it reached."""
    reached = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            reached.append(pid)
    return reached


def make_subreaper() -> bool:
    """Become the parent of orphaned descendants (PR_SET_CHILD_SUBREAPER), so that none escapes cleanup."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER = 36
    except (OSError, AttributeError):
        return False


def reap_orphans(own_children: set[int], skip: frozenset[int] = frozenset()) -> None:
    """Collect zombies re-parented to us (we are a subreaper), leaving our own Popen children, and the processes
    in `skip` (children we had before the job, e.g. of a program that embeds the runner), alone."""
    for pid in children(os.getpid()):
        if pid not in own_children and pid not in skip and zombie_status(pid) is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def state(pid: int) -> str | None:
    """The process's state letter (R running, S sleeping, D disk wait, T stopped, Z zombie); None if gone."""
    fields = _stat_fields(pid)
    return fields[2] if fields else None
