"""CPython's cyclic garbage collector, paused while a search runs.

A search allocates some 10^5 short-lived objects (configurations, stage times, memo keys) and leaves no reference
cycles: reference counting frees all of it (a 70B and a 1T MoE search leave 0 objects for `gc.collect()` to find).
Yet every 700 allocations the collector starts, and its older generations traverse everything alive: the model's
memo, the catalogue, pydantic's schemas. On Llama-2 70B over 256 H100 that was 10-15 % of the search's CPU time
(benchmarks/search_speed.py, docs/planner.md "Search speed"). The collector is therefore paused while any search
runs in the process (the service runs them in threads: the last to finish resumes it) and left as it was found.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_active = 0
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """Automatic collection off from the first search that enters to the last that leaves, unless it was off."""
    global _active, _was_enabled
    with _lock:
        if _active == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _was_enabled:
                gc.enable()
