"""The launcher's own event log: timestamped lines in <run_dir>/launcher.log, echoed on stderr.

A log file that cannot be written (a full disk) never stops the launcher or the job: the first error is said on
the console, and the events go on to the console only.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (mypy reads it so), without importing typing: docs/launcher.md
if TYPE_CHECKING:
    from typing import TextIO


class EventLog:
    def __init__(self, path: Path | None, echo: TextIO | None = sys.stderr) -> None:
        self.path = path
        self.echo = echo
        self._file: TextIO | None = None
        if path:
            try:
                self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
            except OSError as exc:
                self._lost(exc)

    def __call__(self, message: str, echo: bool = True) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
        if self._file:
            try:
                self._file.write(f"{stamp} {message}\n")
                self._file.flush()
            except OSError as exc:
                self._lost(exc)
        if echo and self.echo:
            with contextlib.suppress(OSError, ValueError):
                self.echo.write(f"launcher: {message}\n")
                self.echo.flush()

    def _lost(self, exc: OSError) -> None:
        self.close()
        if self.echo:
            with contextlib.suppress(OSError, ValueError):
                self.echo.write(
                    f"launcher: cannot write {self.path} ({exc.strerror}); the job goes on, events go "
                    f"to the console only\n"
                )

    def close(self) -> None:
        if self._file:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
