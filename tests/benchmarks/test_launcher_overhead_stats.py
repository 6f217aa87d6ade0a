"""The paired interval benchmarks/launcher_overhead.py reports for the time to the first step: the sign test's
order statistics, checked by hand and by their coverage on simulated pairs."""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "examples")]

from launcher_overhead import median_interval, paired_first_step, rotation  # noqa: E402


def test_order_statistics_by_hand() -> None:
    # n = 10: P(Binomial(10, 1/2) < 2) = 11/1024 <= 5 %, P(< 3) = 56/1024 > 5 %: the 2nd and 9th values
    assert median_interval([float(x) for x in range(10, 0, -1)]) == (5.5, 2.0, 9.0)
    # n = 20: P(< 6) = 0.021, P(< 7) = 0.058: the 6th and 15th
    assert median_interval([float(x) for x in range(20)]) == (9.5, 5.0, 14.0)
    assert median_interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)  # too few for an interval: the range


def test_covers_the_median_at_least_as_often_as_it_says() -> None:
    rng = random.Random(7)
    for n in (8, 10, 15):
        hits = 0
        for _ in range(2000):
            _, low, high = median_interval([rng.gauss(0.0, 1.0) for _ in range(n)])
            hits += low <= 0.0 <= high
        assert 0.9 <= hits / 2000 <= 0.995, (n, hits)


def test_rotation_puts_every_way_after_every_other() -> None:
    assert [rotation(["a", "b"], i) for i in range(3)] == [["a", "b"], ["b", "a"], ["a", "b"]]
    rounds = [rotation(["a", "b", "c"], i) for i in range(6)]
    assert len({tuple(r) for r in rounds}) == 6  # all six orders, each once
    follows = {(r[k], r[k + 1]) for r in rounds for k in range(2)}
    assert follows == {(x, y) for x in "abc" for y in "abc" if x != y}


def test_paired_first_step_is_relative_to_the_base_run_of_the_same_round() -> None:
    base = [(1.0, 0, 0, 0, 0, None), (2.0, 0, 0, 0, 0, None), (4.0, 0, 0, 0, 0, None)]
    other = [(1.1, 0, 0, 0, 0, None), (2.0, 0, 0, 0, 0, None), (3.0, 0, 0, 0, 0, None)]
    mid, low, high = paired_first_step(base, other)  # type: ignore[arg-type]
    assert (round(mid, 6), round(low, 6), round(high, 6)) == (0.0, -0.25, 0.1)
