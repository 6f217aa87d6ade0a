"""Shared helpers for the launcher tests: tiny CPU plans, running `python -m launcher`, /proc scans."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

from make_plan import tiny_plan  # noqa: E402

from launcher.spec import Plan, dump  # noqa: E402

PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def foreign_addresses(n: int) -> tuple[str, ...]:
    """Documentation addresses (RFC 5737) that are not this machine's; nothing is ever sent to them."""
    from launcher.command import is_local

    candidates = [f"{net}.{i}" for net in ("203.0.113", "198.51.100", "192.0.2") for i in range(10, 20)]
    return tuple([a for a in candidates if not is_local(a)][:n])


def write_plan(tmp_path: Path, plan: Plan, name: str = "plan.json") -> Path:
    path = tmp_path / name
    dump(plan, path)
    return path


def launcher_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_launcher(
    *args: str,
    timeout: float = 180,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "launcher", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        env=env or launcher_env(),
    )


def start_launcher(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*prefix, PYTHON, "-m", "launcher", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd or ROOT,
        env=env or launcher_env(),
    )


def processes_mentioning(marker: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains `marker` (psutil-free /proc scan)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append((int(name), cmdline))
    return found


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def live_workers(run_dir: Path, node: int = 0) -> list[dict[str, object]]:
    path = run_dir / f"workers.node{node}.json"
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        return []
    return [w for w in doc["workers"] if w["alive"]]


def losses(output: str) -> list[float]:
    return [float(line.split(" loss ")[1].split()[0]) for line in output.splitlines() if " loss " in line]


@pytest.fixture
def cpu_plan():  # type: ignore[no-untyped-def]
    return tiny_plan
