"""Every malformed plan.json of the corpus (tests/launcher/malformed.py) is refused by every verb with exit code 2
and a message that names the field; none ends in a traceback or starts anything."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, launcher_env, processes_mentioning
from malformed import write_corpus

from launcher.cli import main

pytestmark = pytest.mark.timeout(300)


def refused_in_process(verb: str, path: Path, run_dir: Path | None) -> tuple[int, str]:
    argv = [verb, str(path)] if verb == "show" or run_dir is None else [verb, str(path), "--run-dir", str(run_dir)]
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    return code, err.getvalue()


def test_every_verb_refuses_every_malformed_plan_naming_the_field(tmp_path: Path) -> None:
    cases = write_corpus(tmp_path / "corpus")
    assert len(cases) >= 80
    never = tmp_path / "never-created"
    for case in cases:
        for verb in case.verbs:
            run_dir = None if case.name.startswith("run_dir") else never
            code, err = refused_in_process(verb, case.path, run_dir)
            assert code == 2, (case.name, verb, err)
            assert err.startswith("launcher: ") and case.expect in err, (case.name, verb, err)
    assert not never.exists()


def test_the_cli_process_exits_2_without_a_traceback_for_each(tmp_path: Path) -> None:
    cases = write_corpus(tmp_path / "corpus")
    for case in cases:
        done = subprocess.run(
            [sys.executable, "-m", "launcher", "run", str(case.path)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=launcher_env(),
            timeout=60,
        )
        assert done.returncode == 2, (case.name, done.stderr[-2000:])
        assert "Traceback" not in done.stderr + done.stdout, (case.name, done.stderr[-2000:])
        assert case.expect in done.stderr, (case.name, done.stderr[-500:])
    assert not (tmp_path / "runs").exists() and not processes_mentioning(str(tmp_path / "corpus"))
    assert ROOT.exists()
