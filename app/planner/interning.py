"""Equal specs share one instance across requests, so that what the search derives from them is worked out once.

The search caches what it derives from a model, a cluster and a training spec on the model instance
(`ModelSpec.memo`: layer times, stage shapes, states, option lists), keyed by the identity of the cluster and training
instances. The service parses every request into new instances, so each request started with an empty cache: the
Llama-2 70B request of benchmarks/service_latency.py took 195 ms with it empty and 156 ms with it full (2-core VM,
2026-12-07). Specs are frozen, so two that dump to the same JSON derive the same values: `interned` returns the one
seen first. The table keeps the most recently used `MAX_SPECS`, and the least recently used models go while their
caches together hold more than `MAX_MEMO` entries (one 70B search leaves about 2,000, 0.9 MB; the Kimi-K2-like preset
on 2,048 GPUs 17,500, 7.9 MB; about 450-650 bytes an entry): a service's planner process (RLIMIT_AS 2 GiB by default)
keeps under 100 MB of them. A model whose cache alone has outgrown that (planned under very many clusters and
trainings) is replaced by the newcomer. A search stopped by its time cap explores more candidates with the caches full
than empty, so under a cap the plans can depend on what the planner process planned before (the first plan's "why"
says the search was capped).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TypeVar

from pydantic import BaseModel

from app.planner.specs import ModelSpec

MAX_SPECS = 96  # of each kind together: models, clusters, trainings
MAX_MEMO = 150_000  # derived values, all interned models together (about 650 bytes each)

S = TypeVar("S", bound=BaseModel)

_table: OrderedDict[tuple[type, str], BaseModel] = OrderedDict()
_lock = threading.Lock()


def interned(spec: S) -> S:
    """The instance equal to `spec` that earlier requests used (and cached their derived values on), else `spec`."""
    key = (type(spec), spec.model_dump_json())
    with _lock:
        seen = _table.get(key)
        if seen is None or _overgrown(seen):
            seen = _table[key] = spec
        _table.move_to_end(key)
        while len(_table) > MAX_SPECS:
            _table.popitem(last=False)
        _bound_memos()  # the caches grew during the searches since the last call
    return seen  # type: ignore[return-value]  # keyed by its type


def _overgrown(spec: BaseModel) -> bool:
    return isinstance(spec, ModelSpec) and spec.memo_size() > MAX_MEMO


def _bound_memos() -> None:
    """Drop the least recently used models while their caches together exceed `MAX_MEMO` entries."""
    models = [(key, spec.memo_size()) for key, spec in _table.items() if isinstance(spec, ModelSpec)]
    total = sum(size for _key, size in models)
    for key, size in models[:-1]:  # oldest first; the newest stays
        if total <= MAX_MEMO:
            break
        del _table[key]
        total -= size


def clear() -> None:
    """Forget every interned spec (tests)."""
    with _lock:
        _table.clear()
