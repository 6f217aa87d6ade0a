"""The progress channel `python -m launcher run` watches: one small file per rank, standard library only.

    <dir>/rank<R>.json     one JSON object, padded with spaces to RECORD_BYTES and rewritten in place

The launcher passes the run directory as TRAINPLAN_RUN_DIR; the files go to $TRAINPLAN_RUN_DIR/heartbeats.
The record is written with one pwrite at offset 0 of a file whose blocks were written when it was created,
so a heartbeat needs no new disk blocks: it keeps working when the run directory's disk is full. A reader
may see a torn record (it retries on the next poll). A file that was unlinked (its folder deleted while the rank
runs) is made again at the next write, so the launcher sees the heartbeat come back rather than a rank that stopped
writing. Fields (docs/launcher.md, "Heartbeats"):

    rank, pid, seq (bumped on every write), time (unix seconds), phase (start | load | train | save | done),
    step (last completed step), step_s and compute_s (wall and local-compute time of that step),
    resumed_from (the checkpoint's step), checkpoint ({"step", "saved", "error"} of the last attempt, with
    "failed": the saves failed so far, and "last_saved": the step of the last one saved),
    stacks ("SIGUSR1" when faulthandler dumps the stacks on SIGUSR1)

Any trainer can write it: this file has no dependency beyond the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

RECORD_BYTES = 4096


def heartbeat_dir() -> str | None:
    run_dir = os.environ.get("TRAINPLAN_RUN_DIR")
    return os.path.join(run_dir, "heartbeats") if run_dir else None


def _open(directory: str, rank: int) -> int | None:
    """The rank's record file with its blocks written, or None where it cannot be made (e.g. the disk is full)."""
    try:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(os.path.join(directory, f"rank{rank}.json"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        os.pwrite(fd, b" " * RECORD_BYTES, 0)  # real blocks, so that later writes need no free space
        os.ftruncate(fd, RECORD_BYTES)
    except OSError:
        os.close(fd)
        return None
    return fd


class Heartbeat:
    def __init__(self, directory: str | None, rank: int) -> None:
        self.state: dict[str, Any] = {"rank": rank, "pid": os.getpid(), "seq": 0, "phase": "start", "step": 0}
        self.directory, self.rank = directory, rank
        self.fd: int | None = None
        if not directory:
            return
        self.fd = _open(directory, rank)  # None: no channel, the launcher does not watch this rank
        self.beat()

    def _reopen_if_unlinked(self) -> None:
        """The file (or its folder) was deleted while this rank runs: writes into the unlinked file reach nobody, and
        the launcher lost sight of the rank (QA 2026-12-07). Make it again; where that fails, keep the old one."""
        if self.fd is None or self.directory is None:
            return
        try:
            if os.fstat(self.fd).st_nlink > 0:
                return
        except OSError:
            return
        fd = _open(self.directory, self.rank)
        if fd is not None:
            os.close(self.fd)
            self.fd = fd

    def beat(self, **changes: Any) -> None:
        """Record progress (step, phase, timings, ...); never raises: losing a heartbeat must not stop training."""
        if self.fd is None:
            return
        self._reopen_if_unlinked()  # one fstat a write
        self.state.update(changes)
        self.state["seq"] += 1
        self.state["time"] = time.time()
        data = json.dumps(self.state, separators=(",", ":")).encode()
        if len(data) >= RECORD_BYTES:  # an overlong error message: keep the rest of the record
            self.state["checkpoint"] = {**(self.state.get("checkpoint") or {}), "error": "(too long to record)"}
            data = json.dumps(self.state, separators=(",", ":")).encode()[: RECORD_BYTES - 1]
        with contextlib.suppress(OSError):
            os.pwrite(self.fd, data.ljust(RECORD_BYTES - 1) + b"\n", 0)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
