"""Agents' own failure reports, read from their output."""

from __future__ import annotations

from launcher.explain import agent_report

TORCHRUN = """
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
w.py FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-30_15:35:55
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 3662)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 3662
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_15:35:55
  host      : node3
  rank      : 5 (local_rank: 1)
  exitcode  : -9 (pid: 3663)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 3663
======================================================
"""


def test_torchrun_root_cause() -> None:
    report = agent_report(TORCHRUN)
    assert report == (
        "torchrun reports rank 5 (local_rank 1, pid 3663, host node3) exitcode -9: "
        "Signal 9 (SIGKILL) received by PID 3663"
    )


def test_deepspeed_return_code_and_silence() -> None:
    assert agent_report("[ERROR] [launch.py:325:sigkill_handler] ['python'] exits with return code = -9") == (
        "deepspeed reports a rank exited with return code -9"
    )
    assert agent_report("all good\n") is None
