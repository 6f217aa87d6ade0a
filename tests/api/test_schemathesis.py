"""Schemathesis with every check against the real server (uvicorn, an admin's token), bounded in time: no 500,
every status, content type, header and body as the OpenAPI document says, auth not ignored, deleted plans gone.

    TRAINPLAN_SCHEMATHESIS_SECONDS=600 pytest tests/api/test_schemathesis.py   # a longer run

Seeded, so that a run is reproducible (`st run ... --seed`); the configuration is tests/api/schemathesis.toml.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import _reset_postgres
from tests.api.test_server import _env, _token, serving

HERE = Path(__file__).resolve().parent
ST = Path(sys.executable).with_name("st")
SECONDS = int(os.environ.get("TRAINPLAN_SCHEMATHESIS_SECONDS", "0") or 0)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not ST.exists() and not shutil.which("st"), reason="schemathesis is not installed (pip install -e '.[test]')"
    ),
]


def run_schemathesis(db_url: str, runs: list[tuple[str, int]], tmp_path: Path) -> list[tuple[int, str]]:
    """`st run` once per (phases, seconds) against one server: each group of phases gets its own time budget (with
    one budget for all, a slow machine once spent it all on the coverage phase and never fuzzed)."""
    env = _env(
        db_url,
        TRAINPLAN_RATE_LIMIT_PER_MINUTE="0",
        TRAINPLAN_MAX_SEARCH_TIME_S="0.5",  # the API contract is under test, not the search: keep each plan short
        TRAINPLAN_MAX_DEADLINE_TIME_S="1",
    )
    token = _token(env)
    results = []
    with serving(env) as (base, _proc):
        st = str(ST) if ST.exists() else "st"
        for phases, seconds in runs:
            done = subprocess.run(
                [
                    st,
                    "--config-file",
                    str(HERE / "schemathesis.toml"),
                    "run",
                    f"{base}/openapi.json",
                    "--checks",
                    "all",
                    "--max-time",
                    str(seconds),
                    "--seed",
                    "15",
                    "--phases",
                    phases,
                    "--generation-database",
                    "none",
                    "--no-color",
                    "--request-timeout",
                    "30",
                    "--report",
                    "junit",
                    "--report-dir",
                    str(tmp_path),
                ],
                env={
                    **os.environ,
                    "TRAINPLAN_ST_TOKEN": token,
                    "SCHEMATHESIS_HOOKS": str(HERE / "schemathesis_hooks.py"),
                },
                cwd=tmp_path,  # its .schemathesis/ cache goes there, not into the checkout
                capture_output=True,
                text=True,
                timeout=seconds + 300,
            )
            results.append((done.returncode, done.stdout + done.stderr))
    return results


def _summary(out: str) -> str:
    return out[out.rfind("SUMMARY") :] if "SUMMARY" in out else out[-4000:]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_schemathesis_all_checks_pass(kind: str, tmp_path: Path) -> None:
    if kind == "sqlite":
        # the schema's examples and its boundary values (coverage) once, then generated and stateful cases
        url = f"sqlite:///{tmp_path / 'st.db'}"
        runs = [("examples,coverage", SECONDS or 20), ("fuzzing,stateful", SECONDS or 22)]
    else:
        url = os.environ.get("TRAINPLAN_TEST_POSTGRES_URL", "")
        if not url:
            pytest.skip("TRAINPLAN_TEST_POSTGRES_URL is not set")
        _reset_postgres(url)
        # the deterministic phases ran on SQLite; against PostgreSQL the budget goes to generated and stateful cases
        runs = [("fuzzing,stateful", SECONDS or 18)]
    for (phases, _seconds), (code, out) in zip(runs, run_schemathesis(url, runs, tmp_path), strict=True):
        cases = re.search(r"(\d+) generated, (\d+) passed", out)
        assert code == 0 and cases, _summary(out)
        assert "failures" not in _summary(out).split("Test cases:")[-1], _summary(out)
        assert "Traceback" not in out, out[out.find("Traceback") :][:3000]  # nothing raised inside schemathesis
        for phase in phases.split(","):
            assert re.search(rf"✅\s+{phase.capitalize()}", out), _summary(out)  # the phase ran, not skipped
        if "fuzzing" in phases:
            assert int(cases.group(1)) > 100, _summary(out)  # it really ran
