"""A request naming a saved cluster, with a DATABASE_URL that cannot be opened: plan, estimate and render say so in a
line, exit 2, as the account verbs do (it was SQLAlchemy's OperationalError traceback, exit 1: QA D8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REQUEST = {"model": "llama-3-8b", "cluster": {"saved": "nope"}, "training": {"global_batch_size": 64}}
UNREACHABLE = {
    "postgresql://x:y@127.0.0.1:1/db": "DATABASE_URL: cannot open the database: connection failed:",
    "sqlite:////proc/trainplan-cannot-be-here.db": "DATABASE_URL: cannot open the database: unable to open database",
}


@pytest.mark.parametrize("url", list(UNREACHABLE))
def test_a_saved_cluster_on_a_database_that_cannot_be_opened(url: str, tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": url}
    for verb, extra in (("plan", ()), ("estimate", ()), ("render", ("--out", str(tmp_path / "out")))):
        request = {**REQUEST, "parallel": {"tp": 1}} if verb == "estimate" else REQUEST
        done = subprocess.run(
            [sys.executable, "-m", "app", verb, *extra],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 2, (verb, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, (verb, done.stderr)
        assert done.stderr.startswith(f"error: {UNREACHABLE[url]}"), (verb, done.stderr)
    assert not (tmp_path / "out").exists()
