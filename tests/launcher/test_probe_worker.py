"""The probe worker's nccl-tests arithmetic (the worker imports torch; the test may)."""

from __future__ import annotations

import pytest

from launcher.workers.probe_worker import BUS_FACTOR


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 8, 1.75),
        ("all_reduce", 2, 1.0),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 4, 0.75),
        ("send_recv", 16, 1.0),
    ],
)
def test_bus_bandwidth_factors(op: str, n: int, factor: float) -> None:
    assert BUS_FACTOR[op](n) == pytest.approx(factor)
