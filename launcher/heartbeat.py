"""Reads the ranks' heartbeat files: <run_dir>/heartbeats/rank<R>.json (format: examples/heartbeat.py).

A record is one JSON object padded with spaces; a torn or missing one reads as nothing (the next poll retries).
Only the ranks the launcher runs on this node are read, so the cost is one small read per local rank per poll.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

HEARTBEAT_DIR = "heartbeats"
RECORD_BYTES = 4096
PHASES = ("start", "load", "train", "save", "done")


@dataclass(frozen=True)
class Beat:
    rank: int
    pid: int
    seq: int
    phase: str
    step: int  # the last completed step
    step_s: float | None = None
    compute_s: float | None = None
    resumed_from: int | None = None
    checkpoint: dict[str, Any] | None = None
    stacks: str | None = None  # "SIGUSR1": faulthandler dumps the stacks on that signal
    written: float | None = None  # wall-clock time of the write (the file's mtime; not part of the record)

    @classmethod
    def parse(cls, raw: bytes) -> Beat | None:
        try:
            doc = json.loads(raw.decode("utf-8", "strict").strip() or "null")
            beat = cls(
                rank=int(doc["rank"]),
                pid=int(doc["pid"]),
                seq=int(doc["seq"]),
                phase=str(doc["phase"]),
                step=int(doc.get("step", 0)),
                step_s=_num(doc.get("step_s")),
                compute_s=_num(doc.get("compute_s")),
                resumed_from=None if doc.get("resumed_from") is None else int(doc["resumed_from"]),
                checkpoint=_checkpoint(doc.get("checkpoint")),
                stacks=doc.get("stacks") if isinstance(doc.get("stacks"), str) else None,
            )
        except (ValueError, TypeError, KeyError, UnicodeDecodeError, OverflowError, AttributeError):
            # a record any trainer may write: one that does not parse (Infinity where an integer goes, a list for the
            # record) reads as nothing, as a torn write does; it crashed the launcher and killed the job (QA)
            return None
        return beat if beat.phase in PHASES else None


def _num(value: object) -> float | None:
    """A finite number, else None (not reported). JSON's Infinity as a step time made every rank's step timeout
    infinite (the slowest recent step bounds it): hangs went undetected for the rest of the job (QA 2026-12-07)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range
        return None
    return number if math.isfinite(number) else None


def _checkpoint(value: object) -> dict[str, Any] | None:
    """The checkpoint note, its step an integer (Megatron-style "iter_0000500" or Infinity: no note)."""
    if not isinstance(value, dict):
        return None
    step = value.get("step", -1)
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    return value


def read_beat(directory: Path, rank: int) -> Beat | None:
    """The rank's last record, stamped with when it was written: progress is timed from the write, not from the
    poll that saw it. The file's name says whose record it is: a record's own "rank" field that differs (a trainer
    writing its local rank into rank<global>.json) made the watchdog look up a rank it does not watch, and the
    launcher died of a KeyError and killed the healthy job (QA 2026-12-07); the pid ties it to the process."""
    try:
        with open(directory / f"rank{rank}.json", "rb") as f:
            beat = Beat.parse(f.read(RECORD_BYTES))
            return beat and replace(beat, rank=rank, written=os.fstat(f.fileno()).st_mtime)
    except OSError:
        return None
