"""The cyclic garbage collector, off while the launcher starts.

The imports on the way to the agents' start build the plan's classes and allocate enough for some thirty
collections: about 4 ms of the launcher's ~60 ms before the agents' Popen (40 alternating starts of the imports, with
and without, on the 2-core machine; docs/launcher.md "Overhead"). Nothing made then is garbage in a cycle, so
`python -m launcher` defers collection until the agents run (the runner resumes it after their Popen) or until a
verb other than `run` begins (`cli.main`). Only a collector this module turned off is turned back on.
"""

from __future__ import annotations

import gc

_deferred = False


def defer_collection() -> None:
    global _deferred
    if gc.isenabled():
        gc.disable()
        _deferred = True


def resume_collection() -> None:
    global _deferred
    if _deferred:
        _deferred = False
        gc.enable()
