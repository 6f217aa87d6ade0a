"""Echoes a rank's log file live (for agents that write rank output to files only, e.g. deepspeed)."""

from __future__ import annotations

import glob
import os
import time
from typing import BinaryIO


class Follower:
    def __init__(self, pattern: str, console: BinaryIO) -> None:
        self.pattern, self.console = pattern, console
        self.since = time.time() - 1.0  # files of earlier attempts are older
        self.file: BinaryIO | None = None

    def _open(self) -> None:
        fresh = [p for p in glob.glob(self.pattern) if os.path.getmtime(p) >= self.since]
        if fresh:
            self.file = open(max(fresh, key=os.path.getmtime), "rb")  # noqa: SIM115 (closed in close())

    def poll(self) -> None:
        if self.file is None:
            self._open()
        if self.file is not None:
            data = self.file.read()
            if data:
                self.console.write(data)
                self.console.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
