import os

import pytest

# Deterministic hypothesis runs and CPU-only DeepSpeed everywhere in the suite.
os.environ.setdefault("DS_ACCELERATOR", "cpu")


@pytest.fixture(autouse=True)
def _fresh_interned_specs() -> None:
    """Each test plans on its own spec instances: a test that patches a cost function must not read values an
    earlier test's equal specs cached (app/planner/interning.py; tests/planner/test_interning.py tests the sharing)."""
    from app.planner import interning

    interning.clear()
