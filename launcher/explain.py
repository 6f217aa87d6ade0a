"""Reads an agent's own failure report out of its output (torchrun's "Root Cause", DeepSpeed's return code).

The launcher sees local workers die itself (launcher/watch.py); these reports cover ranks on other nodes.
"""

from __future__ import annotations

import re

TORCHRUN_ROOT = re.compile(
    r"Root Cause \(first observed failure\):.*?host\s*:\s*(?P<host>\S+).*?rank\s*:\s*(?P<rank>\d+) "
    r"\(local_rank: (?P<local>\d+)\).*?exitcode\s*:\s*(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)"
    r"(?:.*?traceback\s*:\s*(?P<why>[^\n]*))?",
    re.S,
)
DEEPSPEED_RC = re.compile(r"exits with return code = (-?\d+)")


def agent_report(output: str) -> str | None:
    """One line naming the failed rank and why, from what the agent printed; None when it said nothing."""
    reports = list(TORCHRUN_ROOT.finditer(output))
    if reports:
        match = reports[-1]  # the last report wins (after restarts there may be several)
        why = (match.group("why") or "").strip()
        tail = f": {why}" if why and why != "<N/A>" else ""
        return (
            f"torchrun reports rank {match['rank']} (local_rank {match['local']}, pid {match['pid']}, "
            f"host {match['host']}) exitcode {match['code']}{tail}"
        )
    codes = DEEPSPEED_RC.findall(output)
    if codes:
        return f"deepspeed reports a rank exited with return code {codes[-1]}"
    return None


def signal_of_negative_exit(code: int, output: str) -> int | None:
    """The signal n behind an agent's exit code 256 - n: DeepSpeed's launch.py exits with its rank's Popen
    returncode (-n for a rank killed by signal n), which the shell sees as 256 - n (SIGKILL: 247). Believed only
    when the agent said so ("exits with return code = -n")."""
    codes = DEEPSPEED_RC.findall(output)
    if 128 < code < 256 and codes and int(codes[-1]) == code - 256:
        return 256 - code
    return None
