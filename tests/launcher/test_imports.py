"""The launcher process imports nothing from app/ and no torch (torch lives in the processes it starts)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, launcher_env, write_plan
from make_plan import tiny_plan

LAUNCHER = ROOT / "launcher"
HEAVY = ("torch", "deepspeed", "numpy", "app", "pydantic", "fastapi")


def launcher_process_modules() -> list[Path]:
    return [p for p in LAUNCHER.rglob("*.py") if "workers" not in p.parts]


def test_no_module_of_the_launcher_process_imports_heavy_packages() -> None:
    for path in launcher_process_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in HEAVY, f"{path.relative_to(ROOT)} imports {name}"


def test_running_the_verbs_loads_no_torch_and_nothing_from_app(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, tiny_plan())
    code = f"""
import sys, io, contextlib, importlib, pkgutil
import launcher
for mod in pkgutil.walk_packages(launcher.__path__, "launcher."):
    if ".workers" not in mod.name and mod.name != "launcher.__main__":
        importlib.import_module(mod.name)
from launcher.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["dry-run", {str(plan)!r}]) == 0
    assert main(["show", {str(plan)!r}]) == 0
    try:
        main(["--help"])
    except SystemExit:
        pass
bad = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
assert not bad, bad
print("clean", len(sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=launcher_env(), cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("clean")


def test_main_module_help_starts_without_heavy_imports() -> None:
    code = (
        "import runpy, sys\n"
        "sys.argv = ['launcher', '--help']\n"
        "try:\n"
        "    runpy.run_module('launcher', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0\n"
        "assert 'torch' not in sys.modules and 'app' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=launcher_env(), cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "run" in done.stdout and "preflight" in done.stdout and "probe" in done.stdout


# What `run` needs only once the job runs (or to report a failure), and imports after it has started the agents.
DEFERRED = (
    "launcher.watchdog",
    "launcher.recovery",
    "launcher.follow",
    "launcher.watch",
    "launcher.heartbeat",
    "launcher.logprogress",
    "launcher.explain",
    "launcher.stacks",
    "launcher.table",
    "statistics",
    "ctypes",
    "uuid",
    "tempfile",
    "shutil",
    "socket",
    "argparse",  # the usual `run` command line is read without it (launcher/cli.py quick_run_args)
    # types only on the way to the agents' start: TYPE_CHECKING = False, module constants instead of ClassVars, no
    # Protocol or cast at run time (about 2 ms of the ~40 ms start on the 2-core machine, docs/launcher.md "Overhead")
    "typing",
    "_typing",
)


def modules_at_popen(tmp_path: Path) -> set[str]:
    """The modules `run` has loaded when it starts the agent (its Popen), in a fresh interpreter."""
    plan = write_plan(tmp_path, tiny_plan())
    code = f"""
import subprocess, sys
class Started(Exception):
    pass
class Popen(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        print(" ".join(sorted(sys.modules)))
        raise Started
subprocess.Popen = Popen
from launcher.cli import main
try:
    main(["run", {str(plan)!r}, "--run-dir", {str(tmp_path / "run")!r}])
except Started:
    pass
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=launcher_env(), cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    at_popen = set(done.stdout.split())
    assert "launcher.runner" in at_popen and "launcher.spec" in at_popen  # it did get to the Popen
    return at_popen


def test_run_starts_the_agent_before_importing_what_only_a_running_job_needs(tmp_path: Path) -> None:
    """The way from `python -m launcher run` to the agents' Popen is short (docs/launcher.md, "Overhead")."""
    at_popen = modules_at_popen(tmp_path)
    assert not at_popen & set(DEFERRED), sorted(at_popen & set(DEFERRED))


def test_the_dataclasses_run_builds_before_the_agent_starts_have_docstrings(tmp_path: Path) -> None:
    """A dataclass without a docstring gets one made from inspect.signature(cls) when it is built: some 50 us each on
    the way to the agents' start (docs/launcher.md, "Overhead"). A docstring of its own is read by people too."""
    built = [
        cls
        for name in sorted(m for m in modules_at_popen(tmp_path) if m.split(".")[0] == "launcher")
        for cls in vars(importlib.import_module(name)).values()
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == name
    ]
    assert len(built) >= 10  # the plan's classes at least
    undocumented = [f"{c.__module__}.{c.__name__}" for c in built if (c.__doc__ or "").startswith(f"{c.__name__}(")]
    assert not undocumented, undocumented  # what dataclasses writes where a class has no docstring
