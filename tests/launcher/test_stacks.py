"""Stack traces of a hung job's ranks (launcher/stacks.py) with real processes and signals."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launcher import stacks

# A rank whose SIGUSR1 handler writes its dump a line at a time, as a dump of many threads under load arrives.
SLOW_DUMP = textwrap.dedent(
    """
    import signal, sys, time
    path = sys.argv[1]
    def dump(*_):
        with open(path, "a") as f:
            for i in range(8):
                f.write(f"line {i}\\n"); f.flush(); time.sleep(0.05)
    signal.signal(signal.SIGUSR1, dump)
    print("ready", flush=True)
    while True:
        time.sleep(0.01)
    """
)


def test_a_dump_is_read_once_it_stops_growing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher SIGKILLs the ranks right after it collects their stacks: it stopped waiting at the first bytes,
    and 2 of 5 hang dumps were cut mid-line (the healthy peer's, the one that shows the collective it waits in; QA,
    2026-12-07). It waits until the file stops growing."""
    monkeypatch.setattr(stacks.shutil, "which", lambda _name: None)  # SIGUSR1, not py-spy
    out = tmp_path / "stacks"
    out.mkdir()
    rank = subprocess.Popen(
        [sys.executable, "-c", SLOW_DUMP, str(out / "rank0.txt")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert rank.stdout is not None and rank.stdout.readline().strip() == "ready"
        said = stacks.collect([(0, rank.pid, "SIGUSR1")], tmp_path)
        rank.kill()  # as the launcher does at once
        assert said.startswith("stack traces (faulthandler) of rank(s) 0")
        assert (out / "rank0.txt").read_text().splitlines() == [f"line {i}" for i in range(8)]
    finally:
        rank.kill()
        rank.wait(timeout=10)
