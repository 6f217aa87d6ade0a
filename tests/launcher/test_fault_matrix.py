"""The fault matrix (benchmarks/fault_matrix.py), one test per fault, each with the bounds it must meet: the job
restarts from its last checkpoint (or stops cleanly), the right rank is named, a hang is detected within
2 x the predicted step upper bound + the watchdog's floor + one poll, and no process of the run is left behind.

Real processes throughout: examples/train_gpt.py on gloo, torchrun and DeepSpeed's runner, two network
namespaces as two hosts, a tmpfs for a full disk, a stand-in scontrol. Faults that need root skip without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

from fault_matrix import FAULTS, HANG_BOUND_S, table, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def marks(need: str | None) -> list[pytest.MarkDecorator]:
    return [pytest.mark.netns] if need == "netns" else []


@pytest.mark.parametrize("name", [pytest.param(n, marks=marks(need)) for n, (_, need) in FAULTS.items()])
def test_fault(name: str, tmp_path: Path) -> None:
    fault, need = FAULTS[name]
    why = unavailable(need)
    if why:
        pytest.skip(why)
    outcome = fault(tmp_path / name)
    assert outcome.orphans == 0, table([outcome])
    assert outcome.ok, table([outcome])
    if name in ("rank-sigstop", "link-down"):
        assert outcome.detect_s is not None and outcome.detect_s <= HANG_BOUND_S, table([outcome])
