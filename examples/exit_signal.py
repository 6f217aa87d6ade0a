"""Megatron's --exit-signal-handler (megatron/training/dist_signal_handler.py) for examples/train_gpt.py, standard
library only, so that the trainer installs it before its first heavy import.

SIGTERM, SIGINT or SIGHUP set a flag; the trainer reduces it over the ranks (with the step's loss, or at its start-up
checks) and every rank saves after the same step and exits 0. SIGHUP is what a closed terminal or a dropped ssh
session sends the launcher, which forwards it (torchrun passes it on to the ranks): without a handler the ranks died
of it and lost the steps since the last save.

Installed as the script's first statement: `import torch` alone takes 1-2 s, DeepSpeed's import, the process group's
initialisation and the model's construction many more, and a SIGTERM in that time (the launcher stopping a job
that has just started, a preemption notice, an operator's kill of a rank) killed the rank outright with Python's
default action (a KeyboardInterrupt traceback for SIGINT), instead of the clean exit the launcher expects (QA
2026-12-07). What is left unguarded is the interpreter's own start, before the script's first line (tens of ms).
"""

from __future__ import annotations

import signal
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class ExitSignal:
    """Record the first termination signal; `received` is its number (None: none came)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {sig: signal.signal(sig, self._handler) for sig in SIGNALS}

    def _handler(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else "no signal"

    def disable(self) -> None:
        """--no-exit-signal-handler: the handlers that were there before, and a signal that came in the meantime
        delivered again, so that the process ends as it would have without this handler."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        if self.received is not None:
            signal.raise_signal(self.received)
