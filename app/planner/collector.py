"""CPython's cyclic garbage collector: paused while a search runs, and spaced out in the service's process.

A search allocates some 10^5 short-lived objects (configurations, stage times, memo keys) and leaves no reference
cycles: reference counting frees all of it (a 70B and a 1T MoE search leave 0 objects for `gc.collect()` to find).
Yet every 700 allocations the collector starts, and its older generations traverse everything alive: the model's
memo, the catalogue, pydantic's schemas. On Llama-2 70B over 256 H100 that was about 10 % of the search's CPU time,
on a 1T MoE over 16,384 H100 about 24 % (alternating runs; docs/planner.md, "Search"). The collector is therefore
paused while any search runs in the process (threads may run several: the last to finish resumes it) and left as it
was found.

The web process allocates the same way when it draws a large stored plan (a PP64 x VPP2 result page builds some
10^5 objects from the stored JSON and the charts), and leaves a few cycles (87 objects per page, Jinja's and
anyio's), so there the collector keeps running, less often: `settled()` (the app's lifespan) moves what the service
loaded at start (catalogue, templates, schemas) out of the collector's walks (`gc.freeze`) and starts a young
collection every SERVICE_GEN0 allocations instead of 700. That page took 237 ms of CPU with the defaults, 140 ms with
the start frozen alone, 128 ms with both — as fast as with no collection at all (16 alternating requests each,
in-process; docs/service.md).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SERVICE_GEN0 = 10_000
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


@contextmanager
def settled() -> Iterator[None]:
    """For a long-running service: what is alive now frozen out of collection and young collections spaced out;
    both undone on exit (a test process starts and stops many apps)."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(SERVICE_GEN0, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
