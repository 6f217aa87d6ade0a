"""Runs launcher.runner.Runner on commands from a JSON file (for the runner tests that send signals)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from launcher.command import Command
from launcher.events import EventLog
from launcher.runner import Runner, RunPolicy

if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text())
    commands = [Command(**{**c, "argv": tuple(c["argv"])}) for c in spec["commands"]]
    policy = RunPolicy(
        spec["grace_s"],
        spec["max_restarts"],
        spec["restarts_inside"],
        Path(spec["run_dir"]),
        checkpoint_dirs=tuple(map(Path, spec.get("checkpoint_dirs", ()))),
    )
    log = EventLog(Path(spec["run_dir"]) / "launcher.log")
    sys.exit(Runner(commands, policy, log).run())
