"""The cyclic garbage collector is paused while searches run and restored after the last, and a search leaves no
reference cycles (what makes pausing it free: reference counting frees everything a search allocates)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from app.planner import PlanRequest, api, collector, plan

REQUEST = {
    "model": "llama-2-7b",
    "cluster": {"num_nodes": 2, "gpu": "H100-SXM"},
    "training": {"global_batch_size": 64},
}


@pytest.fixture(autouse=True)
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:  # as it was: a test that turned it off must not leave the rest of the session without collection
        gc.enable()
    else:
        gc.disable()


def test_paused_during_the_search_and_resumed_after(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    search = api._search

    def watched(*args: object, **kwargs: object) -> None:
        seen.append(gc.isenabled())
        search(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "_search", watched)
    result = plan(PlanRequest(**REQUEST))
    assert result.plans and seen and not any(seen)
    assert gc.isenabled()


def test_left_off_when_it_was_off() -> None:
    gc.disable()
    plan(PlanRequest(**REQUEST))
    assert not gc.isenabled()


def test_resumed_only_when_the_last_search_leaves() -> None:
    inside, release = threading.Event(), threading.Event()

    def other_search() -> None:
        with collector.paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other_search)
    thread.start()
    assert inside.wait(10)
    with collector.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other search still runs
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_resumed_when_the_search_raises() -> None:
    with pytest.raises(RuntimeError), collector.paused():
        raise RuntimeError("a search that fails")
    assert gc.isenabled()


def test_a_search_leaves_no_reference_cycles() -> None:
    plan(PlanRequest(**REQUEST))  # catalogue, presets and caches loaded once, outside the count
    gc.collect()
    gc.disable()
    result = plan(PlanRequest(**REQUEST))
    del result
    assert gc.collect() == 0


def test_settled_freezes_the_start_and_spaces_collections_until_it_ends() -> None:
    before_thresholds, before_frozen = gc.get_threshold(), gc.get_freeze_count()
    kept = [object() for _ in range(100)]  # alive at the start: frozen
    with collector.settled():
        assert gc.get_threshold()[0] == collector.SERVICE_GEN0
        assert gc.get_threshold()[1:] == before_thresholds[1:]
        assert gc.get_freeze_count() >= before_frozen + len(kept)
        assert gc.isenabled()  # the service keeps collecting (its pages leave a few cycles)
    assert gc.get_threshold() == before_thresholds
    assert gc.get_freeze_count() == 0
