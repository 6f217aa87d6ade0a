"""Garbage collection waits while the launcher starts (launcher/startup.py): off from `python -m launcher` until the
agents' Popen under `run`, or until any other verb begins, and turned back on only where the launcher turned it off."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, launcher_env, write_plan
from make_plan import tiny_plan
from test_runner import agent, run

from launcher import runner, startup

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    startup._deferred = False
    yield
    startup._deferred = False
    if was:
        gc.enable()
    else:
        gc.disable()


def test_deferred_and_resumed() -> None:
    startup.defer_collection()
    assert not gc.isenabled()
    startup.resume_collection()
    assert gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off() -> None:
    gc.disable()
    startup.defer_collection()
    startup.resume_collection()
    assert not gc.isenabled()
    startup.resume_collection()  # and resuming without a deferral changes nothing
    assert not gc.isenabled()


def test_the_runner_resumes_after_the_agents_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at_popen: list[bool] = []
    popen = subprocess.Popen

    def recording(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        at_popen.append(gc.isenabled())
        return popen(*args, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(runner.subprocess, "Popen", recording)
    startup.defer_collection()
    code, _console, _log = run(tmp_path, [agent(tmp_path, "ok")])
    assert code == 0
    assert at_popen == [False]  # still deferred when the agent started ...
    assert gc.isenabled()  # ... and collecting while the job ran


def test_python_m_launcher_defers_then_resumes_for_other_verbs(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, tiny_plan())
    code = f"""
import contextlib, gc, io, runpy, sys
from launcher import startup
calls = []
defer = startup.defer_collection
def recording():
    calls.append(gc.isenabled())
    defer()
startup.defer_collection = recording
sys.argv = ["launcher", "show", {str(plan)!r}]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_module("launcher", run_name="__main__")
    except SystemExit as exc:
        assert exc.code == 0, exc.code
print(calls, gc.isenabled(), "launcher.cli" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=launcher_env(), cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[True]", "True", "True"]
