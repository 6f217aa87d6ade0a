"""The launcher's own event log: timestamped lines in <run_dir>/launcher.log, echoed on stderr."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO


class EventLog:
    def __init__(self, path: Path | None, echo: TextIO | None = sys.stderr) -> None:
        self.path = path
        self.echo = echo
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 (closed in close())

    def __call__(self, message: str, echo: bool = True) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        if self._file:
            self._file.write(f"{stamp} {message}\n")
            self._file.flush()
        if echo and self.echo:
            self.echo.write(f"launcher: {message}\n")
            self.echo.flush()

    def close(self) -> None:
        if self._file:
            self._file.close()
            self._file = None
